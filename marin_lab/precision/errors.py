"""Errors of number formats (a branch of marin_lab's tree).

PrecisionError    an unknown policy, a setting out of range, or a format this backend cannot run
"""

from __future__ import annotations

from marin_lab.errors import MarinLabError


class PrecisionError(MarinLabError, ValueError):
    """A precision policy cannot be used as asked; the message names the field and what to do."""
