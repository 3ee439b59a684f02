"""The device mesh (axes `replica`, `data`, `fsdp`, `model`) and the sharding rules a config selects.

Axes, from slowest network to fastest:

- `replica`: one entry per slice (`MeshConfig.slices`). Slices talk over the data-centre network
  (DCN), tens of times slower than the chips' own links (ICI), so nothing but the batch is split
  over this axis: every slice holds a whole copy of the (in-slice sharded) parameters and optimizer
  state, computes the gradients of its part of the batch, and the slices average those gradients
  once per step. That all-reduce is the only traffic that crosses the DCN.
- `data`, `fsdp`, `model`: inside one slice. `data` splits the batch only; `fsdp` splits the batch
  and the parameters; `model` splits heads and the SwiGLU hidden dimension.

Rules map each parameter name to a PartitionSpec over the in-slice axes (they never name
`replica`):

- `replicated`: every device holds every parameter (data parallel only).
- `fsdp`: each matrix is split over `fsdp` along its model-width dimension (ZeRO-3 style); XLA
  all-gathers it for the matmul and reduce-scatters its gradient.
- `fsdp_tp`: `fsdp` plus Megatron-style tensor parallelism over `model` (heads and the SwiGLU
  hidden dimension split; vocab split for the embedding and head).

A dimension that the axis size does not divide is left unsplit rather than failing, so a tiny
test model runs on any mesh; the batch is split over `replica` x `data` x `fsdp`.

Which devices form a slice. TPU devices carry `slice_index`: the mesh is jax's hybrid ICI/DCN
mesh (`mesh_utils.create_hybrid_device_mesh`), each slice's devices laid out on its torus. Other
devices (CPU, standing in for TPU hosts in tests; their `slice_index`, where present, is 0
everywhere) are simulated slices: the devices, ordered by
(process, id), are cut into `slices` equal contiguous groups. With several processes `slices` must
divide the process count, so each slice is whole hosts, processes `s*h .. s*h+h-1` for hosts per
slice `h`: the slice runner's numbering (process id = slice id * hosts per slice + worker id). One
process may also simulate several slices with its own devices (unit tests).

`slices=1` builds exactly the mesh of a single-slice run (the devices reshaped in their order, with
a `replica` axis of size 1): same shardings, same compiled program, same bits.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from marin_lab.errors import MarinLabError
from marin_lab.versioning import field_hints

logger = logging.getLogger(__name__)

REPLICA = "replica"
"""The axis over slices (the data-centre network)."""
SLICE_AXES = ("data", "fsdp", "model")
"""The axes inside one slice, over its own links (ICI)."""
AXES = (REPLICA, *SLICE_AXES)
BATCH_AXES = (REPLICA, "data", "fsdp")
"""The axes the batch is split over, slowest first (a batch row's devices are its replica's)."""
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


@field_hints
@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """How devices are arranged and how parameters are split over them.

    `data`, `fsdp` and `model` are sizes inside one slice; `slices` is the `replica` axis."""

    data: int = 1
    """Data-parallel replicas inside a slice (-1: all devices of a slice not used by the other axes)."""
    fsdp: int = -1
    """Fully-sharded data-parallel degree inside a slice (-1: all devices of a slice not used by the others)."""
    model: int = 1
    """Tensor-parallel degree."""
    param_sharding: str = "fsdp"
    """Sharding rule: 'replicated', 'fsdp' or 'fsdp_tp'."""
    slices: int = 1
    """Slices the run spans (the `replica` axis): each holds a whole copy of the state, sharded
    inside the slice, and only the gradients' all-reduce crosses between slices."""

    def on_slices(self, slices: int) -> MeshConfig:
        """This mesh on `slices` slices: the same in-slice axes, a `replica` axis over the slices."""
        return dataclasses.replace(self, slices=slices)

    def axis_sizes(self, num_devices: int) -> dict[str, int]:
        """The size of every axis in AXES for `num_devices` devices in all (all slices)."""
        if isinstance(self.slices, bool) or not isinstance(self.slices, int) or self.slices < 1:
            raise MeshError(
                f"mesh.slices={self.slices!r} must be a positive number of slices (one count: "
                "a mesh cannot follow an elastic slices=[...] request)"
            )
        if num_devices % self.slices:
            raise MeshError(
                f"mesh.slices={self.slices} does not divide the {num_devices} devices; "
                "every slice must have as many devices (set mesh.slices to the number of slices)"
            )
        per_slice = num_devices // self.slices
        sizes = {"data": self.data, "fsdp": self.fsdp, "model": self.model}
        free = [a for a, s in sizes.items() if s == -1]
        if len(free) > 1:
            raise MeshError(f"mesh: only one axis may be -1, got {free}; set the others explicitly")
        if self.param_sharding not in RULES:
            raise MeshError(f"mesh.param_sharding={self.param_sharding!r} is not one of {RULES}")
        for axis, size in sizes.items():
            if size == 0 or size < -1:
                raise MeshError(f"mesh.{axis}={size} must be a positive size or -1")
        where = f"{per_slice} devices" if self.slices == 1 else f"{per_slice} devices of each of {self.slices} slices"
        fixed = math.prod(s for s in sizes.values() if s != -1)
        if free:
            if per_slice % fixed:
                raise MeshError(
                    f"mesh: the fixed axes multiply to {fixed}, which does not divide the "
                    f"{where}; change mesh.{'/'.join(a for a in sizes if a not in free)}"
                )
            sizes[free[0]] = per_slice // fixed
        elif fixed != per_slice:
            raise MeshError(
                f"mesh: data*fsdp*model = {sizes['data']}*{sizes['fsdp']}*{sizes['model']} = "
                f"{fixed}, but there are {where}; make the product equal the device "
                "count or set one axis to -1"
            )
        return {REPLICA: self.slices, **sizes}

    def batch_divisor_on(self, num_devices: int) -> int:
        """How many ways the batch is split on `num_devices` devices (replica * data * fsdp), from
        the axis sizes alone: no devices needed (a plan checks shapes it has not booked)."""
        sizes = self.axis_sizes(num_devices)
        return math.prod(sizes[a] for a in BATCH_AXES)

    def build(self, devices: Sequence[Any] | None = None) -> Mesh:
        """The mesh over `devices` (default: all of `jax.devices()`), axes AXES."""
        devices = list(devices if devices is not None else jax.devices())
        sizes = self.axis_sizes(len(devices))
        if self.slices == 1:
            _warn_if_spanning_slices(devices)
            grid = np.array(devices).reshape([sizes[a] for a in AXES])
        else:
            grid = _multislice_grid(devices, self.slices, [sizes[a] for a in SLICE_AXES])
        return Mesh(grid, AXES)


def _warn_if_spanning_slices(devices: list[Any]) -> None:
    if devices[0].platform != "tpu":
        return
    found = {getattr(d, "slice_index", 0) for d in devices}
    if len(found) > 1:
        logger.warning(
            "mesh.slices=1 but the devices belong to %d slices: the in-slice axes span the "
            "data-centre network, so parameters cross it every layer; set mesh.slices=%d",
            len(found),
            len(found),
        )


def _multislice_grid(devices: list[Any], slices: int, in_slice: list[int]) -> np.ndarray:
    """[slices, data, fsdp, model] devices: TPU slices by `slice_index`, else simulated ones.

    Only TPU devices are trusted with `slice_index`: CPU devices of a multi-process run carry one
    too, 0 on every process, which says nothing about the slices the hosts stand in for."""
    if devices[0].platform == "tpu" and hasattr(devices[0], "slice_index"):
        found = sorted({d.slice_index for d in devices})
        if len(found) != slices:
            raise MeshError(
                f"mesh.slices={slices}, but the {len(devices)} devices belong to {len(found)} "
                f"slice(s); set mesh.slices={len(found)}"
            )
        try:
            # Each slice laid out on its own torus (ICI), slices stacked along `replica` (DCN).
            return mesh_utils.create_hybrid_device_mesh(
                [1, *in_slice], [slices, 1, 1, 1], devices, allow_split_physical_axes=True
            )
        except (ValueError, NotImplementedError) as err:
            raise MeshError(f"mesh: cannot lay out data*fsdp*model = {in_slice} on each slice ({err})") from err
    groups = simulated_slices(devices, slices)
    return np.stack([np.array(g).reshape(in_slice) for g in groups])


def simulated_slices(devices: Sequence[Any], slices: int) -> list[list[Any]]:
    """Devices without a `slice_index` (CPU) cut into `slices` contiguous groups, in (process, id)
    order; with several processes each group is whole processes, so a slice is whole hosts."""
    ordered = sorted(devices, key=lambda d: (d.process_index, d.id))
    processes = sorted({d.process_index for d in ordered})
    if len(ordered) % slices:
        raise MeshError(f"mesh.slices={slices} does not divide the {len(ordered)} devices")
    per = len(ordered) // slices
    groups = [ordered[i * per : (i + 1) * per] for i in range(slices)]
    if len(processes) > 1:
        owners = [{d.process_index for d in g} for g in groups]
        if len(processes) % slices or any(a & b for i, a in enumerate(owners) for b in owners[i + 1 :]):
            raise MeshError(
                f"mesh.slices={slices}: the {len(processes)} processes cannot be cut into {slices} equal "
                "groups of whole processes; a simulated slice is whole hosts, so the process count "
                "must be a multiple of mesh.slices (and every process must have as many devices)"
            )
    return groups


def param_spec(name: str, shape: tuple[int, ...], mesh: Mesh, rule: str) -> P:
    """The PartitionSpec for one parameter under `rule`, dropping axes that do not divide."""
    if rule == "replicated":
        return P()
    if name not in _TP_RULES:
        raise KeyError(f"no sharding rule for parameter {name!r}; add it to mesh._TP_RULES")
    axes = []
    for dim, axis in zip(shape, _TP_RULES[name], strict=False):
        if axis == "model" and rule == "fsdp":
            axis = None
        if axis is not None and dim % mesh.shape[axis]:
            axis = None
        axes.append(axis)
    return P(*axes)


def batch_axes(mesh: Mesh) -> tuple[str, ...]:
    """The axes of BATCH_AXES that `mesh` has (a mesh built elsewhere may lack `replica`)."""
    return tuple(a for a in BATCH_AXES if a in mesh.shape)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Examples split over replica x data x fsdp, sequence positions whole."""
    return NamedSharding(mesh, P(batch_axes(mesh), None))


def batch_divisor(mesh: Mesh) -> int:
    """How many ways the batch is split: replica * data * fsdp."""
    return math.prod(mesh.shape[a] for a in batch_axes(mesh))
