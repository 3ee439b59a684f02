"""Errors of quantization (a branch of marin_lab's tree).

QuantizationError    a block size, shape or sharding that quantized weights cannot take
"""

from __future__ import annotations

from marin_lab.errors import MarinLabError


class QuantizationError(MarinLabError, ValueError):
    """Quantized weights cannot be built or placed as asked; the message names the field."""
