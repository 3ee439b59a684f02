"""Errors of the trainer.

    TrainingError            bad config or input found before training, or a NaN loss
    ├── (wraps) MeshError        mesh shape does not fit the devices   (training.mesh)
    ├── (wraps) TokenCacheError  missing/malformed/too-small cache    (training.token_cache)
    └── (wraps) CheckpointError  missing/incomplete/mismatched checkpoint (training.checkpoint)

All of them are MarinLabErrors (marin_lab/errors.py).
"""

from __future__ import annotations

from marin_lab.errors import MarinLabError


class TrainingError(MarinLabError):
    """A training step cannot start or cannot go on; the message names the field or step."""
