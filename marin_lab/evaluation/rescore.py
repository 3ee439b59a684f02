"""Scores from an evaluation's stored samples, without a model: rescoring, clean items, clean comparisons.

- `rescore(path)`: every metric of a results.json whose value is the mean of per-item values
  (the right/wrong metrics: acc, acc_norm, exact_match) recomputed with its interval from the
  task's samples file, beside what results.json holds; a damaged samples file is one line naming it
  and its task is skipped. Metrics lm-eval aggregates otherwise (perplexity, f1, mcc) are not
  recomputed: their aggregation is lm-eval's, and it is not re-run here.
- `clean_score`: one metric over the items known to be clean (neither found in the training
  documents nor too short to check), with its interval (`stats.metric_interval`).
- `compare_clean`: `tables.compare` restricted to the items clean in both runs.

The samples files are lm-eval's `--log_samples` records (docs/evaluation.md); the per-item value of
a metric is the record's field of that name (`acc`), under its filter for a named one
(`exact_match,strict-match`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from marin_lab.errors import MarinLabError
from marin_lab.evaluation import stats, tables
from marin_lab.evaluation.results import EvalRun
from marin_lab.evaluation.samples import item_values
from marin_lab.io import fs as mfs
from marin_lab.store.errors import RecordError
from marin_lab.store.eval_results import parse_results
from marin_lab.store.layout import RESULTS_FILE

__all__ = [
    "RescoreError",
    "clean_score",
    "compare_clean",
    "doc_values",
    "metric_values",
    "read_samples_file",
    "rescore",
]

TOLERANCE = 1e-9
"""Stored and recomputed numbers closer than this are the same (JSON keeps 17 digits)."""


class RescoreError(MarinLabError, ValueError):
    """A results.json or samples file cannot be read back."""


def read_samples_file(url: str) -> list[dict[str, Any]]:
    """Every record of a samples file; RescoreError naming the file (and line) when it is missing or damaged."""
    name = url.rsplit("/", 1)[-1]
    try:
        raw = mfs.read_bytes(url)
    except FileNotFoundError:
        raise RescoreError(f"{url}: samples file missing") from None
    except OSError as err:
        raise RescoreError(f"{url}: unreadable ({type(err).__name__}: {err})") from None
    records = []
    for i, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as err:
            raise RescoreError(f"{url}: line {i} of {name} is damaged ({type(err).__name__})") from None
        if not isinstance(rec, dict) or "doc_id" not in rec:
            raise RescoreError(f"{url}: line {i} of {name} is not a sample (no doc_id)")
        records.append(rec)
    return records


def _value(rec: dict[str, Any], metric: str) -> float | None:
    value = rec.get(metric)
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _key(rec: dict[str, Any], metric: str) -> str:
    return metric if rec.get("filter", "none") == "none" else f"{metric},{rec['filter']}"


def metric_values(samples: Iterable[dict[str, Any]]) -> dict[str, list[float]]:
    """Per-item values of each metric key (`acc`, or `exact_match,strict-match` for a named filter)."""
    out: dict[str, list[float]] = {}
    for rec in samples:
        for metric in rec.get("metrics", []):
            value = _value(rec, metric)
            if value is not None:
                out.setdefault(_key(rec, metric), []).append(value)
    return out


def doc_values(samples: Iterable[dict[str, Any]], metric: str) -> dict[Any, float]:
    """{doc_id: value} of one metric key over a single task's samples."""
    out: dict[Any, float] = {}
    base = metric.split(",", 1)[0]
    for rec in samples:
        if base in rec.get("metrics", []) and _key(rec, base) == metric:
            value = _value(rec, base)
            if value is not None and isinstance(rec.get("doc_id"), int):
                out[rec["doc_id"]] = value
    return out


def clean_score(
    values: dict[Any, float], metric: str, contaminated: Iterable[Any], unchecked: Iterable[Any] = ()
) -> dict[str, Any]:
    """{metric, n, value, interval: {low, high, method}} of `metric` over the items neither
    contaminated nor unchecked."""
    left_out = set(contaminated) | set(unchecked)
    cell = stats.metric_interval([v for k, v in values.items() if k not in left_out], metric)
    return {
        "metric": metric,
        "n": cell["n"],
        "value": cell["value"],
        "interval": {"low": cell["low"], "high": cell["high"], "method": cell["method"]},
    }


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= TOLERANCE


def _row(task: str, metric: str, stored: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    same = (
        stored is not None
        and new is not None
        and stored.get("n") == new.get("n")
        and all(_same(stored.get(k), new.get(k)) for k in ("value", "low", "high"))
    )
    return {"task": task, "metric": metric, "stored": stored, "rescored": new, "same": same, "note": None}


def rescore(path: str) -> dict[str, Any]:
    """Each mean metric (and clean score) of the evaluation at `path` recomputed from its samples.

    Returns {"path", "rows": [{task, metric, stored, rescored, same, note}], "errors": [line per
    damaged or missing samples file], "differ": count}; RescoreError when results.json cannot be read."""
    folder = path.rstrip("/")
    if folder.endswith("/" + RESULTS_FILE) or folder == RESULTS_FILE:
        folder = folder.rsplit("/", 1)[0] if "/" in folder else "."
    url = mfs.join(folder, RESULTS_FILE)
    try:
        parsed = parse_results(mfs.read_bytes(url), url)
    except FileNotFoundError:
        raise RescoreError(f"{url}: no results.json; give an evaluation step's output folder") from None
    except (OSError, RecordError) as err:
        raise RescoreError(str(err)) from None
    if parsed.format != 2:
        raise RescoreError(f"{url}: not marin_lab's results.json (format 2): it names no samples files to rescore")
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    for name, task in sorted(parsed.tasks.items()):
        if task.status != "ok":
            continue
        if not task.samples_file:
            errors.append(f"{name}: results.json names no samples file; task skipped")
            continue
        try:
            samples = read_samples_file(mfs.join(folder, task.samples_file.rsplit("/", 1)[-1]))
        except RescoreError as err:
            errors.append(f"{name}: {err}; task skipped")
            continue
        grouped = any("task" in s for s in samples)
        values = metric_values(samples)
        for metric, stored in sorted(task.metrics.items()):
            if grouped or not stats.binary_metric(metric):
                row = _row(name, metric, stored, None)
                row["note"] = "a group's aggregate" if grouped else "lm-eval's aggregate: not recomputed"
                row["same"] = None
                rows.append(row)
                continue
            cell = stats.metric_interval(values.get(metric, []), metric)
            rows.append(_row(name, metric, stored, {k: cell[k] for k in ("value", "low", "high", "method", "n")}))
        found = task.contamination or {}
        clean = found.get("clean") if found.get("checked") else None
        if isinstance(clean, dict) and isinstance(clean.get("metric"), str):
            metric = clean["metric"]
            new = clean_score(doc_values(samples, metric), metric, found["contaminated_ids"], found["unchecked_ids"])
            flat = lambda c: {"value": c.get("value"), "n": c.get("n"), **(c.get("interval") or {})}  # noqa: E731
            rows.append(_row(name, f"{metric} (clean items)", flat(clean), flat(new)))
    return {"path": folder, "rows": rows, "errors": errors, "differ": sum(1 for r in rows if r["same"] is False)}


def _left_out(run: EvalRun, task: str) -> tuple[set[Any] | None, str | None]:
    """The items of `task` not known to be clean in `run`, or None and why they are not known."""
    tr = run.tasks.get(task)
    found = tr.contamination if tr is not None else None
    if not found:
        return None, f"contamination not recorded in {run.key}"
    if not found.get("checked"):
        return None, f"contamination not checked in {run.key} ({found.get('reason') or 'no reason recorded'})"
    return set(found["contaminated_ids"]) | set(found["unchecked_ids"]), None


def compare_clean(
    run_a: EvalRun, run_b: EvalRun, tasks_regex: str | None = None, metric: str | None = None
) -> dict[str, Any]:
    """`tables.compare` on the items clean in both runs: an item found in either run's training
    documents (or too short to check in either) is left out, and each row says how many were."""
    result = tables.compare(run_a, run_b, tasks_regex, metric)
    for task, entry in result["tasks"].items():
        if not entry["paired"]:
            continue
        out_a, why_a = _left_out(run_a, task)
        out_b, why_b = _left_out(run_b, task)
        if out_a is None or out_b is None:
            why = why_a or why_b
            entry.update(
                paired=False, unpaired=why, diff=None, text="no verdict", sentence=f"no verdict on {task}: {why}"
            )
            continue
        left_out = out_a | out_b
        va, na = item_values(run_a, task, entry["metric"])
        vb, nb = item_values(run_b, task, entry["metric"])
        result["notes"].extend(na + nb)
        va = {k: v for k, v in va.items() if k not in left_out}
        vb = {k: v for k, v in vb.items() if k not in left_out}
        diff = stats.paired_difference(va, vb)
        entry.update(
            diff=diff,
            left_out=len(left_out),
            sentence=stats.verdict({task: diff}, run_a.label, run_b.label),
            text=tables.fmt_diff(diff, stats.is_fraction(entry["a"] or {"metric": entry["metric"]})),
            disagreements=[k for k in entry["disagreements"] if k not in left_out],
        )
    diffs = {t: e["diff"] for t, e in result["tasks"].items() if e["paired"]}
    unpaired = sorted(t for t, e in result["tasks"].items() if not e["paired"])
    sentence = stats.verdict(diffs, run_a.label, run_b.label) if diffs else "no task whose clean items pair"
    if unpaired:
        sentence += f"; no verdict on {', '.join(unpaired)} (see the row)"
    result["verdict"] = sentence
    result["method"] = tables.PAIRED_METHOD + "; only the items clean in both runs (contamination, docs/evaluation.md)"
    return result
