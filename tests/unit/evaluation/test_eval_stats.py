"""marin_lab.evaluation.stats: intervals against textbook values, and their properties."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats as scipy_stats

from marin_lab.evaluation import stats


@pytest.mark.parametrize(
    "k, n, low, high",
    [
        # statsmodels.stats.proportion.proportion_confint(k, n, method="wilson"), 95%
        (0, 10, 0.0, 0.277533),
        (5, 10, 0.236593, 0.763407),
        (10, 10, 0.722467, 1.0),
        # Newcombe (1998), Statistics in Medicine 17:857, table I, the score method, to 4 places
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_known_values(k, n, low, high):
    lo, hi = stats.wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=5e-5) and hi == pytest.approx(high, abs=5e-5)


def test_wilson_edges_and_bad_input():
    assert stats.wilson_interval(0, 0) == (0.0, 1.0)
    lo90, hi90 = stats.wilson_interval(5, 10, confidence=0.90)
    lo95, hi95 = stats.wilson_interval(5, 10)
    assert lo95 < lo90 < hi90 < hi95
    for k, n in ((-1, 10), (11, 10)):
        with pytest.raises(ValueError):
            stats.wilson_interval(k, n)
    with pytest.raises(ValueError):
        stats.wilson_interval(1, 2, confidence=1.0)


def test_wilson_contains_the_proportion_and_shrinks_with_n():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 500)
        k = rng.randint(0, n)
        lo, hi = stats.wilson_interval(k, n)
        assert 0.0 <= lo <= k / n <= hi <= 1.0
    widths = [stats.wilson_interval(n // 3, n) for n in (30, 300, 3000)]
    assert widths[0][1] - widths[0][0] > widths[1][1] - widths[1][0] > widths[2][1] - widths[2][0]


def test_metric_interval_binary_is_wilson():
    r = stats.metric_interval([1.0] * 31 + [0.0] * 69, "acc")
    assert r["method"] == "wilson" and r["n"] == 100 and r["value"] == pytest.approx(0.31)
    assert (r["low"], r["high"]) == pytest.approx(stats.wilson_interval(31, 100))


def test_metric_interval_other_metric_uses_stderr():
    values = [0.5, 1.5, 2.0, 3.0, 0.25]
    r = stats.metric_interval(values, "f1")
    se = scipy_stats.sem(values)
    assert r["method"] == "stderr"
    assert r["low"] == pytest.approx(sum(values) / 5 - 1.959964 * se, rel=1e-5)
    given = stats.metric_interval(values, "f1", stderr=0.1)
    assert given["high"] - given["value"] == pytest.approx(0.1959964, rel=1e-5)
    assert given["low"] <= given["value"] <= given["high"]


def test_metric_interval_drops_nan_and_handles_empty():
    r = stats.metric_interval([1.0, float("nan"), 0.0, None, "x"], "acc")  # type: ignore[list-item]
    assert r["n"] == 2 and r["dropped"] == 3 and r["method"] == "wilson"
    empty = stats.metric_interval([], "acc")
    assert empty["value"] is None and empty["low"] is None


def test_coverage_flags():
    assert stats.COVERAGE_FLOOR == 0.9
    ok = stats.coverage(95, 100)
    assert ok["coverage"] == 0.95 and not ok["low_coverage"] and not ok["capped"]
    low = stats.coverage(89, 100, limit=100)
    assert low["low_coverage"] and low["capped"]
    assert stats.coverage(0, 0)["low_coverage"]


def test_paired_difference_known_values():
    a = {i: v for i, v in enumerate([0, 1, 0, 1, 1, 0, 0, 1, 0, 0])}
    b = {i: v for i, v in enumerate([1, 1, 0, 1, 1, 1, 0, 1, 1, 0])}
    d = stats.paired_difference(a, b)
    diffs = [b[i] - a[i] for i in range(10)]
    res = scipy_stats.ttest_rel(list(b.values()), list(a.values()))
    lo, hi = res.confidence_interval(0.95)
    assert d["n"] == 10 and d["mean"] == pytest.approx(0.3) and d["disagree"] == 3
    assert d["low"] == pytest.approx(lo) and d["high"] == pytest.approx(hi)
    assert d["low"] <= sum(diffs) / 10 <= d["high"]
    assert d["a_mean"] == pytest.approx(0.4) and d["b_mean"] == pytest.approx(0.7)


def test_paired_difference_joins_on_doc_id():
    a = {"x": 1.0, "y": 0.0, "z": 1.0, "only_a": 1.0, "nan": float("nan")}
    b = {"z": 1.0, "y": 1.0, "x": 0.0, "only_b": 0.0, "nan": 1.0}
    d = stats.paired_difference(a, b)
    assert d["n"] == 3 and d["only_a"] == 1 and d["only_b"] == 1
    assert d["mean"] == pytest.approx(0.0)
    assert stats.paired_difference({}, {})["mean"] is None
    one = stats.paired_difference({1: 0.0}, {1: 1.0})
    assert one["mean"] == 1.0 and one["low"] is None
    same = stats.paired_difference({1: 0.0, 2: 1.0}, {1: 1.0, 2: 2.0})
    assert same["degenerate"] and same["low"] == same["high"] == 1.0 and stats.significant(same)


def test_paired_interval_shrinks_with_n_and_beats_unpaired():
    rng = random.Random(1)
    widths = []
    for n in (50, 500, 5000):
        a = {i: float(rng.random() < 0.5) for i in range(n)}
        b = {i: (1.0 if rng.random() < 0.1 else a[i]) for i in range(n)}
        d = stats.paired_difference(a, b)
        assert d["low"] <= d["mean"] <= d["high"]
        widths.append(d["high"] - d["low"])
        lo_a, hi_a = stats.wilson_interval(sum(a.values()), n)
        assert d["high"] - d["low"] < (hi_a - lo_a)  # correlated runs: pairing is tighter
    assert widths[0] > widths[1] > widths[2]


def test_rank_on_lower_bound():
    wide = stats.metric_interval([1.0] * 9 + [0.0], "acc")  # 0.9 of 10
    narrow = stats.metric_interval([1.0] * 800 + [0.0] * 200, "acc")  # 0.8 of 1000
    rows = sorted([("wide", wide), ("narrow", narrow), ("none", None)], key=lambda r: -stats.rank_key(r[1]))
    assert [r[0] for r in rows] == ["narrow", "wide", "none"]
    assert stats.mean_lower_bound([wide, narrow]) == pytest.approx((wide["low"] + narrow["low"]) / 2)
    assert stats.mean_lower_bound([wide, None]) is None


def test_verdict_sentences():
    ahead = {"mean": 0.031, "low": 0.012, "high": 0.050, "n": 1000}
    noise = {"mean": 0.004, "low": -0.01, "high": 0.02, "n": 1000}
    behind = {"mean": -0.05, "low": -0.08, "high": -0.02, "n": 1000}
    assert (
        stats.verdict({"hellaswag": ahead, "piqa": noise, "arc_easy": dict(noise)}, "A", "B")
        == "B is ahead on hellaswag by 3.1 points (1.2 to 5.0); the others are within noise"
    )
    assert stats.verdict({"piqa": noise}, "run1", "run2") == "run1 and run2 are within noise on piqa"
    s = stats.verdict({"boolq": behind, "piqa": noise}, "A", "B")
    assert s == "A is ahead on boolq by 5.0 points (2.0 to 8.0); piqa is within noise"
    assert "no paired items" in stats.verdict({"x": {"mean": None, "low": None, "high": None}})
    assert not math.isnan(stats.rank_key({"value": 0.5, "low": None}))


def test_a_contaminated_cell_says_so_and_an_unchecked_one_is_never_zero():
    cell = {"metric": "acc", "value": 0.6, "low": 0.5, "high": 0.7, "chance": 0.25}
    assert stats.contaminated_fraction({"checked": True, "fraction": 0.04}) == 0.04
    assert stats.fmt_cell({**cell, "contaminated": 0.04}).endswith(" contaminated 4%")
    # Nothing found, or nothing checked: no mark (an unchecked task is never shown as 0% contaminated).
    assert stats.contaminated_fraction({"checked": True, "fraction": 0.0}) is None
    assert stats.contaminated_fraction({"checked": False, "reason": "no data step", "fraction": None}) is None
    assert stats.contaminated_fraction(None) is None
    assert "contaminated" not in stats.fmt_cell({**cell, "contaminated": None})
