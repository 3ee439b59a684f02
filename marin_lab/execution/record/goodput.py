"""Goodput: the chip-hours a step paid for against the chip-hours of progress it kept, and the rest by cause.

Read from two things the executor already keeps: the step record's attempts (when each started and
ended, on how many chips, how it ended, how long it queued first) and, for a training step, the
goodput fields of its `metrics.jsonl` (training/metrics.py `GOODPUT_FIELDS`: each line's device
time of steps, waits for batches, checkpoint saves, and per run of the trainer its start, restore,
first step and the steps it redid after a resume). A line belongs to the attempt whose start and
end hold its `time`; the file keeps only the lines of progress that was kept (a resume drops what
the interrupted run logged past its checkpoint), so what an attempt kept is the step time of its
lines.

Per attempt, in chip-seconds (chips x seconds), every paid second goes to exactly one of:

- **kept**: step time of the lines kept, less the first step's compilation;
- **environment_start**: from the attempt's start to the trainer's first line of logging, less the
  restore (the wait for hosts, the runtime environment, imports, model init);
- **compilation**: the run's first step beyond a typical step;
- **checkpoint**: saves and the restore;
- **data_wait**: the loop waiting for batches;
- **recomputed**: steps done past the last checkpoint, which the next attempt did again
  (`steps_redone` x the attempt's typical step);
- **lost**: the rest of an attempt that did not succeed after its last kept line (detection, a
  failure's wasted run); for a step without goodput fields, all of an attempt that did not succeed;
- **other**: what is left (logging, evaluation hooks, host work between steps).

Waiting in a queue before an attempt started holds no chips and is not paid; it is shown apart, in
hours (`queued_hours`). Without goodput fields (a step that is not training, or an older trainer),
an attempt that succeeded counts as kept whole (`basis: "attempts"`).
"""

from __future__ import annotations

import datetime
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from marin_lab.store.step_record import Attempt

SUCCESS = "SUCCESS"

CAUSES = (
    "environment_start",
    "compilation",
    "checkpoint",
    "data_wait",
    "recomputed",
    "lost",
    "other",
)


def as_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def time_of(text: Any) -> datetime.datetime | None:
    """An ISO time of the record (UTC when it names no zone); None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def _field(row: Mapping[str, Any], key: str) -> float:
    return as_number(row.get(key)) or 0.0


def _typical_step_s(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The median seconds of one step over these lines, the first step of a run left out."""
    per_step = []
    previous: float | None = None
    for row in rows:
        step = as_number(row.get("step"))
        if step is None:
            continue
        train = _field(row, "train_s") - _field(row, "first_step_s")
        steps = step - previous if previous is not None else 1.0
        if "first_step_s" in row:
            steps -= 1
        if steps > 0 and train > 0:
            per_step.append(train / steps)
        previous = step
    return statistics.median(per_step) if per_step else None


def _ended(attempt: Attempt) -> tuple[float, float] | None:
    started, ended = time_of(attempt.started), time_of(attempt.ended)
    if started is None or ended is None:
        return None
    return started.timestamp(), max(ended.timestamp(), started.timestamp())


def step_goodput(
    attempts_with_chips: Sequence[tuple[Attempt, float | None]], rows: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any] | None:
    """A step's goodput (see the module doc) from its attempts, each with the chips it held
    (usage.py's `attempt_accelerator`), and its metrics.jsonl rows when it has them; None while no
    attempt has ended or when an ended attempt's chips are unknown."""
    timed = [r for r in rows if as_number(r.get("time")) is not None and "train_s" in r]
    basis = "metrics" if timed else "attempts"
    attempts = [(a, c, span) for a, c in attempts_with_chips if (span := _ended(a)) is not None]
    if not attempts:
        return None
    paid = kept = 0.0
    queued_s = 0.0
    redone_steps = 0
    causes = dict.fromkeys(CAUSES, 0.0)
    for i, (attempt, chips, (start, end)) in enumerate(attempts):
        if chips is None:
            return None
        queued_s += as_number(attempt.queued_s) or 0.0
        seconds = end - start
        paid += chips * seconds
        succeeded = attempt.status == SUCCESS
        mine = _lines(timed, start, end)
        if basis == "attempts":
            if succeeded:
                kept += chips * seconds
            else:
                causes["lost"] += chips * seconds
            continue
        spent: dict[str, float] = dict.fromkeys(CAUSES, 0.0)
        typical = _typical_step_s(mine)
        first_step = sum(_field(r, "first_step_s") for r in mine)
        compile_s = max(first_step - (typical or 0.0), 0.0) if first_step else 0.0
        restore = sum(_field(r, "restore_s") for r in mine)
        spent["compilation"] = compile_s
        spent["checkpoint"] = sum(_field(r, "checkpoint_s") for r in mine) + restore
        spent["data_wait"] = sum(_field(r, "data_wait_s") for r in mine)
        kept_s = max(sum(_field(r, "train_s") for r in mine) - compile_s, 0.0)
        segment = next((as_number(r.get("segment_start")) for r in mine if "segment_start" in r), None)
        if segment is not None:
            spent["environment_start"] = max(min(segment, end) - start - restore, 0.0)
        if not succeeded:
            # A checkpoint's save is noted on the line before it: the tail starts once it is written.
            last = float(mine[-1]["time"]) + _field(mine[-1], "checkpoint_s") if mine else (segment or start)
            tail = end - last
            following = _lines(timed, *attempts[i + 1][2]) if i + 1 < len(attempts) else []
            redone = next((int(_field(r, "steps_redone")) for r in following if "steps_redone" in r), 0)
            step_s = typical or _typical_step_s(following) or 0.0
            spent["recomputed"] = min(redone * step_s, max(tail, 0.0))
            spent["lost"] = max(tail - spent["recomputed"], 0.0)
            redone_steps += redone
        accounted = kept_s + sum(spent.values())
        if accounted > seconds:  # clocks of two machines, rounding: scale down, never invent time
            scale = seconds / accounted
            kept_s *= scale
            spent = {k: v * scale for k, v in spent.items()}
        spent["other"] = max(seconds - kept_s - sum(spent.values()), 0.0)
        kept += chips * kept_s
        for k, v in spent.items():
            causes[k] += chips * v
    return {
        "basis": basis,
        "paid_chip_hours": round(paid / 3600, 6),
        "kept_chip_hours": round(kept / 3600, 6),
        "goodput": round(kept / paid, 4) if paid > 0 else None,
        "badput_chip_hours": {k: round(v / 3600, 6) for k, v in causes.items()},
        "recomputed_steps": redone_steps,
        "queued_hours": round(queued_s / 3600, 6),
    }


def _lines(rows: Sequence[Mapping[str, Any]], start: float, end: float) -> list[Mapping[str, Any]]:
    return sorted((r for r in rows if start <= float(r["time"]) <= end), key=lambda r: float(r["time"]))


def total_goodput(parts: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Steps' goodput summed (an experiment's); None when no step has one."""
    known = [p for p in parts if isinstance(p, Mapping) and as_number(p.get("paid_chip_hours")) is not None]
    if not known:
        return None
    paid = sum(float(p["paid_chip_hours"]) for p in known)
    kept = sum(as_number(p.get("kept_chip_hours")) or 0.0 for p in known)
    causes = dict.fromkeys(CAUSES, 0.0)
    for p in known:
        by_cause = p.get("badput_chip_hours")
        if isinstance(by_cause, Mapping):
            for k in CAUSES:
                causes[k] += as_number(by_cause.get(k)) or 0.0
    return {
        "paid_chip_hours": round(paid, 6),
        "kept_chip_hours": round(kept, 6),
        "goodput": round(kept / paid, 4) if paid > 0 else None,
        "badput_chip_hours": {k: round(v, 6) for k, v in causes.items()},
        "recomputed_steps": sum(int(as_number(p.get("recomputed_steps")) or 0) for p in known),
        "queued_hours": round(sum(as_number(p.get("queued_hours")) or 0.0 for p in known), 6),
        "steps": len(known),
    }


def goodput_text(g: Mapping[str, Any] | None) -> str:
    """`goodput 82% (41.0 of 50.0 chip-hours kept; badput: recomputed 5.0, compilation 2.0, ...)`."""
    if not g or g.get("goodput") is None:
        return "goodput unknown"
    causes = g.get("badput_chip_hours") or {}
    parts = sorted(((k, v) for k, v in causes.items() if v), key=lambda kv: -kv[1])
    badput = ", ".join(f"{k.replace('_', ' ')} {_hours(v)}" for k, v in parts) or "none"
    redone = g.get("recomputed_steps")
    redone_text = f", {redone} step{'s' if redone != 1 else ''} recomputed" if redone else ""
    return (
        f"goodput {100 * g['goodput']:.0f}% ({_hours(g['kept_chip_hours'])} of {_hours(g['paid_chip_hours'])} "
        f"chip-hours kept; badput: {badput}{redone_text})"
    )


def _hours(value: Any) -> str:
    v = as_number(value) or 0.0
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}" if v >= 0.01 or v == 0 else f"{v:.2g}"
