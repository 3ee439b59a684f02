"""What a step may ask for in `ExecutorStep(resources=...)`.

Either a dict of Ray task options (`num_cpus`, `num_gpus`, `memory`, `resources`,
`accelerator_type`), or an object implementing `HardwareRunner`, for steps that need more than one
Ray task (a TPU slice, several slices). `marin_lab.cluster.TpuResources` is one; the executor
only knows the protocol, never the class.

Other spellings of a request (Marin's `GpuConfig`, `TpuPodConfig`, `CpuOnlyConfig`, Fray's
`ResourceConfig`: marin_lab.resources) say what they mean with `executor_resources()`, which
returns one of those two; the planner asks once (plan.py) and the executor sees only the answer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from marin_lab.execution.errors import StepDefinitionError

RAY_OPTION_KEYS = {
    "num_cpus",
    "num_gpus",
    "memory",
    "resources",
    "accelerator_type",
    "runtime_env",
    "scheduling_strategy",
}


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """What one `HardwareRunner.run` produced: fn's return value and the hardware it actually used.

    Returned, not kept on the runner: one runner object may serve several steps at once (a
    module-level `TpuResources` constant), so per-run state lives with the run.
    """

    result: Any
    hardware: dict[str, Any] | None = None


def attach_hardware(err: BaseException, hardware: dict[str, Any] | None) -> None:
    """Say on an error what its attempt ran on (kept if already said), so the record lists the
    hardware of a preempted or failed attempt too: a failed run has no RunOutcome to carry it."""
    if hardware is not None and getattr(err, "hardware", None) is None:
        with contextlib.suppress(AttributeError):  # an exception type with __slots__: the record goes without
            err.hardware = hardware  # type: ignore[attr-defined]


def hardware_of(err: BaseException) -> dict[str, Any] | None:
    """The hardware an error (or an error it was raised from) carries; None when none does."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        hardware = getattr(current, "hardware", None)
        if isinstance(hardware, dict):
            return hardware
        current = current.__cause__ or current.__context__
    return None


@runtime_checkable
class HardwareRunner(Protocol):
    def describe(self) -> dict[str, Any]:
        """JSON-able description, shown in the dry run and stored in the record."""

    def validate(self) -> None:
        """Raise a clear error, before anything runs, if the request can never be met."""

    def run(
        self, fn: Callable[[Any], Any], config: Any, *, step_name: str, cancel: threading.Event | None = None
    ) -> RunOutcome:
        """Run `fn(config)` (on the Ray cluster); raise PreemptedError for a lost node or slice.

        An error raised once hardware was held carries it (`attach_hardware`), so the record lists
        what every attempt ran on. Setting `cancel` stops this run (and only this one).

        A runner may also take `on_hardware: Callable[[dict], None]` and call it once its hardware
        is placed; the executor then writes it into the attempt's entry at once, so an attempt
        whose driver dies mid-run still lists what it ran on. It may also take `on_pending:
        Callable[[str], None]` and call it with why it still waits for its hardware, whenever that
        changes: the step is then WAITING with that reason (status file, console, `marin-lab status`)
        and its duration starts once the hardware is placed. Runners without them work unchanged."""


def executor_resources(resources: Any) -> Any:
    """`resources` as the executor takes them: an object with `executor_resources()` (another
    spelling of a request) gives its answer; anything else is returned as it is."""
    spelled = getattr(resources, "executor_resources", None)
    if resources is None or isinstance(resources, dict) or not callable(spelled):
        return resources
    return spelled()


def is_runner(resources: Any) -> bool:
    return resources is not None and not isinstance(resources, dict) and isinstance(resources, HardwareRunner)


def validate_resources(step_name: str, resources: Any, config: Any = None) -> None:
    """Refuse, naming the step, a request that can never be met; a runner with `check_step(config)`
    (TpuAlternatives) also checks the step's config fits every shape it may be given."""
    if resources is None:
        return
    if isinstance(resources, dict):
        unknown = set(resources) - RAY_OPTION_KEYS
        if unknown:
            raise StepDefinitionError(
                f"step '{step_name}': resources has unknown keys {sorted(unknown)}; use Ray task options "
                f"({', '.join(sorted(RAY_OPTION_KEYS))}) or a HardwareRunner such as marin_lab.cluster.TpuResources"
            )
        return
    if not is_runner(resources):
        raise StepDefinitionError(
            f"step '{step_name}': resources is a {type(resources).__name__}; give a dict of Ray options, "
            "an object with describe/validate/run (a HardwareRunner such as marin_lab.cluster.TpuResources), or "
            "one of marin_lab.resources (CpuOnlyConfig, GpuConfig, TpuPodConfig, ResourceConfig)"
        )
    check_step = getattr(resources, "check_step", None)
    try:
        resources.validate()
        if callable(check_step) and config is not None:
            check_step(config)
    except Exception as err:
        if str(err).startswith("step '"):
            raise
        try:  # keep the runner's own error type; only say which step asked
            named = type(err)(f"step '{step_name}': {err}")
        except Exception:
            named = StepDefinitionError(f"step '{step_name}': {err}")
        raise named from err


def describe_resources(resources: Any) -> dict[str, Any] | None:
    if resources is None:
        return None
    if isinstance(resources, dict):
        return {k: v for k, v in resources.items() if k not in ("runtime_env", "scheduling_strategy")}
    return resources.describe()
