"""Training metrics (`metrics.jsonl`) and eval results (`results.json`) of a step, for plotting."""

from __future__ import annotations

import json
import math

from marin_lab.browser.redact import redact
from marin_lab.browser.storage import child, load_json
from marin_lab.io.fs import fs_and_path

SERIES = ("loss", "learning_rate", "tokens_per_s", "grad_norm", "mfu")
MAX_POINTS = 1000
MAX_METRICS_BYTES = 256 * 1024 * 1024


def _downsample(points: list[list[float]]) -> list[list[float]]:
    """At most MAX_POINTS points, evenly strided, always keeping the last one."""
    if len(points) <= MAX_POINTS:
        return points
    stride = math.ceil(len(points) / MAX_POINTS)
    out = points[::stride]
    if out[-1] is not points[-1]:
        out.append(points[-1])
    return out


def read_metrics(step_dir: str) -> dict:
    """Series of (step, value) for each known metric; bad lines are counted, not fatal."""
    url = child(step_dir, "metrics.jsonl")
    fs, path = fs_and_path(url)
    series: dict[str, list[list[float]]] = {name: [] for name in SERIES}
    bad_lines = 0
    rows = 0
    try:
        size = fs.size(path)
        if size and size > MAX_METRICS_BYTES:
            return {"state": "corrupt", "url": url, "series": {},
                    "error": f"{size} bytes is more than the browser plots; open it in the file viewer"}
        with fs.open(path, "rb") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    bad_lines += 1
                    continue
                if not isinstance(row, dict) or not isinstance(row.get("step"), (int, float)):
                    bad_lines += 1
                    continue
                rows += 1
                for name in SERIES:
                    value = row.get(name)
                    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                        series[name].append([row["step"], value])
    except FileNotFoundError:
        return {"state": "missing", "url": url, "series": {}, "error": "no metrics.jsonl in this step"}
    return {
        "state": "ok",
        "url": url,
        "rows": rows,
        "bad_lines": bad_lines,
        "series": {name: _downsample(points) for name, points in series.items() if points},
    }


def read_results(step_dir: str) -> dict:
    loaded = load_json(child(step_dir, "results.json"))
    return {**loaded.as_json(), "value": redact(loaded.value) if loaded.state == "ok" else None}
