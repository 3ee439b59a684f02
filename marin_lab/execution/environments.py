"""The older path of `marin_lab.environments` (per-step locked environments), which experiment files
written from an earlier docs/environments.md import: `from marin_lab.execution.environments import
StepEnvironment` keeps working. New code imports `marin_lab.environments`."""

from marin_lab.environments import *  # noqa: F403 - the same names, listed once in marin_lab.environments
from marin_lab.environments import __all__  # noqa: F401
