"""Statistics for evaluation numbers a researcher can defend: intervals, coverage, paired comparisons.

Pure Python with numpy and scipy (no JAX), shared by the evaluation step (which writes the intervals
into results.json), `marin-lab evals` and the browser, so all three show the same numbers.

- `wilson_interval`: the Wilson score interval of a proportion; unlike the normal ("Wald")
  interval it never leaves [0, 1] and is not of zero width at 0/n or n/n.
- `metric_interval`: per-item values of one metric -> value and interval. All values 0 or 1
  (accuracy, exact match) -> Wilson (method "wilson"); otherwise mean +/- z * stderr, with lm-eval's
  stderr when given, else the sample standard error (method "stderr").
- `coverage`: items scored / items attempted, flagged below `COVERAGE_FLOOR`; a `limit` flags a
  result as capped (it scored a subset of the task, so it is not the benchmark's number).
- `paired_difference`: two runs on the same items (joined on doc_id): the mean of the per-item
  differences b - a and its interval from their standard error. Pairing removes the variance that
  item difficulty shares between the runs, so it separates two models that unpaired intervals
  cannot. The interval uses Student's t with n - 1 degrees of freedom for every metric, binary ones
  included: a difference of two 0/1 values is -1, 0 or +1, not a proportion, so Wilson does not
  apply; t is the standard paired-test interval (it is the normal interval to 3 digits past ~100
  items, and wider, so more honest, below). With n < 2 or all differences equal, the interval is
  the mean itself when n >= 2 (no spread was seen: said by `degenerate`), None when n < 2.
- `rank_key` / `rank_rows`: rankings sort on the interval's lower bound (what a model is at
  least, with 95% confidence), not on the point estimate.
- `verdict`: one plain sentence for a set of per-task differences.
- `primary_metric`: the one metric a task is shown and ranked by, everywhere (acc_norm where the
  task reports it, else acc, exact_match, ...).
- `chance_level` / `at_chance`: what guessing scores on a multiple-choice task (1 / its number of
  choices, averaged over its items), and whether a result's interval reaches down to it.
- `separation`: whether a leaderboard cell's interval lies wholly above or below another model's
  (the only cells the browser colours).
- `fmt_cell` / `fmt_diff` / `task_line`: the strings `marin-lab evals` prints, the browser shows
  and the evaluation step logs: fractions in points with their interval, marks for capped and
  low-coverage results, "at chance".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

COVERAGE_FLOOR = 0.9
"""A result that scored fewer than this fraction of the items it attempted is flagged low-coverage."""

CONFIDENCE = 0.95

PRIMARY_METRICS = ("acc_norm", "acc", "exact_match", "f1", "mcc", "word_perplexity", "perplexity")
"""The metric a task is shown and ranked by, the first of these it has (lm-eval's usual headline
metric: acc_norm where a task reports it, as Marin's CORE_TASKS tables do; else acc, exact_match...)."""

WILSON = "wilson"
STDERR = "stderr"
T_PAIRED = "paired-t"


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence!r} must lie strictly between 0 and 1")
    from scipy import special  # here, not at import: the `marin-lab` command starts without scipy

    return float(special.ndtri(0.5 + confidence / 2.0))


def wilson_interval(successes: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval (low, high) of `successes` out of `n`; (0.0, 1.0) when n is 0."""
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"wilson_interval: need 0 <= successes <= n, got {successes!r} of {n!r}")
    if n == 0:
        return 0.0, 1.0
    z = _z(confidence)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0/n and n/n the exact bound is 0 or 1; floating point can miss it by an ulp.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def _finite(values: Iterable[Any]) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, bool) or (isinstance(v, (int, float)) and math.isfinite(v)):
            out.append(float(v))
    return out


def is_binary(values: Sequence[float]) -> bool:
    return len(values) > 0 and all(v in (0.0, 1.0) for v in values)


def metric_interval(
    values: Sequence[float], metric: str = "", stderr: float | None = None, confidence: float = CONFIDENCE
) -> dict[str, Any]:
    """Value and interval of one metric from its per-item values.

    Returns {value, low, high, method, n, metric}; values that are not finite numbers are left out
    (`dropped` counts them). Binary values -> Wilson; other values -> mean +/- z * stderr, where
    stderr is lm-eval's when given (it knows the metric's aggregation), else the sample standard
    error of the mean. No values -> value, low and high None.
    """
    clean = _finite(values)
    out: dict[str, Any] = {"metric": metric, "n": len(clean), "dropped": len(values) - len(clean)}
    if not clean:
        return {**out, "value": None, "low": None, "high": None, "method": None}
    mean = float(np.mean(clean))
    if is_binary(clean):
        low, high = wilson_interval(sum(clean), len(clean), confidence)
        return {**out, "value": mean, "low": low, "high": high, "method": WILSON}
    return {**out, **stderr_interval(mean, stderr if stderr is not None else _sample_stderr(clean), confidence)}


def stderr_interval(value: float, stderr: float | None, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """{value, low, high, method "stderr"} for a mean and its standard error (lm-eval's "_stderr")."""
    if stderr is None or not math.isfinite(stderr) or stderr < 0:
        return {"value": value, "low": None, "high": None, "method": STDERR}
    z = _z(confidence)
    return {"value": value, "low": value - z * stderr, "high": value + z * stderr, "method": STDERR}


def aggregate_interval(
    value: float, n: int | None, stderr: float | None = None, confidence: float = CONFIDENCE, binary: bool = True
) -> dict[str, Any]:
    """An interval from an aggregate alone (no per-item values): Wilson from value * n for a binary
    metric (accuracy), else value +/- z * stderr. For results that carry only a mean and n."""
    if binary and n and 0.0 <= value <= 1.0:
        successes = round(value * n)
        low, high = wilson_interval(successes, n, confidence)
        return {"value": value, "low": low, "high": high, "method": WILSON, "n": n}
    return {**stderr_interval(value, stderr, confidence), "n": n}


def _sample_stderr(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def coverage(scored: int, attempted: int, limit: int | None = None) -> dict[str, Any]:
    """{scored, attempted, coverage, low_coverage, capped}: coverage is None when nothing was
    attempted (and then low_coverage is True: there is no result to trust)."""
    cov = scored / attempted if attempted > 0 else None
    return {
        "scored": scored,
        "attempted": attempted,
        "coverage": cov,
        "low_coverage": cov is None or cov < COVERAGE_FLOOR,
        "capped": limit is not None,
    }


def paired_difference(a: Mapping[Any, float], b: Mapping[Any, float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The mean per-item difference b - a over the items both runs scored, and its interval.

    Returns {mean, low, high, n, method, only_a, only_b, a_mean, b_mean, disagree, degenerate}:
    n items in common (a non-finite value on either side leaves the item out), only_a / only_b the
    items one run scored and the other did not (a paired comparison should have none), a_mean /
    b_mean each run's mean over the common items, disagree the common items whose values differ.
    The interval is mean +/- t(n-1) * sd / sqrt(n) of the paired differences (see the module doc).
    """
    common = []
    for key, va in a.items():
        if key in b:
            fa, fb = _finite([va]), _finite([b[key]])
            if fa and fb:
                common.append((key, fa[0], fb[0]))
    only_a = sum(1 for k in a if k not in b)
    only_b = sum(1 for k in b if k not in a)
    n = len(common)
    out: dict[str, Any] = {
        "n": n,
        "only_a": only_a,
        "only_b": only_b,
        "method": T_PAIRED,
        "confidence": confidence,
        "degenerate": False,
    }
    if n == 0:
        return {**out, "mean": None, "low": None, "high": None, "a_mean": None, "b_mean": None, "disagree": 0}
    diffs = np.array([vb - va for _, va, vb in common])
    mean = float(diffs.mean())
    out.update(
        mean=mean,
        a_mean=float(np.mean([c[1] for c in common])),
        b_mean=float(np.mean([c[2] for c in common])),
        disagree=int(np.count_nonzero(diffs)),
    )
    if n < 2:
        return {**out, "low": None, "high": None}
    sd = float(diffs.std(ddof=1))
    if sd == 0.0:
        return {**out, "low": mean, "high": mean, "degenerate": True}
    from scipy import special  # as in _z

    t = float(special.stdtrit(n - 1, 0.5 + confidence / 2.0))
    half = t * sd / math.sqrt(n)
    return {**out, "low": mean - half, "high": mean + half, "stderr": sd / math.sqrt(n)}


def significant(diff: Mapping[str, Any]) -> bool:
    """True when the interval of a difference excludes zero."""
    low, high = diff.get("low"), diff.get("high")
    if low is None or high is None:
        return False
    return bool(low > 0 or high < 0)


def rank_key(interval: Mapping[str, Any] | None) -> float:
    """Sort key for ranking (higher first): the interval's lower bound; no interval sorts last."""
    if not interval:
        return -math.inf
    low = interval.get("low")
    if low is None or not math.isfinite(low):
        value = interval.get("value")
        return -math.inf if value is None else -1e300  # a bare value ranks below every interval
    return float(low)


def mean_lower_bound(intervals: Sequence[Mapping[str, Any] | None]) -> float | None:
    """The mean of the lower bounds over the given tasks (a model missing one of them has no mean:
    None), the multi-task rank of `marin-lab evals`."""
    lows = []
    for it in intervals:
        if not it or it.get("low") is None or not math.isfinite(it["low"]):
            return None
        lows.append(float(it["low"]))
    return float(np.mean(lows)) if lows else None


def points(x: float | None) -> str:
    """A fraction as points (0.031 -> "3.1")."""
    return "n/a" if x is None else f"{100 * x:.1f}"


def verdict(
    diffs: Mapping[str, Mapping[str, Any]], a: str = "A", b: str = "B", scale: float = 100.0, unit: str = "points"
) -> str:
    """One plain sentence over per-task paired differences (b - a):
    "B is ahead on hellaswag by 3.1 points (1.2 to 5.0); the others are within noise"."""
    ahead_b: list[str] = []
    ahead_a: list[str] = []
    noise: list[str] = []
    missing: list[str] = []
    for task in sorted(diffs):
        d = diffs[task]
        if d.get("mean") is None or d.get("low") is None:
            missing.append(task)
        elif significant(d):
            (ahead_b if d["mean"] > 0 else ahead_a).append(task)
        else:
            noise.append(task)

    def clause(who: str, tasks: list[str], sign: float) -> str:
        parts = []
        for t in tasks:
            d = diffs[t]
            lo, hi = sorted((sign * d["low"] * scale, sign * d["high"] * scale))
            parts.append(f"on {t} by {sign * d['mean'] * scale:.1f} {unit} ({lo:.1f} to {hi:.1f})")
        return f"{who} is ahead " + ", ".join(parts)

    sentences = []
    if ahead_b:
        sentences.append(clause(b, ahead_b, 1.0))
    if ahead_a:
        sentences.append(clause(a, ahead_a, -1.0))
    if noise:
        if sentences:
            sentences.append("the others are within noise" if len(noise) > 1 else f"{noise[0]} is within noise")
        else:
            sentences.append(f"{a} and {b} are within noise on " + ", ".join(noise))
    if missing:
        sentences.append("no paired items to compare on " + ", ".join(missing))
    return "; ".join(sentences) if sentences else "nothing to compare"


def task_verdict(task: str, d: Mapping[str, Any], a: str = "A", b: str = "B") -> str:
    """The sentence for one task."""
    return verdict({task: d}, a, b)


def binary_metric(metric: str) -> bool:
    """Whether a metric (`acc`, `exact_match,strict-match`) takes per-item values 0 or 1."""
    base = metric.split(",", 1)[0]
    return base == "exact_match" or base.startswith("acc")


def is_fraction(cell: dict[str, Any]) -> bool:
    return cell.get("method") == WILSON or binary_metric(str(cell.get("metric", "")))


def fmt_value(cell: dict[str, Any] | None, key: str = "value") -> str:
    if not cell or cell.get(key) is None:
        return "n/a"
    v = float(cell[key])
    return f"{100 * v:.1f}" if is_fraction(cell) else f"{v:.4g}"


def primary_metric(names: Iterable[str], metric: str | None = None) -> str | None:
    """The metric shown for a task reporting `names`: `metric` when it is one of them, else the first
    of PRIMARY_METRICS, else the first name in order; None when there is none."""
    have = sorted(names)
    if metric:
        return metric if metric in have else None
    return next((m for m in PRIMARY_METRICS if m in have), next(iter(have), None))


def chance_level(samples: Iterable[Mapping[str, Any]]) -> float | None:
    """What picking a choice at random scores on a multiple-choice task: 1 / the item's number of
    choices, averaged over its items (lm-eval's samples records: one (context, continuation) request
    per choice). None when any item is not a choice among two or more (a generation, lambada's one
    continuation): such a task has no chance level."""
    total, n = 0.0, 0
    for rec in samples:
        args = rec.get("arguments")
        reqs = list(args.values()) if isinstance(args, dict) else args
        if not isinstance(reqs, list) or len(reqs) < 2:
            return None
        for r in reqs:
            pair = list(r.values()) if isinstance(r, dict) else r
            if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(isinstance(x, str) for x in pair):
                return None
        total += 1.0 / len(reqs)
        n += 1
    return total / n if n else None


def at_chance(cell: Mapping[str, Any]) -> bool:
    """Whether a result is no better than guessing: its interval includes or lies below the task's
    chance level (without an interval, its value is at or below it)."""
    chance = cell.get("chance")
    if chance is None or cell.get("value") is None:
        return False
    low = cell.get("low")
    return bool((low if low is not None else cell["value"]) <= chance)


def separation(cell: Mapping[str, Any] | None, others: Sequence[Mapping[str, Any] | None]) -> str | None:
    """ "above" when the cell's interval lies wholly above another model's on the same task and
    wholly below none, "below" the other way round, else None (every gap within noise, or both)."""
    if not cell or cell.get("low") is None or cell.get("high") is None:
        return None
    above = below = False
    for o in others:
        if not o or o is cell or o.get("low") is None or o.get("high") is None:
            continue
        above = above or cell["low"] > o["high"]
        below = below or cell["high"] < o["low"]
    return "above" if above and not below else "below" if below and not above else None


def contaminated_fraction(contamination: Mapping[str, Any] | None) -> float | None:
    """The fraction of a task's items found in the model's training data, when that was checked and
    some were found; None when none were found or nothing was checked (never shown as 0)."""
    if not contamination or not contamination.get("checked"):
        return None
    fraction = contamination.get("fraction")
    return float(fraction) if isinstance(fraction, (int, float)) and fraction > 0 else None


def cap_mark(cell: Mapping[str, Any]) -> str:
    """ "*" for a seeded random sample of the task's items, "^" for its first N items, "" uncapped."""
    if not cell.get("capped"):
        return ""
    return "^" if cell.get("limit_mode") in ("first", None) else "*"


def fmt_cell(cell: dict[str, Any] | None) -> str:
    """ "31.0 (22.4-41.0)" for a fraction (in points), "12.3 (11.9-12.7)" otherwise; marks: * a
    sampled subset, ^ the first N items, ! low coverage; "at chance" when the interval reaches the
    task's chance level; "contaminated N%" when that share of its items was found in the model's
    training data; "failed" for a failed task."""
    if not cell:
        return "-"
    if cell.get("status") == "failed":
        return "failed"
    text = fmt_value(cell)
    if cell.get("low") is not None and cell.get("high") is not None:
        text += f" ({fmt_value(cell, 'low')}-{fmt_value(cell, 'high')})"
    text += cap_mark(cell) + ("!" if cell.get("low_coverage") else "")
    text += " at chance" if at_chance(cell) else ""
    if cell.get("contaminated"):
        text += f" contaminated {100 * cell['contaminated']:.0f}%"
    return text


def split_note(split: str | None, default_split: str | None) -> str:
    """ "validation split (task default test)" where the split scored is not the task's default."""
    if split and default_split and split != default_split:
        return f"{split} split (task default {default_split})"
    return ""


def task_line(task: str, cell: Mapping[str, Any] | None) -> str:
    """One task's result in one line, as the evaluation step logs it and the quickstart prints it:
    "arc_easy: acc_norm 21.0 (14.2-29.9) at chance (chance 25.0), validation split (task default
    test), a random sample of 100 of 570 items (seed 1234)"."""
    if not cell or cell.get("status") == "failed":
        return f"{task}: failed ({(cell or {}).get('error') or 'no metric recorded'})"
    parts = [f"{task}: {cell.get('metric')} {fmt_cell(dict(cell))}"]
    if cell.get("chance") is not None:
        parts[0] += f" (chance {points(cell['chance'])})"
    if note := split_note(cell.get("split"), cell.get("default_split")):
        parts.append(note)
    if cap := cap_text(cell):
        parts.append(cap)
    if cell.get("low_coverage"):
        parts.append("low coverage")
    return ", ".join(parts)


def entry_line(task: str, entry: Mapping[str, Any]) -> str:
    """`task_line` of a task entry as `evaluate_lm` writes it into results.json (its step log line)."""
    if entry.get("status") == "failed":
        return task_line(task, {"status": "failed", "error": entry.get("error")})
    metrics = entry.get("metrics") or {}
    name = primary_metric(metrics)
    if name is None:
        return task_line(task, None)
    totals = entry.get("total_items")
    cell = {
        **metrics[name],
        "metric": name,
        **{k: entry.get(k) for k in ("capped", "low_coverage", "limit", "limit_mode", "sample_seed", "split")},
        "default_split": entry.get("default_split"),
        "total_items": sum(totals.values()) if isinstance(totals, dict) else totals,
        "chance": entry.get("chance") if binary_metric(name) else None,
    }
    return task_line(task, cell)


def cap_text(cell: Mapping[str, Any]) -> str:
    """How a capped result picked its items, in words ("" when not capped)."""
    if not cell.get("capped"):
        return ""
    n = cell.get("n") or cell.get("limit")
    total = cell.get("total_items")
    of = f" of {total}" if total else ""
    if cell.get("limit_mode") == "sample":
        seed = cell.get("sample_seed")
        return f"a random sample of {n}{of} items" + (f" (seed {seed})" if seed is not None else "")
    return f"the first {n}{of} items only (not a sample)"


def fmt_diff(diff: dict[str, Any], fraction: bool = True) -> str:
    if diff.get("mean") is None:
        return "n/a"
    scale = 100.0 if fraction else 1.0
    text = f"{scale * diff['mean']:+.1f}" if fraction else f"{diff['mean']:+.4g}"
    if diff.get("low") is not None:
        text += (
            f" ({scale * diff['low']:+.1f} to {scale * diff['high']:+.1f})"
            if fraction
            else f" ({diff['low']:+.4g} to {diff['high']:+.4g})"
        )
    return text
