"""The catalogue of Cloud TPU slice types: how many chips and hosts a name like `v5e-256` means.

TPU names count different things per generation: v4 and v5p count TensorCores (two per chip),
v5e and v6e count chips. Multi-host slices have four chips per host; the small v5e/v6e types
(1, 4 or 8 chips) sit on one host. A type's size must be one Google sells, otherwise the request
fails here, before anything runs, instead of hanging in a queue.
"""

from __future__ import annotations

import dataclasses
import math
import re

from marin_lab.cluster.errors import TpuRequestError


@dataclasses.dataclass(frozen=True)
class TpuGeneration:
    """What is known about one TPU generation."""

    name: str
    """Canonical generation name as used in type names: 'v4', 'v5e', 'v5p', 'v6e'."""
    cores_per_unit: int
    """TensorCores per unit of the name's suffix: 2 where the suffix counts cores (v4, v5p), else 1."""
    sizes: tuple[int, ...]
    """Suffix values Google offers for this generation."""
    chips_per_host: int
    """Chips on each host of a multi-host slice."""
    max_single_host_chips: int
    """The largest slice that still fits on one host."""
    max_slices: int
    """The most slices one multislice job may use (our limit; raise it as Google does)."""
    gce_accelerator_prefix: str
    """Prefix the TPU API uses in acceleratorType ('v5litepod' for v5e)."""
    torus_dims: int
    """Dimensions of a slice's chip torus: 3 for v4 and v5p, 2 for v5e and v6e."""


GENERATIONS: dict[str, TpuGeneration] = {
    g.name: g
    for g in (
        TpuGeneration("v4", 2, (8, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096), 4, 4, 64, "v4", 3),
        TpuGeneration(
            "v5p", 2, (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 6144, 8192, 12288), 4, 4, 64, "v5p", 3
        ),
        TpuGeneration("v5e", 1, (1, 4, 8, 16, 32, 64, 128, 256), 4, 8, 64, "v5litepod", 2),
        TpuGeneration("v6e", 1, (1, 4, 8, 16, 32, 64, 128, 256), 4, 8, 64, "v6e", 2),
    )
}

# Chip grids of the 3-D generations whose count is not a power of two.
_GRIDS_3D = {768: (8, 8, 12), 1536: (8, 12, 16), 3072: (12, 16, 16), 6144: (16, 16, 24)}
# Other spellings people paste from the console or gcloud.
_ALIASES = {"v5litepod": "v5e", "v5lite": "v5e", "v6litepod": "v6e"}
_TYPE_RE = re.compile(r"^(?P<gen>v[0-9a-z]+?)-(?P<size>[0-9]+)$")


@dataclasses.dataclass(frozen=True)
class TpuType:
    """One slice type, e.g. `v5e-256`: 256 chips on 64 hosts."""

    name: str
    """Canonical name, e.g. 'v5e-256'."""
    generation: TpuGeneration
    size: int
    """The number after the dash."""

    @property
    def chips(self) -> int:
        return self.size // self.generation.cores_per_unit

    @property
    def hosts(self) -> int:
        if self.chips <= self.generation.max_single_host_chips:
            return 1
        return self.chips // self.generation.chips_per_host

    @property
    def chips_per_host(self) -> int:
        return self.chips // self.hosts

    @property
    def head_resource(self) -> str:
        """The Ray resource on each slice's first host, e.g. 'TPU-v5litepod-256-head'.

        Ray builds it from the VM's accelerator-type metadata, so v5e slices are named
        'v5litepod-N' there, not 'v5e-N'.
        """
        return f"TPU-{self.accelerator_type}-head"

    @property
    def accelerator_type(self) -> str:
        """The acceleratorType string the TPU API expects, e.g. 'v5litepod-256'."""
        return f"{self.generation.gce_accelerator_prefix}-{self.size}"

    @property
    def ray_accelerator_type(self) -> str:
        """Ray's accelerator type of the slice's hosts, e.g. 'TPU-V4', 'TPU-V5LITEPOD'."""
        return f"TPU-{self.generation.gce_accelerator_prefix.upper()}"

    @property
    def grid(self) -> tuple[int, ...]:
        """Chips along each torus dimension, as Google names the topology (v4-16: 2x2x2, v5e-256: 16x16)."""
        chips = self.chips
        if self.generation.torus_dims == 2:
            side = 2 ** (int(math.log2(chips)) // 2)
            return (side, chips // side)
        if chips in _GRIDS_3D:
            return _GRIDS_3D[chips]
        if chips == 4:
            return (2, 2, 1)
        dims = [1, 1, 1]
        while math.prod(dims) < chips:
            dims[dims.index(min(dims))] *= 2
        return tuple(sorted(dims))

    @property
    def topology(self) -> str:
        """The topology string Ray's TPU API and the `ray.io/tpu-topology` label use, e.g. '2x2x2'."""
        return "x".join(map(str, self.grid))

    @property
    def can_multislice(self) -> bool:
        # A slice smaller than a host (v5e-1, v5e-4) has no inter-slice network interface of its own.
        return self.chips >= self.generation.chips_per_host and (
            self.hosts > 1 or self.chips == self.generation.max_single_host_chips
        )

    def describe(self) -> dict:
        return {"type": self.name, "chips": self.chips, "hosts": self.hosts, "chips_per_host": self.chips_per_host}


def known_types() -> list[str]:
    return [f"{g.name}-{s}" for g in GENERATIONS.values() for s in g.sizes]


def parse_tpu_type(name: str) -> TpuType:
    """Parse and check a TPU type name ('v4-2048', 'v5e-256', 'v5litepod-16'); raise TpuRequestError."""
    if not isinstance(name, str):
        raise TpuRequestError(f"TPU type must be a string such as 'v5e-256', got {name!r}")
    match = _TYPE_RE.match(name.strip().lower())
    if match is None:
        raise TpuRequestError(
            f"TPU type {name!r} is not of the form '<generation>-<size>' (for example 'v5e-256' or 'v4-2048')"
        )
    gen_name = _ALIASES.get(match["gen"], match["gen"])
    generation = GENERATIONS.get(gen_name)
    if generation is None:
        raise TpuRequestError(
            f"unknown TPU generation {match['gen']!r} in {name!r}; known generations: {', '.join(GENERATIONS)}"
        )
    size = int(match["size"])
    if size not in generation.sizes:
        raise TpuRequestError(
            f"TPU type {name!r} does not exist: {generation.name} comes in sizes "
            f"{', '.join(map(str, generation.sizes))}"
        )
    return TpuType(name=f"{generation.name}-{size}", generation=generation, size=size)


def check_slice_count(tpu: TpuType, slices: int) -> None:
    """Raise TpuRequestError unless `slices` slices of `tpu` can form one (multislice) job."""
    if isinstance(slices, bool) or not isinstance(slices, int):
        raise TpuRequestError(f"slice count for {tpu.name} must be an integer, got {slices!r}")
    if slices < 1:
        raise TpuRequestError(f"slice count for {tpu.name} must be at least 1, got {slices}")
    if slices > 1 and not tpu.can_multislice:
        raise TpuRequestError(
            f"{tpu.name} cannot form a multislice job ({slices} slices requested): it is smaller than one "
            f"host; use a full-host type such as {tpu.generation.name}-"
            f"{tpu.generation.max_single_host_chips * tpu.generation.cores_per_unit} or larger, or slices=1"
        )
    if slices > tpu.generation.max_slices:
        raise TpuRequestError(
            f"{slices} slices of {tpu.name} exceed the multislice limit of {tpu.generation.max_slices} "
            f"for {tpu.generation.name}; use a larger slice type or fewer slices"
        )


__all__ = ["GENERATIONS", "TpuGeneration", "TpuType", "check_slice_count", "known_types", "parse_tpu_type"]
