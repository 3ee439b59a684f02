"""`marin_lab.training.attention` is `marin_lab.models.attention` (the model sits below peft/, quant/ and
precision/, docs/architecture.md); this name stays for experiment files that import it."""

import sys

from marin_lab.models import attention

sys.modules[__name__] = attention
