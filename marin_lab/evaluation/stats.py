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
- `fmt_cell` / `fmt_diff`: the strings `marin-lab evals` prints and the browser shows: fractions
  in points with their interval, marks for capped and low-coverage results.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

COVERAGE_FLOOR = 0.9
"""A result that scored fewer than this fraction of the items it attempted is flagged low-coverage."""

CONFIDENCE = 0.95

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


def fmt_cell(cell: dict[str, Any] | None) -> str:
    """ "31.0 (22.4-41.0)" for a fraction (in points), "12.3 (11.9-12.7)" otherwise; marks: * capped,
    ! low coverage, "failed" for a failed task."""
    if not cell:
        return "-"
    if cell.get("status") == "failed":
        return "failed"
    text = fmt_value(cell)
    if cell.get("low") is not None and cell.get("high") is not None:
        text += f" ({fmt_value(cell, 'low')}-{fmt_value(cell, 'high')})"
    marks = ("*" if cell.get("capped") else "") + ("!" if cell.get("low_coverage") else "")
    return text + marks


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
