"""`benchmarks/preemption_month.py` runs: two simulated days of the Tootsie plan through the real
executor, with a capacity stall long enough to spend the preemption budget.

Guards the benchmark's invariants, not its figures: every preemption the trace made is one
preemption attempt in the step records (none a failure), goodput is a fraction, and a run whose
budget was spent ends FAILED and is rerun.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "preemption_month.py"


@pytest.fixture(scope="module")
def month() -> ModuleType:
    spec = importlib.util.spec_from_file_location("preemption_month", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_two_days_spend_the_budget_in_a_stall_and_the_records_hold_every_preemption(month, tmp_path):
    # 13 h without capacity at capacity_timeout_s=3600: with the losses before it, more preemptions
    # than max_preemption_retries=10.
    assumptions = month.Assumptions(stall_at_h=6, stall_h=13)
    r = month.simulate(1, assumptions, days=2, interval_s=None, scratch=str(tmp_path))

    assert 0.0 <= r.goodput["goodput"] <= 1.0
    assert r.preemptions_recorded == r.ledger.losses + r.ledger.capacity_timeouts
    assert r.failures_recorded == 0 and r.ledger.misclassified == 0
    assert r.ledger.capacity_timeouts >= 1
    assert r.ledger.relaunches >= 1  # the budget was spent: the run ended FAILED and was rerun
    assert r.wall_h == pytest.approx(48.0)
    assert not r.finished
    assert r.paid_chip_h > 0 and r.cost > 0
    assert sum(r.goodput["badput_chip_hours"].values()) + r.goodput["kept_chip_hours"] == pytest.approx(
        r.goodput["paid_chip_hours"], rel=1e-3
    )


def test_the_command_prints_today_beside_the_best(month, capsys):
    assert month.main(["--days", "1", "--intervals", "60", "--seed", "2", "--what-if-compile-s", "0"]) == 0
    out = capsys.readouterr().out
    assert "30 min (today)" in out and "| 60 min |" in out
    assert "goal goodput >= 95%" in out
    assert "checks: in every run the records hold the trace's preemptions" in out
