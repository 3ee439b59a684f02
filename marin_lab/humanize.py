"""Quantities as a person reads them in a progress line."""

from __future__ import annotations


def format_duration(seconds: float) -> str:
    """`45 s`, `2 min 5 s`, `1 h 3 min`: a remaining or elapsed time, rounded to the second."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"
