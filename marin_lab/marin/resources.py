"""Marin's resource spellings (its `marin.resources`, and Fray's `ResourceConfig`): what a step asks for.

`SimpleTrainConfig(resources=CpuOnlyConfig(num_cpus=1), ...)` reads as in Marin. `step_resources`
turns one into what marin_lab's executor schedules: Ray options for CPUs, `GpuResources` and
`TpuResources` (marin_lab.cluster.resources) for accelerators. marin_lab's own resource objects (or a
dict of Ray options) pass through as they are. Each class also answers `executor_resources()`, so
`ExecutorStep(resources=GpuConfig(gpu_count=1))` is planned as `GpuResources(gpus=1)`.

`ResourceConfig` is Fray's (`fray.types.ResourceConfig`), which today's Marin steps pass to
`remote(fn, resources=...)`: `ResourceConfig.with_tpu("v5p-8")`, `.with_gpu("H100", count=8)`,
`.with_cpu(cpu=4)`. Its `device` is a `TpuConfig`, `GpuConfig` (Fray's; `FrayGpuConfig` here,
since `GpuConfig` is Marin's older name) or `CpuConfig`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from marin_lab.cluster.alternatives import TpuAlternatives, parse_shape, with_slice_count
from marin_lab.cluster.resources import GpuResources, TpuResources
from marin_lab.versioning import field_hints

__all__ = [
    "CpuConfig",
    "CpuOnlyConfig",
    "FrayGpuConfig",
    "GpuConfig",
    "ResourceConfig",
    "TpuConfig",
    "TpuPodConfig",
    "step_resources",
]


class _Request:
    """A resource request in Marin's or Fray's spelling."""

    def executor_resources(self) -> Any:
        """What the executor schedules for `ExecutorStep(resources=self)` (`step_resources`)."""
        return step_resources(self)[0]


@field_hints
@dataclasses.dataclass(frozen=True)
class CpuOnlyConfig(_Request):
    """CPUs only."""

    num_cpus: int = 1


@field_hints
@dataclasses.dataclass(frozen=True)
class GpuConfig(_Request):
    """GPUs on one node."""

    gpu_count: int = 1
    accelerator_type: str | None = None
    """e.g. "H100"; None: any."""


@field_hints
@dataclasses.dataclass(frozen=True)
class TpuPodConfig(_Request):
    """Whole TPU slices."""

    tpu_type: str
    """e.g. "v4-8"."""
    slice_count: int = 1


@field_hints
@dataclasses.dataclass(frozen=True)
class CpuConfig(_Request):
    """Fray's CPU-only device."""

    kind: str = "cpu"


@field_hints
@dataclasses.dataclass(frozen=True)
class TpuConfig(_Request):
    """Fray's TPU device: a slice type such as "v5p-8", or several acceptable ones in order."""

    variant: str | tuple[str, ...]
    kind: str = "tpu"

    def __post_init__(self) -> None:
        if not isinstance(self.variant, str):
            object.__setattr__(self, "variant", tuple(self.variant))


@field_hints
@dataclasses.dataclass(frozen=True)
class FrayGpuConfig(_Request):
    """Fray's GPU device: `count` GPUs of `variant` ("auto": any)."""

    variant: str = "auto"
    count: int = 1
    kind: str = "gpu"


@field_hints
@dataclasses.dataclass(frozen=True)
class ResourceConfig(_Request):
    """Fray's resource request for one step: CPUs, memory, disk, a device, and how many replicas
    (for a TPU: slices)."""

    cpu: float = 1
    ram: str = "4g"
    disk: str = "16g"
    device: CpuConfig | TpuConfig | FrayGpuConfig = dataclasses.field(default_factory=CpuConfig)
    replicas: int = 1
    preemptible: bool = True
    regions: tuple[str, ...] | None = None
    env_vars: dict[str, str] | None = None

    @staticmethod
    def with_tpu(
        tpu_type: str | Sequence[str],
        *,
        slice_count: int = 1,
        cpu: float = 1,
        ram: str = "4g",
        disk: str = "16g",
        preemptible: bool = True,
        regions: Any = None,
        **_ignored: Any,
    ) -> ResourceConfig:
        """Whole TPU slices of `tpu_type` (e.g. "v5p-8", "v6e-256"), `slice_count` of them; a list of
        types is a list of alternatives, preferred first (`TpuAlternatives`)."""
        if slice_count < 1:
            raise ValueError(f"slice_count must be at least 1, got {slice_count}")
        return ResourceConfig(
            cpu=cpu,
            ram=ram,
            disk=disk,
            device=TpuConfig(variant=tpu_type if isinstance(tpu_type, str) else tuple(tpu_type)),
            replicas=slice_count,
            preemptible=preemptible,
            regions=tuple(regions) if regions else None,
        )

    @staticmethod
    def with_gpu(
        gpu_type: str = "auto",
        count: int = 1,
        *,
        cpu: float = 1,
        ram: str = "4g",
        disk: str = "16g",
        preemptible: bool = True,
        regions: Any = None,
        **_ignored: Any,
    ) -> ResourceConfig:
        """`count` GPUs of `gpu_type` ("H100", "A100", or "auto") on one node."""
        return ResourceConfig(
            cpu=cpu,
            ram=ram,
            disk=disk,
            device=FrayGpuConfig(variant=gpu_type, count=count),
            preemptible=preemptible,
            regions=tuple(regions) if regions else None,
        )

    @staticmethod
    def with_cpu(
        cpu: float = 1,
        ram: str = "4g",
        disk: str = "16g",
        *,
        preemptible: bool = True,
        regions: Any = None,
        **_ignored: Any,
    ) -> ResourceConfig:
        """CPUs and memory only."""
        return ResourceConfig(
            cpu=cpu, ram=ram, disk=disk, preemptible=preemptible, regions=tuple(regions) if regions else None
        )


def step_resources(resources: Any) -> tuple[Any, str | None, int]:
    """(the step's resources, the TPU type and slice count for the dry run's estimate)."""
    if isinstance(resources, (CpuConfig, TpuConfig, FrayGpuConfig)):  # a device alone: one replica of it
        resources = ResourceConfig(device=resources)
    if isinstance(resources, ResourceConfig):
        device = resources.device
        if isinstance(device, TpuConfig) and isinstance(device.variant, tuple):
            shapes = with_slice_count(device.variant, resources.replicas)
            first = parse_shape(shapes[0])
            return (
                TpuAlternatives(shapes, preemptible=resources.preemptible),
                first.tpu,
                first.slice_counts[-1],
            )
        if isinstance(device, TpuConfig) and isinstance(device.variant, str):
            return (
                TpuResources(tpu=device.variant, slices=resources.replicas, preemptible=resources.preemptible),
                device.variant,
                resources.replicas,
            )
        if isinstance(device, FrayGpuConfig):
            return (
                GpuResources(
                    gpus=device.count,
                    cpus=resources.cpu,
                    accelerator_type=None if device.variant == "auto" else device.variant,
                ),
                None,
                1,
            )
        return {"num_cpus": resources.cpu}, None, 1
    if isinstance(resources, CpuOnlyConfig):
        return {"num_cpus": resources.num_cpus}, None, 1
    if isinstance(resources, GpuConfig):
        return GpuResources(gpus=resources.gpu_count, accelerator_type=resources.accelerator_type), None, 1
    if isinstance(resources, TpuPodConfig):
        return (
            TpuResources(tpu=resources.tpu_type, slices=resources.slice_count),
            resources.tpu_type,
            resources.slice_count,
        )
    tpu = getattr(resources, "tpu", None)
    slices = getattr(resources, "slices", 1)
    return resources, tpu, slices if isinstance(slices, int) else max(slices)
