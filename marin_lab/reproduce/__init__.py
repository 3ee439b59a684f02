"""`marin-lab reproduce`: run a recorded experiment again into a scratch prefix and compare its
outputs with the record's manifest (docs/executor.md, "Reproducing a run").

`target.py` reads and checks the experiment record a target names (and the script stored with it)
before anything runs; `rerun.py` plans the recorded steps under the scratch prefix, runs them with
the executor and judges each output. A tool over the executor's records: the executor never
imports it.
"""

from marin_lab.reproduce.rerun import (
    DIFFERS,
    IDENTICAL,
    NOT_CHECKED,
    NOT_REPRODUCIBLE,
    ReproduceReport,
    StepResult,
    reproduce,
)
from marin_lab.reproduce.target import RecordedExperiment, ReproduceError, locate, read_script

__all__ = [
    "DIFFERS",
    "IDENTICAL",
    "NOT_CHECKED",
    "NOT_REPRODUCIBLE",
    "RecordedExperiment",
    "ReproduceError",
    "ReproduceReport",
    "StepResult",
    "locate",
    "read_script",
    "reproduce",
]
