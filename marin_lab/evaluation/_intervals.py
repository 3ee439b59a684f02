"""Wilson / stderr intervals used until marin_lab.evaluation.stats is in the tree (same names)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

COVERAGE_FLOOR = 0.9


def wilson_interval(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    if n <= 0:
        return (0.0, 1.0)
    z = 1.959963984540054 if confidence == 0.95 else _z(confidence)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2)


def metric_interval(values: Sequence[float], metric: str, stderr: float | None = None) -> dict[str, Any]:
    n = len(values)
    mean = sum(values) / n if n else float("nan")
    if n and all(v in (0.0, 1.0) for v in values):
        low, high = wilson_interval(sum(values), n)
        return {"value": mean, "low": low, "high": high, "method": "wilson", "n": n}
    if stderr is None and n > 1:
        var = sum((v - mean) ** 2 for v in values) / (n - 1)
        stderr = math.sqrt(var / n)
    if stderr is None:
        return {"value": mean, "low": None, "high": None, "method": None, "n": n}
    return {"value": mean, "low": mean - 1.96 * stderr, "high": mean + 1.96 * stderr, "method": "stderr", "n": n}
