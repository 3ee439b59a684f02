"""Terminal text made fit for records, files and the browser."""

from __future__ import annotations

import re
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """`text` without terminal colour and cursor codes (Ray's errors carry them): records are read in
    the browser and in files, not only on terminals."""
    return _ANSI.sub("", text) if isinstance(text, str) else text


def strip_ansi_in(value: Any) -> Any:
    """`value` (JSON data) with `strip_ansi` applied to every string in it: records written before
    errors were stripped, or by other tools, are shown clean."""
    if isinstance(value, str):
        return strip_ansi(value)
    if isinstance(value, dict):
        return {k: strip_ansi_in(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strip_ansi_in(v) for v in value]
    return value
