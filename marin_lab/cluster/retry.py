"""Separate retry budgets for preemptions and failures, as one small reusable loop.

The executor keeps its own loop (it also writes the status history); this function is the same
policy in isolation, used by `TpuResources` tests and by anyone running a step outside the
executor. Each attempt produces a record shaped like the step record's `attempts` entries.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
import traceback
from collections.abc import Callable
from typing import TypeVar

from marin_lab.cluster.classify import PREEMPTION, ErrorKind, classify_error
from marin_lab.cluster.errors import RetryBudgetExhausted

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RetryBudget:
    """How many times a step may be retried, per cause."""

    preemption_retries: int = 20
    """Retries after a preemption (lost hardware). Preemptions are expected on spot TPUs."""
    failure_retries: int = 0
    """Retries after a failure (an exception in the step). Usually 0: a bug repeats."""
    preemption_backoff_s: float = 0.0
    """Seconds to wait after a preemption before the next attempt (capacity waits happen in run)."""
    failure_backoff_s: float = 0.0
    """Seconds to wait after a failure before the next attempt."""

    def __post_init__(self) -> None:
        for field in ("preemption_retries", "failure_retries"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"RetryBudget.{field} must be a non-negative integer, got {value!r}")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def run_with_budgets(
    attempt_fn: Callable[[int], T],
    budget: RetryBudget,
    *,
    what: str = "step",
    classify: Callable[[BaseException], ErrorKind] = classify_error,
    on_attempt: Callable[[dict], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call `attempt_fn(attempt_number)` until it returns, within the budget; else raise.

    `on_attempt` gets each finished attempt's record ({"attempt", "kind", "started", "ended",
    "status", "error"}). When a budget runs out, RetryBudgetExhausted is raised from the last
    error; its message ends with the last traceback and `.attempts` holds every record.
    """
    attempts: list[dict] = []
    preemptions = failures = 0
    attempt = 0
    while True:
        attempt += 1
        started = _now()
        try:
            result = attempt_fn(attempt)
        except Exception as err:  # noqa: BLE001 - every error is classified, none swallowed
            kind = classify(err)
            tb = "".join(traceback.format_exception(err))
            record = {"attempt": attempt, "kind": kind, "started": started, "ended": _now(),
                      "status": "PREEMPTED" if kind == PREEMPTION else "FAILED", "error": tb}
            attempts.append(record)
            if on_attempt is not None:
                on_attempt(record)
            if kind == PREEMPTION:
                preemptions += 1
                left, limit, backoff = budget.preemption_retries - preemptions, budget.preemption_retries, budget.preemption_backoff_s
            else:
                failures += 1
                left, limit, backoff = budget.failure_retries - failures, budget.failure_retries, budget.failure_backoff_s
            if left < 0:
                raise RetryBudgetExhausted(
                    f"{what}: attempt {attempt} ended in {kind} and the {kind} budget ({limit} retries) is "
                    f"spent ({preemptions} preemptions, {failures} failures so far); last error:\n{tb}",
                    attempts,
                ) from err
            logger.warning("%s: attempt %d ended in %s (%s); retrying, %d %s retries left",
                           what, attempt, kind, type(err).__name__, left, kind)
            if backoff > 0:
                sleep(backoff)
            continue
        record = {"attempt": attempt, "kind": None, "started": started, "ended": _now(),
                  "status": "SUCCESS", "error": None}
        attempts.append(record)
        if on_attempt is not None:
            on_attempt(record)
        return result


__all__ = ["RetryBudget", "run_with_budgets"]
