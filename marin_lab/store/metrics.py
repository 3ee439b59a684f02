"""A training step's `metrics.jsonl` (`layout.METRICS_FILE`): one JSON object a line, each with a
finite `step`. One parser for every reader: the trainer resuming (it keeps the lines before the
resumed step) and the browser's plots, comparisons and listings.

Tolerant by line: a line that is not such an object is a bad line, counted and skipped, never an
error for the whole file; a last line without its newline that does not parse is a line still
being written (a torn write), skipped without being counted as bad.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any


@dataclasses.dataclass
class Metrics:
    rows: list[dict[str, Any]]
    """The good lines' objects, in file order."""
    bad_lines: int = 0
    torn: bool = False
    """The last line was cut short (no newline, not JSON): left out, not counted as bad."""


def parse_metrics_line(line: bytes | str) -> dict[str, Any] | None:
    """The row of one line, or None for a bad line: not JSON, not an object, no finite `step`, or
    a number no float can hold (an integer of 309 digits or more: plotting it would overflow)."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(row, dict) or not all(_fits_a_float(v) for v in row.values()):
        return None
    step = row.get("step")
    if not isinstance(step, (int, float)) or isinstance(step, bool) or not math.isfinite(step):
        return None
    return row


def parse_metrics(raw: bytes) -> Metrics:
    """Every row of a whole `metrics.jsonl` (see the module doc for bad and torn lines)."""
    lines = raw.split(b"\n")
    last = lines.pop()  # after the final newline: empty, unless the last line is torn
    out = Metrics([])
    for line in lines:
        if not line.strip():
            continue
        row = parse_metrics_line(line)
        if row is None:
            out.bad_lines += 1
        else:
            out.rows.append(row)
    if last.strip():
        row = parse_metrics_line(last)
        if row is None:
            out.torn = True
        else:
            out.rows.append(row)
    return out


def _fits_a_float(value: object) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            return False
    return True
