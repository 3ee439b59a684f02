"""What a step cost: money from its record's usage (record/usage.py) and the price table (prices.py).

Accelerator-hours and how they are counted are record/usage.py's; goodput (chip-hours paid against
chip-hours of kept progress, badput by cause) is record/goodput.py's, shown here beside the cost.

**Saved by reuse** is the recorded cost of the steps a run found done instead of running. For the
dry run, a step that would run is estimated from the latest finished record of the same step name
(this identity's, else an earlier version's), else from its config's own estimate
(`plan_estimate()`'s accelerator-hours, e.g. a training config's FLOPs at an assumed MFU), else it is
"unknown".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from marin_lab.execution.errors import RecordError
from marin_lab.execution.plan.resources import describe_resources
from marin_lab.execution.record.goodput import goodput_text, total_goodput
from marin_lab.execution.record.usage import SUCCESS, as_number, declared_accelerator, tpu_key, usage_of
from marin_lab.execution.review.baseline import RecordIndex
from marin_lab.execution.review.prices import PriceTable
from marin_lab.store.step_record import StepRecord, read_step_record


def money(usage: Mapping[str, Any], prices: PriceTable) -> float | None:
    """What the usage cost at `prices`; None when its hours or an accelerator's price are unknown."""
    if usage.get("accelerator_hours") is None:
        return None
    total = 0.0
    for accelerator, hours in usage.get("by_accelerator", {}).items():
        price = prices.price(accelerator)
        if price is None:
            return None
        total += price * hours
    return total


# ---- how amounts read ------------------------------------------------------------------------------


def format_money(value: float | None, currency: str = "USD") -> str:
    if value is None:
        return "unknown"
    sign = "$" if currency == "USD" else f"{currency} "
    if value == 0 or value >= 0.01:
        return f"{sign}{value:,.2f}"
    return f"{sign}{value:.2g}" if value < 1e-6 else f"{sign}{value:.6f}".rstrip("0")


def format_hours(value: float | None) -> str:
    if value is None:
        return "unknown"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 0.01 or value == 0:
        return f"{value:.2f}"
    return f"{value:.2g}"


def _chips(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


# ---- cost of a step and of an experiment -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StepCost:
    """One step's recorded cost, as `marin-lab status --cost` and the browser show it."""

    identity: str
    accelerator: str | None = None
    chips: float | None = None
    accelerator_hours: float | None = None
    preempted_accelerator_hours: float = 0.0
    attempts: int = 0
    money: float | None = None
    recorded: bool = False
    """False: no readable record (never run, or damaged)."""
    reused: bool = False
    """Found done by the experiment's latest run (another driver produced it)."""
    priced: bool = True
    """False when an accelerator it used has no price in the table."""
    currency: str = "USD"
    goodput: dict[str, Any] | None = None
    """The record's `usage.goodput` (record/goodput.py); None in records written before it."""

    @property
    def goodput_text(self) -> str | None:
        """One line when there is something to say: a training step's breakdown, or any badput."""
        g = self.goodput
        if not g or (g.get("basis") != "metrics" and g.get("goodput") == 1):
            return None
        return goodput_text(g)

    @property
    def text(self) -> str:
        if not self.recorded:
            return "no record"
        if self.attempts == 0:
            return "no finished attempt yet"
        hours = format_hours(self.accelerator_hours)
        on = f" on {self.accelerator or 'unknown hardware'} x{_chips(self.chips)}"
        preempted = (
            f", {format_hours(self.preempted_accelerator_hours)} of them preempted"
            if self.preempted_accelerator_hours
            else ""
        )
        price = format_money(self.money, self.currency) if self.priced else f"no price for {self.accelerator}"
        return f"{price} ({hours} accelerator-hours{on}{preempted})" + (" reused" if self.reused else "")

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "text": self.text, "goodput_text": self.goodput_text}


def step_cost(identity: str, record: StepRecord | None, prices: PriceTable, *, reused: bool = False) -> StepCost:
    if record is None:
        return StepCost(identity, recorded=False, currency=prices.currency)
    usage = usage_of(record)
    value = money(usage, prices)
    priced = all(prices.price(a) is not None for a in usage.get("by_accelerator", {}))
    return StepCost(
        identity,
        usage.get("accelerator"),
        as_number(usage.get("chips")),
        usage.get("accelerator_hours"),
        as_number(usage.get("preempted_accelerator_hours")) or 0.0,
        int(usage.get("attempts") or 0),
        value,
        recorded=True,
        reused=reused,
        priced=priced,
        currency=prices.currency,
        goodput=usage.get("goodput") if isinstance(usage.get("goodput"), dict) else None,
    )


@dataclasses.dataclass(frozen=True)
class ExperimentCost:
    """An experiment's steps' costs, their sum, and what its latest run saved by reusing steps."""

    steps: list[StepCost]
    currency: str = "USD"

    def _sum(self, costs: Sequence[StepCost]) -> tuple[float, float, int]:
        hours = sum(c.accelerator_hours or 0.0 for c in costs)
        value = sum(c.money or 0.0 for c in costs)
        unknown = sum(1 for c in costs if c.attempts and c.money is None)
        return hours, value, unknown

    def totals(self) -> dict[str, Any]:
        hours, value, unknown = self._sum([c for c in self.steps if c.recorded])
        saved_steps = [c for c in self.steps if c.reused]
        s_hours, s_value, s_unknown = self._sum(saved_steps)
        return {
            "accelerator_hours": round(hours, 6),
            "money": round(value, 6),
            "unknown": unknown,
            "saved_accelerator_hours": round(s_hours, 6),
            "saved_money": round(s_value, 6),
            "saved_steps": len(saved_steps),
            "saved_unknown": s_unknown,
            "goodput": total_goodput([c.goodput for c in self.steps if c.recorded and not c.reused]),
        }

    @property
    def goodput_text(self) -> str | None:
        """The goodput of the steps this experiment's latest run ran (reused ones were paid elsewhere)."""
        g = self.totals()["goodput"]
        return None if g is None else goodput_text(g)

    @property
    def text(self) -> str:
        t = self.totals()
        unknown = f" + {t['unknown']} step{'s' if t['unknown'] != 1 else ''} of unknown cost" if t["unknown"] else ""
        saved_unknown = f" + {t['saved_unknown']} of unknown cost" if t["saved_unknown"] else ""
        n = t["saved_steps"]
        return (
            f"cost: {format_money(t['money'], self.currency)} ({format_hours(t['accelerator_hours'])} "
            f"accelerator-hours){unknown}; saved by reuse: {format_money(t['saved_money'], self.currency)} "
            f"({format_hours(t['saved_accelerator_hours'])} accelerator-hours, {n} step{'s' if n != 1 else ''}"
            f"{saved_unknown})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": [c.to_json() for c in self.steps],
            "totals": self.totals(),
            "text": self.text,
            "goodput_text": self.goodput_text,
        }


def is_reused(driver: Any, record: StepRecord | None) -> bool:
    """A finished step the experiment's latest run did not produce: another driver's record
    (`driver`: the experiment record's field, the driver of its latest run)."""
    return (
        record is not None
        and record.status == SUCCESS
        and isinstance(driver, str)
        and record.driver is not None
        and record.driver != driver
    )


def experiment_cost(
    driver: str | None, steps: Sequence[tuple[str, StepRecord | None]], prices: PriceTable
) -> ExperimentCost:
    """Each listed step's cost (`steps`: its identity and record, read by the caller), in order;
    `driver` is the experiment record's, which tells a reused step from one its run made."""
    return ExperimentCost(
        [step_cost(identity, record, prices, reused=is_reused(driver, record)) for identity, record in steps],
        prices.currency,
    )


def read_record_quietly(output_path: Any) -> StepRecord | None:
    """A step's record for showing its cost; None when there is none or it is damaged."""
    if not isinstance(output_path, str):
        return None
    try:
        return read_step_record(output_path)
    except RecordError:
        return None


# ---- the dry run's estimate ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StepEstimate:
    """What a step in a plan costs: recorded (reused) or estimated (would run)."""

    identity: str
    action: str
    accelerator_hours: float | None
    money: float | None
    basis: str
    currency: str = "USD"

    @property
    def text(self) -> str:
        if self.accelerator_hours is None:
            return f"unknown ({self.basis})"
        word = "saved by reuse" if self.action == "skip" else "estimated"
        return (
            f"{format_money(self.money, self.currency)} {word} ({format_hours(self.accelerator_hours)} "
            f"accelerator-hours, {self.basis})"
        )

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "text": self.text}


@dataclasses.dataclass(frozen=True)
class PlanCost:
    steps: dict[str, StepEstimate]
    """By identity; only steps that would run or are reused."""
    prices: str
    currency: str = "USD"

    def _part(self, action: str) -> dict[str, Any]:
        chosen = [e for e in self.steps.values() if e.action == action]
        return {
            "steps": len(chosen),
            "accelerator_hours": round(sum(e.accelerator_hours or 0.0 for e in chosen), 6),
            "money": round(sum(e.money or 0.0 for e in chosen), 6),
            "unknown": sum(1 for e in chosen if e.money is None),
        }

    def summary(self) -> dict[str, Any]:
        return {
            "prices": self.prices,
            "currency": self.currency,
            "run": self._part("run"),
            "saved_by_reuse": self._part("skip"),
        }

    def lines(self) -> list[str]:
        """Two lines: what running costs, what reuse saves."""
        run, saved = self._part("run"), self._part("skip")

        def part(p: dict[str, Any], what: str) -> str:
            n = p["steps"]
            known = n - p["unknown"]
            head = f"{n} step{'s' if n != 1 else ''} {what}: "
            if n and not known:
                return head + f"unknown for {'all ' if n > 1 else ''}{n}"
            text = (
                head + f"{format_money(p['money'], self.currency)} "
                f"({format_hours(p['accelerator_hours'])} accelerator-hours)"
            )
            if p["unknown"]:
                text += f" for {known}, unknown for {p['unknown']}"
            return text

        return [part(run, "would run, estimated"), part(saved, "reused, saved by reuse")]


def _estimate_of(config: Any) -> dict[str, Any] | None:
    estimate = getattr(config, "plan_estimate", None)
    if not callable(estimate):
        return None
    try:
        return dict(estimate())
    except Exception:  # noqa: BLE001 - an estimate is informative only (the plan shows why it failed)
        return None


def _from_record(identity: str, action: str, record: StepRecord, basis: str, prices: PriceTable) -> StepEstimate:
    usage = usage_of(record)
    return StepEstimate(identity, action, usage.get("accelerator_hours"), money(usage, prices), basis, prices.currency)


def estimate_plan(decisions: Sequence[Any], prices: PriceTable, index: RecordIndex | None) -> PlanCost:
    """Each reused or to-run step's cost (see the module doc); `index` None: records not readable."""
    out: dict[str, StepEstimate] = {}
    for d in decisions:
        ps = d.step
        if d.action not in ("run", "skip"):
            continue
        if index is None and d.action == "skip":
            out[ps.identity] = StepEstimate(ps.identity, d.action, None, None, "records not read", prices.currency)
            continue
        own = index.record(ps.output_path) if index is not None else None
        if d.action == "skip":
            out[ps.identity] = (
                _from_record(ps.identity, "skip", own, "recorded", prices)
                if own is not None
                else StepEstimate(ps.identity, "skip", None, None, "no readable record", prices.currency)
            )
            continue
        versions = index.versions_of(ps.name) if index is not None else []
        finished = [
            r
            for r in ([own] if own is not None and own.identity == ps.identity else [])
            + [r for r in versions if r.identity != ps.identity]
            if r.status == SUCCESS and usage_of(r).get("accelerator_hours") is not None
        ]
        if finished:
            what = "this step's record" if finished[0].identity == ps.identity else f"as {finished[0].identity}"
            out[ps.identity] = _from_record(ps.identity, "run", finished[0], what, prices)
            continue
        estimate = _estimate_of(ps.step.config)
        hours = as_number((estimate or {}).get("accelerator_hours"))
        if hours is not None:
            accelerator = tpu_key(str(estimate.get("accelerator", "")).split(" ", 1)[0]) if estimate else None
            if accelerator is None:
                accelerator = declared_accelerator(describe_resources(ps.step.resources))[0]
            price = prices.price(accelerator)
            out[ps.identity] = StepEstimate(
                ps.identity,
                "run",
                hours,
                None if price is None else price * hours,
                f"the config's estimate on {accelerator}",
                prices.currency,
            )
            continue
        out[ps.identity] = StepEstimate(
            ps.identity,
            "run",
            None,
            None,
            "no finished version recorded" if index is not None else "records not read",
            prices.currency,
        )
    return PlanCost(out, prices.describe(), prices.currency)
