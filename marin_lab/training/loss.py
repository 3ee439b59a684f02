"""`marin_lab.training.loss` is `marin_lab.models.loss` (the model sits below peft/, quant/ and
precision/, docs/architecture.md); this name stays for experiment files that import it."""

import sys

from marin_lab.models import loss

sys.modules[__name__] = loss
