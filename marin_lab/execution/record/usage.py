"""What a step used: accelerator-hours from its record (money is review/cost.py's).

**Accelerator-hours** are chips x wall hours, summed over every attempt of the step that ended: a
preempted, failed, cancelled or lost attempt held its hardware as long as it ran, so it counts
(and is shown apart, as `preempted_accelerator_hours`). The chips of an attempt are what its
runner reported it ran on (a TPU attempt lists the slices it actually got, `hardware.chips`),
else what the step declared (`resources`): TPU slices x chips per slice (the largest count of an
elastic request), GPUs, or CPUs; a step that declares nothing runs as one process and counts as one
CPU. A runner of another kind has unknown chips: its hours are shown, its accelerator-hours are
"unknown". An attempt still running is not counted until it ends.

The step record holds the result as `usage` (written with every record; records are not hashed,
so identities do not change), with `usage.goodput`: chip-hours paid against chip-hours of kept
progress, and the badput by cause (record/goodput.py; the writer reads a training step's
`metrics.jsonl` for it). A record written before `usage` existed is measured the same way when read,
from the record alone (its goodput then counts whole attempts). One record's usage spans every
attempt its identity ever had, over all runs: what the artifact cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from marin_lab.execution.record.goodput import step_goodput, time_of
from marin_lab.io.fs import join, read_bytes
from marin_lab.store.layout import METRICS_FILE
from marin_lab.store.metrics import parse_metrics
from marin_lab.store.step_record import Attempt, StepRecord

SUCCESS = "SUCCESS"
PREEMPTION = "preemption"
# The spellings cluster/tpu_types.py accepts for a generation, and Ray's accelerator types.
_TPU_ALIASES = {"v5litepod": "v5e", "v5lite": "v5e", "v6litepod": "v6e"}
_GPU_ALIASES = {
    "a100-40g": "a100",
    "a100-40gb": "a100",
    "a100-80g": "a100-80gb",
    "h100-80g": "h100",
    "h100-80gb": "h100",
    "h100-sxm": "h100",
    "tesla-v100": "v100",
    "tesla-t4": "t4",
}


# ---- which accelerator, how many -------------------------------------------------------------------


def tpu_key(name: Any) -> str | None:
    """'v5e-256', 'v5litepod-16' or Ray's 'TPU-V4' -> 'tpu-v5e' / 'tpu-v4'; None when not a TPU name."""
    if not isinstance(name, str) or not name.strip():
        return None
    text = name.strip().lower().removeprefix("tpu-")
    generation = text.split("-", 1)[0]
    if not generation.startswith("v"):
        return None
    return f"tpu-{_TPU_ALIASES.get(generation, generation)}"


def gpu_key(name: Any) -> str:
    """'H100', 'A100-80G', 'NVIDIA_TESLA_T4' -> 'gpu-h100' / 'gpu-a100-80gb' / 'gpu-t4'; 'gpu' when untyped."""
    if not isinstance(name, str) or name.strip().lower() in ("", "auto", "any"):
        return "gpu"
    text = name.strip().lower().replace("_", "-").removeprefix("nvidia-")
    return f"gpu-{_GPU_ALIASES.get(text, text)}"


def as_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def declared_accelerator(resources: Any) -> tuple[str | None, float | None]:
    """(accelerator, chips) a step's described resources (`describe_resources`) ask for."""
    if resources is None:
        return "cpu", 1.0
    if not isinstance(resources, Mapping):
        return None, None
    kind = resources.get("kind")
    if kind == "tpu":
        slices = resources.get("slices")
        if isinstance(slices, (list, tuple)):
            slices = max((s for s in slices if as_number(s) is not None), default=None)
        per, count = as_number(resources.get("chips_per_slice")), as_number(slices)
        return tpu_key(resources.get("tpu")), (per * count if per is not None and count is not None else None)
    if kind == "gpu":
        return gpu_key(resources.get("accelerator_type")), as_number(resources.get("gpus"))
    if kind == "cpu":
        return "cpu", as_number(resources.get("cpus"))
    if kind is not None:  # another runner: what it holds is its own business
        return None, None
    # Ray task options
    gpus = as_number(resources.get("num_gpus"))
    if gpus:
        return gpu_key(resources.get("accelerator_type")), gpus
    custom = resources.get("resources")
    tpus = as_number(custom.get("TPU")) if isinstance(custom, Mapping) else None
    if tpus:
        return tpu_key(resources.get("accelerator_type")), tpus
    cpus = resources.get("num_cpus", 1)
    return "cpu", as_number(cpus)


def attempt_accelerator(attempt: Attempt, resources: Any) -> tuple[str | None, float | None]:
    """What one attempt held: its reported hardware when that says its chips, else the declaration."""
    hardware = attempt.hardware
    if isinstance(hardware, Mapping) and hardware.get("kind") == "tpu":
        chips = as_number(hardware.get("chips"))
        if chips is not None and tpu_key(hardware.get("type")):
            return tpu_key(hardware.get("type")), chips
        if not (isinstance(resources, Mapping) and resources.get("kind") == "tpu"):
            return tpu_key(hardware.get("type")), None
    return declared_accelerator(resources)


def attempt_hours(attempt: Attempt) -> float | None:
    """Wall hours from the attempt's start to its end; None while it runs or when a time is unreadable."""
    started, ended = time_of(attempt.started), time_of(attempt.ended)
    if started is None or ended is None:
        return None
    return max((ended - started).total_seconds(), 0.0) / 3600


# ---- the record's usage ------------------------------------------------------------------------------


def metrics_rows(output_path: str | None) -> list[dict[str, Any]]:
    """The rows of the step's metrics.jsonl; none when it has none (not a training step) or it cannot be read."""
    if not output_path:
        return []
    try:
        return parse_metrics(read_bytes(join(output_path, METRICS_FILE))).rows
    except (OSError, ValueError):  # FileNotFoundError included: goodput then counts whole attempts
        return []


def record_goodput(record: StepRecord, rows: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The record's goodput (record/goodput.py); `rows` the step's metrics rows, read when not given."""
    if not any(a.ended for a in record.attempts):
        return None
    chips = [(a, attempt_accelerator(a, record.resources)[1]) for a in record.attempts]
    return step_goodput(chips, metrics_rows(record.output_path) if rows is None else rows)


def record_usage(record: StepRecord, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The `usage` the record holds: accelerator-hours over every attempt that ended, and goodput."""
    by_accelerator: dict[str, float] = {}
    wall = total = preempted = 0.0
    counted = preempted_attempts = unknown = 0
    accelerator: str | None = None
    chips: float | None = None
    for attempt in record.attempts:
        hours = attempt_hours(attempt)
        if hours is None:
            continue
        counted += 1
        wall += hours
        accelerator, chips = attempt_accelerator(attempt, record.resources)
        if attempt.kind == PREEMPTION:
            preempted_attempts += 1
        if accelerator is None or chips is None:
            unknown += 1
            continue
        used = chips * hours
        total += used
        by_accelerator[accelerator] = by_accelerator.get(accelerator, 0.0) + used
        if attempt.kind == PREEMPTION:
            preempted += used
    if not record.attempts and record.timings.duration_s is not None:  # an older or Marin's record
        accelerator, chips = declared_accelerator(record.resources)
        counted, wall = 1, max(float(record.timings.duration_s), 0.0) / 3600
        if accelerator is None or chips is None:
            unknown = 1
        else:
            total = chips * wall
            by_accelerator[accelerator] = total
    usage: dict[str, Any] = {
        "accelerator": accelerator,
        "chips": chips,
        "attempts": counted,
        "preempted_attempts": preempted_attempts,
        "wall_hours": round(wall, 6),
        "accelerator_hours": None if unknown else round(total, 6),
        "preempted_accelerator_hours": round(preempted, 6),
        "by_accelerator": {k: round(v, 6) for k, v in by_accelerator.items()},
    }
    if unknown:
        usage["unknown_attempts"] = unknown
    goodput = record_goodput(record, rows)
    if goodput is not None:
        usage["goodput"] = goodput
    return usage


def usage_of(record: StepRecord) -> dict[str, Any]:
    """The record's `usage` as written, else (an older record, or a damaged field) measured now."""
    usage = record.usage
    if (
        isinstance(usage, dict)
        and isinstance(usage.get("by_accelerator"), dict)
        and (usage.get("accelerator_hours") is None or as_number(usage.get("accelerator_hours")) is not None)
        and all(as_number(v) is not None for v in usage["by_accelerator"].values())
    ):
        return usage
    # Measured from the record alone: this runs in readers (the browser's confined storage
    # included) that must not open the step's other files, so its goodput counts whole attempts.
    return record_usage(record, rows=[])
