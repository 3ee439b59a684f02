"""Training metrics (`metrics.jsonl`) and eval results (`results.json`) of a step, for plotting.

A plot needs at most `MAX_POINTS` points per series, so a request never parses more than
`SCAN_BYTES` of the file: a larger file is sampled in `WINDOWS` evenly spaced windows, the last
one ending at the file's end (the latest steps always show). Points are thinned while they are
read, so memory stays bounded by the plot, not by the file.

Every answer also names the numeric keys the rows hold (at most `MAX_KEYS`), so a page can offer
any of them; asking for one (`metric=`) reads that series alone, which is how the compare view
overlays one metric of many runs without carrying every series of each.
"""

from __future__ import annotations

import io
import math
from typing import IO

from marin_lab.browser.errors import ForbiddenPathError, NotFoundError
from marin_lab.browser.paths import Roots
from marin_lab.browser.storage import child, load_json, open_file
from marin_lab.io.secrets import is_secret_field, redact
from marin_lab.store.layout import METRICS_FILE, RESULTS_FILE
from marin_lab.store.metrics import parse_metrics_line

SERIES = ("loss", "learning_rate", "tokens_per_s", "grad_norm", "mfu")
FP8_PREFIX = "fp8/"
"""Float8 statistics (per-layer amax, saturated and flushed fractions) are plotted too."""
MAX_FP8_SERIES = 256
"""At most this many fp8/ series per step (a 64-layer model logs 5 per layer plus 2)."""
MAX_VALIDATION_SERIES = 16
"""At most this many validation losses (`eval/<set>/loss`) per step, charted beside the training loss."""
MAX_KEYS = 512
"""At most this many metric names are listed per step (names longer than MAX_KEY_CHARS are skipped)."""
MAX_KEY_CHARS = 200
MAX_POINTS = 1000
SCAN_BYTES = 16 * 1024 * 1024
WINDOWS = 256


class _Thinned:
    """A series of points kept at a stride that doubles whenever it holds 2 * MAX_POINTS."""

    def __init__(self) -> None:
        self.points: list[list[float]] = []
        self.stride = 1
        self.seen = 0
        self.last: list[float] | None = None

    def add(self, point: list[float]) -> None:
        if self.seen % self.stride == 0:
            self.points.append(point)
            if len(self.points) >= 2 * MAX_POINTS:
                self.points = self.points[::2]
                self.stride *= 2
        self.seen += 1
        self.last = point

    def result(self) -> list[list[float]]:
        points = self.points
        while len(points) > MAX_POINTS:
            points = points[::2]
        if self.last is not None and (not points or points[-1] is not self.last):
            points = [*points, self.last]
        return points


def _windows(size: int) -> list[tuple[int, int]]:
    """(start, length) of the parts of a file of `size` bytes that one request parses."""
    if size <= SCAN_BYTES:
        return [(0, size)]
    length = SCAN_BYTES // WINDOWS
    return [(i * (size - length) // (WINDOWS - 1), length) for i in range(WINDOWS)]


def _lines(f: IO[bytes], start: int, length: int, size: int) -> list[bytes]:
    """The complete lines inside [start, start + length) of the file."""
    f.seek(start)
    data = f.read(length)
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # begins mid-line (or right after one: then it is empty anyway)
    if start + len(data) < size:
        lines = lines[:-1]  # ends mid-line
    return lines


def read_metrics(roots: Roots, step_dir: str, metric: str | None = None) -> dict:
    """Series of (step, value) for each known metric, the float8 statistics and the validation
    losses; bad lines (see `store.metrics.parse_metrics_line`) are counted, not fatal.

    With `metric`, only that series (any key of the rows, e.g. `eval/valid/loss`) is read.
    """
    url = child(step_dir, METRICS_FILE)
    wanted = (metric,) if metric else SERIES
    series = {name: _Thinned() for name in wanted}
    keys: set[str] = set()
    bad_lines = 0
    rows = 0
    fp8_count = eval_count = 0
    try:
        f = open_file(roots, url)
    except (NotFoundError, FileNotFoundError):
        return {"state": "missing", "url": url, "series": {}, "error": f"no {METRICS_FILE} in this step"}
    except (ForbiddenPathError, OSError) as err:
        return {"state": "corrupt", "url": url, "series": {}, "error": f"not read: {err}"}
    with f:
        size = f.seek(0, io.SEEK_END)
        windows = _windows(size)
        for start, length in windows:
            chunks = [_lines(f, start, length, size)] if len(windows) > 1 else _chunks(f, size)
            for lines in chunks:
                for line in lines:
                    if not line.strip():
                        continue
                    row = parse_metrics_line(line)
                    if row is None:
                        bad_lines += 1
                        continue
                    rows += 1
                    for name in wanted:
                        _add(series[name], row, name)
                    for name in row:
                        if len(keys) < MAX_KEYS and name not in keys and _plottable(row, name):
                            keys.add(name)
                        if metric or name in wanted:
                            continue
                        if name.startswith(FP8_PREFIX) and (name in series or fp8_count < MAX_FP8_SERIES):
                            fp8_count += name not in series
                            _add(series.setdefault(name, _Thinned()), row, name)
                        elif is_validation_loss(name) and (name in series or eval_count < MAX_VALIDATION_SERIES):
                            eval_count += name not in series
                            _add(series.setdefault(name, _Thinned()), row, name)
    out = {
        "state": "ok",
        "url": url,
        "rows": rows,
        "bad_lines": bad_lines,
        "series": {name: s.result() for name, s in series.items() if s.seen},
        "keys": sorted(keys),
    }
    if len(windows) > 1:
        out["sampled"] = {"bytes_read": sum(n for _, n in windows), "size": size, "windows": len(windows)}
    return out


def is_validation_loss(name: str) -> bool:
    """`eval/<set>/loss`, the loss on a validation set that training logs every `steps_per_eval`."""
    return name.startswith("eval/") and name.endswith("/loss") and len(name) > len("eval//loss")


def _add(points: _Thinned, row: dict, name: str) -> None:
    value = row.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        points.add([row["step"], value])


def _plottable(row: dict, name: str) -> bool:
    """A name worth offering: a number, not the step or time, not secret-looking, not huge."""
    value = row[name]
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and name not in ("step", "time")
        and isinstance(name, str)
        and len(name) <= MAX_KEY_CHARS
        and not is_secret_field(name)
    )


def _chunks(f: IO[bytes], size: int, chunk: int = 1024 * 1024):
    """The whole (small) file as lists of complete lines, one chunk at a time."""
    f.seek(0)
    carry = b""
    while True:
        data = f.read(chunk)
        if not data:
            if carry:
                yield [carry]
            return
        lines = (carry + data).split(b"\n")
        carry = lines.pop()
        yield lines


def read_results(roots: Roots, step_dir: str) -> dict:
    loaded = load_json(roots, child(step_dir, RESULTS_FILE))
    return {**loaded.as_json(), "value": redact(loaded.value) if loaded.state == "ok" else None}
