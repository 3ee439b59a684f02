"""What a step asks for: whole TPU slices, GPUs, or CPUs and memory.

Each class implements the executor's HardwareRunner protocol (`describe`, `validate`, `run` returning
a `RunOutcome` of result and hardware; no state is kept on the object between runs) so
`ExecutorStep(resources=TpuResources(tpu="v5e-256", slices=2))` works without the
executor importing this package. `validate` is cheap and Ray-free: the executor calls it for every
step before anything runs, so an impossible request fails the whole plan up front.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from marin_lab.cluster.classify import PREEMPTION, MetadataPreemptionProbe, PreemptionProbe, classify_error
from marin_lab.cluster.config import load_cluster_config
from marin_lab.cluster.errors import ClusterError, PreemptedError, StepCancelled, TpuRequestError
from marin_lab.cluster.tpu_types import TpuType, check_slice_count, parse_tpu_type
from marin_lab.execution.plan.resources import RunOutcome, attach_hardware, hardware_of
from marin_lab.versioning import field_hints

logger = logging.getLogger(__name__)

CLUSTER_CONFIG_ENV = "MARIN_CLUSTER_CONFIG"
"""Environment variable naming the cluster config (infra/clusters/*.yaml) used to check capacity."""


def _require_ray(step_name: str):
    import ray

    if not ray.is_initialized():
        raise ClusterError(
            f"step {step_name!r}: Ray is not initialized; run the experiment with the ray backend "
            f"(--backend ray) or call ray.init() first"
        )
    return ray


def _as_preemption(err: BaseException, step_name: str, what: str) -> BaseException:
    """Turn a lost-hardware Ray error into PreemptedError (chained); leave others untouched."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, PreemptedError) and cause is not err:
        # A host said so itself (a preemption notice, its metadata): its words, not Ray's traceback.
        return PreemptedError(f"step {step_name!r}: {cause}")
    if isinstance(err, PreemptedError) or classify_error(err) != PREEMPTION:
        return err
    first_line = (str(err).strip().splitlines() or [""])[0]
    return PreemptedError(f"step {step_name!r} lost its {what}: {type(err).__name__}: {first_line}")


@field_hints
@dataclasses.dataclass(frozen=True)
class TpuResources:
    """Whole TPU slices: `TpuResources(tpu="v5e-256", slices=2)` or elastic `slices=[1, 2]`."""

    tpu: str
    """Slice type, e.g. 'v5e-256', 'v4-2048', 'v6e-8'."""
    slices: int | Sequence[int] = 1
    """How many slices; a list means any of these counts, the largest that is available wins."""
    preemptible: bool = True
    """Whether spot/preemptible capacity is acceptable (shown in the plan; used by provisioning)."""
    max_cluster_slices: int | None = None
    """The most slices of this type the cluster can ever hold; None: read the cluster config if any."""
    cluster_config: str | None = None
    """Cluster config file to check capacity against; default: $MARIN_CLUSTER_CONFIG if set."""
    capacity_timeout_s: float = 3600.0
    """How long one attempt waits for free slices before counting it as a preemption."""
    elastic_wait_s: float = 60.0
    """For a list of counts: how long to wait for the largest before taking what is free."""
    megascale_port: int = 8081
    """Port of the multislice coordinator on worker 0 of slice 0."""
    env: Mapping[str, str] | None = None
    """Extra environment variables set on every host."""
    preemption_probe: PreemptionProbe | None = dataclasses.field(default_factory=MetadataPreemptionProbe, compare=False)
    """Asked on a host whose step raised: True turns the error into a preemption."""

    def __post_init__(self) -> None:
        if not isinstance(self.slices, int) and isinstance(self.slices, Sequence):
            object.__setattr__(self, "slices", tuple(self.slices))
        if self.env is not None:
            object.__setattr__(self, "env", tuple(sorted(dict(self.env).items())))

    # -- request shape -------------------------------------------------------------------------
    @property
    def tpu_type(self) -> TpuType:
        return parse_tpu_type(self.tpu)

    @property
    def slice_counts(self) -> tuple[int, ...]:
        if isinstance(self.slices, int):
            return (self.slices,)
        return tuple(sorted(set(self.slices)))

    def cluster_capacity(self) -> int | None:
        """The most slices of this type the cluster can hold, if known."""
        if self.max_cluster_slices is not None:
            return self.max_cluster_slices
        path = self.cluster_config or os.environ.get(CLUSTER_CONFIG_ENV)
        if not path:
            return None

        return load_cluster_config(path).max_slices(self.tpu_type.name)

    def validate(self) -> None:
        tpu = self.tpu_type
        if isinstance(self.slices, tuple):
            if not self.slices:
                raise TpuRequestError(f"TpuResources({self.tpu!r}): slices=[] allows no slice count; give at least one")
        elif isinstance(self.slices, bool) or not isinstance(self.slices, int):
            raise TpuRequestError(
                f"TpuResources({self.tpu!r}): slices must be an int or a list of ints, got {self.slices!r}"
            )
        for count in self.slice_counts:
            check_slice_count(tpu, count)
        capacity = self.cluster_capacity()
        if capacity is not None and self.slice_counts[0] > capacity:
            source = (
                "max_cluster_slices"
                if self.max_cluster_slices is not None
                else f"cluster config {self.cluster_config or os.environ.get(CLUSTER_CONFIG_ENV)}"
            )
            raise TpuRequestError(
                f"TpuResources({self.tpu!r}) asks for {self.slice_counts[0]} slice(s) but the cluster can hold at "
                f"most {capacity} ({source}); lower slices, allow fewer (slices=[1, ...]) or raise the "
                f"cluster's max_slices for {tpu.name}"
            )
        if self.capacity_timeout_s <= 0 or self.elastic_wait_s < 0:
            raise TpuRequestError(f"TpuResources({self.tpu!r}): capacity_timeout_s must be > 0 and elastic_wait_s >= 0")

    def describe(self) -> dict:
        tpu = self.tpu_type
        return {
            "kind": "tpu",
            "tpu": tpu.name,
            "slices": list(self.slices) if isinstance(self.slices, tuple) else self.slices,
            "hosts_per_slice": tpu.hosts,
            "chips_per_slice": tpu.chips,
            "chips_per_host": tpu.chips_per_host,
            "preemptible": self.preemptible,
        }

    # -- running -------------------------------------------------------------------------------
    def run(
        self,
        fn: Callable[[Any], Any],
        config: Any,
        *,
        step_name: str,
        cancel: threading.Event | None = None,
        on_hardware: Callable[[dict], None] | None = None,
        on_pending: Callable[[str | None], None] | None = None,
    ) -> RunOutcome:
        """Run fn once per host on whole slices; raise PreemptedError when hardware was lost.

        Setting `cancel` kills this run's host actors (only this run's: the object may be shared).
        `on_hardware` hears the attempt's hosts as soon as they are placed; `on_pending` why the
        attempt waits for its slices, whenever that changes (None once they are held).
        """
        self.validate()
        _require_ray(step_name)
        from marin_lab.cluster.slice_runner import run_on_slices  # Ray: only when a step runs on slices

        capacity = self.cluster_capacity()
        counts = [c for c in self.slice_counts if capacity is None or c <= capacity]
        try:
            outcome = run_on_slices(
                fn,
                config,
                tpu=self.tpu_type,
                slice_counts=counts,
                step_name=step_name,
                probe=self.preemption_probe,
                capacity_timeout_s=self.capacity_timeout_s,
                elastic_wait_s=self.elastic_wait_s,
                megascale_port=self.megascale_port,
                extra_env=dict(self.env or ()),
                cancel=cancel,
                on_hardware=on_hardware,
                on_pending=on_pending,
            )
        except Exception as err:
            converted = _as_preemption(err, step_name, f"{self.tpu} slice hosts")
            if converted is err:
                raise
            attach_hardware(converted, hardware_of(err))
            raise converted from err
        return RunOutcome(outcome.result, outcome.hardware)


def _call_with_location(fn: Callable[[Any], Any], config: Any) -> tuple[Any, dict]:
    import socket

    import ray

    return fn(config), {"node_ip": ray.util.get_node_ip_address(), "hostname": socket.gethostname()}


def _run_ray_task(
    owner: Any,
    fn: Callable[[Any], Any],
    config: Any,
    options: dict,
    step_name: str,
    what: str,
    cancel: threading.Event | None,
) -> RunOutcome:
    ray = _require_ray(step_name)
    ref = ray.remote(_call_with_location).options(max_retries=0, **options).remote(fn, config)
    try:
        while not ray.wait([ref], timeout=0.5)[0]:
            if cancel is not None and cancel.is_set():
                ray.cancel(ref, force=True)
                raise StepCancelled(f"step {step_name!r} was cancelled")
        result, where = ray.get(ref)
    except Exception as err:
        converted = _as_preemption(err, step_name, what)
        if converted is err:
            raise
        raise converted from err
    return RunOutcome(result, {**owner.describe(), **where})


@field_hints
@dataclasses.dataclass(frozen=True)
class CpuResources:
    """CPUs and memory for a step that runs as one Ray task."""

    cpus: float = 1.0
    """CPU cores reserved for the task."""
    memory_gb: float | None = None
    """Memory reserved for the task (GiB); None reserves none."""

    def validate(self) -> None:
        if self.cpus < 0 or (self.memory_gb is not None and self.memory_gb <= 0):
            raise ClusterError(f"CpuResources: cpus must be >= 0 and memory_gb > 0, got {self}")

    def ray_options(self) -> dict:
        opts: dict = {"num_cpus": self.cpus}
        if self.memory_gb is not None:
            opts["memory"] = int(self.memory_gb * 2**30)
        return opts

    def describe(self) -> dict:
        return {"kind": "cpu", "cpus": self.cpus, "memory_gb": self.memory_gb}

    def run(
        self, fn: Callable[[Any], Any], config: Any, *, step_name: str, cancel: threading.Event | None = None
    ) -> RunOutcome:
        self.validate()
        return _run_ray_task(self, fn, config, self.ray_options(), step_name, "CPU worker", cancel)


@field_hints
@dataclasses.dataclass(frozen=True)
class GpuResources:
    """GPUs on one node for a step that runs as one Ray task."""

    gpus: float = 1.0
    """GPUs reserved for the task."""
    cpus: float = 1.0
    """CPU cores reserved alongside."""
    memory_gb: float | None = None
    """Memory reserved for the task (GiB)."""
    accelerator_type: str | None = None
    """Ray accelerator type constraint, e.g. 'A100' or 'H100'."""

    def validate(self) -> None:
        if self.gpus <= 0 or self.cpus < 0 or (self.memory_gb is not None and self.memory_gb <= 0):
            raise ClusterError(f"GpuResources: gpus must be > 0, cpus >= 0, memory_gb > 0, got {self}")

    def ray_options(self) -> dict:
        opts: dict = {"num_gpus": self.gpus, "num_cpus": self.cpus}
        if self.memory_gb is not None:
            opts["memory"] = int(self.memory_gb * 2**30)
        if self.accelerator_type:
            opts["accelerator_type"] = self.accelerator_type
        return opts

    def describe(self) -> dict:
        return {
            "kind": "gpu",
            "gpus": self.gpus,
            "cpus": self.cpus,
            "memory_gb": self.memory_gb,
            "accelerator_type": self.accelerator_type,
        }

    def run(
        self, fn: Callable[[Any], Any], config: Any, *, step_name: str, cancel: threading.Event | None = None
    ) -> RunOutcome:
        self.validate()
        return _run_ray_task(self, fn, config, self.ray_options(), step_name, "GPU worker", cancel)


__all__ = ["CLUSTER_CONFIG_ENV", "CpuResources", "GpuResources", "TpuResources"]
