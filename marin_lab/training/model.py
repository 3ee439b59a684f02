"""`marin_lab.training.model` is `marin_lab.models.llama` (the model sits below peft/, quant/ and
precision/, docs/architecture.md); this name stays for experiment files that import it."""

import sys

from marin_lab.models import llama

sys.modules[__name__] = llama
