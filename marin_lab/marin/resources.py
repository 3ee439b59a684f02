"""Marin's resource spellings (its `marin.resources`): what a training run asks for.

`SimpleTrainConfig(resources=CpuOnlyConfig(num_cpus=1), ...)` reads as in Marin. `step_resources`
turns one into what marin_lab's executor schedules: Ray options for CPUs, `GpuResources` and
`TpuResources` (marin_lab.cluster.resources) for accelerators. marin_lab's own resource objects (or a
dict of Ray options) pass through as they are.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from marin_lab.cluster.resources import GpuResources, TpuResources

__all__ = ["CpuOnlyConfig", "GpuConfig", "TpuPodConfig", "step_resources"]


@dataclasses.dataclass(frozen=True)
class CpuOnlyConfig:
    """CPUs only."""

    num_cpus: int = 1


@dataclasses.dataclass(frozen=True)
class GpuConfig:
    """GPUs on one node."""

    gpu_count: int = 1
    accelerator_type: str | None = None
    """e.g. "H100"; None: any."""


@dataclasses.dataclass(frozen=True)
class TpuPodConfig:
    """Whole TPU slices."""

    tpu_type: str
    """e.g. "v4-8"."""
    slice_count: int = 1


def step_resources(resources: Any) -> tuple[Any, str | None, int]:
    """(the step's resources, the TPU type and slice count for the dry run's estimate)."""
    if isinstance(resources, CpuOnlyConfig):
        return {"num_cpus": resources.num_cpus}, None, 1
    if isinstance(resources, GpuConfig):
        return GpuResources(gpus=resources.gpu_count, accelerator_type=resources.accelerator_type), None, 1
    if isinstance(resources, TpuPodConfig):
        return (TpuResources(tpu=resources.tpu_type, slices=resources.slice_count), resources.tpu_type,
                resources.slice_count)
    tpu = getattr(resources, "tpu", None)
    slices = getattr(resources, "slices", 1)
    return resources, tpu, slices if isinstance(slices, int) else max(slices)
