"""The device mesh (axes `data`, `fsdp`, `model`) and the sharding rules a config selects.

Rules map each parameter name to a PartitionSpec over the mesh axes:

- `replicated`: every device holds every parameter (data parallel only).
- `fsdp`: each matrix is split over `fsdp` along its model-width dimension (ZeRO-3 style); XLA
  all-gathers it for the matmul and reduce-scatters its gradient.
- `fsdp_tp`: `fsdp` plus Megatron-style tensor parallelism over `model` (heads and the SwiGLU
  hidden dimension split; vocab split for the embedding and head).

A dimension that the axis size does not divide is left unsplit rather than failing, so a tiny
test model runs on any mesh; the batch is split over `data` x `fsdp`.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from marin_lab.errors import MarinLabError

AXES = ("data", "fsdp", "model")
RULES = ("replicated", "fsdp", "fsdp_tp")

# name -> per-dimension axis for the `fsdp_tp` rule; `fsdp` drops the "model" entries.
_TP_RULES: dict[str, tuple[str | None, ...]] = {
    "embed": ("model", "fsdp"),
    "lm_head": ("fsdp", "model"),
    "final_norm": (None,),
    "layers/attn_norm": (None, None),
    "layers/mlp_norm": (None, None),
    "layers/wq": (None, "fsdp", "model"),
    "layers/wk": (None, "fsdp", "model"),
    "layers/wv": (None, "fsdp", "model"),
    "layers/wo": (None, "model", "fsdp"),
    "layers/w_gate": (None, "fsdp", "model"),
    "layers/w_up": (None, "fsdp", "model"),
    "layers/w_down": (None, "model", "fsdp"),
}


class MeshError(MarinLabError, ValueError):
    """The mesh shape does not fit the devices."""


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """How devices are arranged and how parameters are split over them."""

    data: int = 1
    """Data-parallel replicas (-1: all devices not used by the other axes)."""
    fsdp: int = -1
    """Fully-sharded data-parallel degree (-1: all devices not used by the other axes)."""
    model: int = 1
    """Tensor-parallel degree."""
    param_sharding: str = "fsdp"
    """Sharding rule: 'replicated', 'fsdp' or 'fsdp_tp'."""

    def axis_sizes(self, num_devices: int) -> dict[str, int]:
        sizes = {"data": self.data, "fsdp": self.fsdp, "model": self.model}
        free = [a for a, s in sizes.items() if s == -1]
        if len(free) > 1:
            raise MeshError(f"mesh: only one axis may be -1, got {free}; set the others explicitly")
        if self.param_sharding not in RULES:
            raise MeshError(f"mesh.param_sharding={self.param_sharding!r} is not one of {RULES}")
        for axis, size in sizes.items():
            if size == 0 or size < -1:
                raise MeshError(f"mesh.{axis}={size} must be a positive size or -1")
        fixed = math.prod(s for s in sizes.values() if s != -1)
        if free:
            if num_devices % fixed:
                raise MeshError(
                    f"mesh: the fixed axes multiply to {fixed}, which does not divide the "
                    f"{num_devices} devices; change mesh.{'/'.join(a for a in sizes if a not in free)}"
                )
            sizes[free[0]] = num_devices // fixed
        elif fixed != num_devices:
            raise MeshError(
                f"mesh: data*fsdp*model = {sizes['data']}*{sizes['fsdp']}*{sizes['model']} = "
                f"{fixed}, but there are {num_devices} devices; make the product equal the device "
                "count or set one axis to -1"
            )
        return sizes

    def build(self, devices: list | None = None) -> Mesh:
        devices = list(devices if devices is not None else jax.devices())
        sizes = self.axis_sizes(len(devices))
        grid = np.array(devices).reshape([sizes[a] for a in AXES])
        return Mesh(grid, AXES)


def param_spec(name: str, shape: tuple[int, ...], mesh: Mesh, rule: str) -> P:
    """The PartitionSpec for one parameter under `rule`, dropping axes that do not divide."""
    if rule == "replicated":
        return P()
    if name not in _TP_RULES:
        raise KeyError(f"no sharding rule for parameter {name!r}; add it to mesh._TP_RULES")
    axes = []
    for dim, axis in zip(shape, _TP_RULES[name]):
        if axis == "model" and rule == "fsdp":
            axis = None
        if axis is not None and dim % mesh.shape[axis]:
            axis = None
        axes.append(axis)
    return P(*axes)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Examples split over data x fsdp, sequence positions whole."""
    return NamedSharding(mesh, P(("data", "fsdp"), None))


def batch_divisor(mesh: Mesh) -> int:
    return mesh.shape["data"] * mesh.shape["fsdp"]
