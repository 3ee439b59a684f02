"""TPU topologies a train step can be compiled for on a machine without TPUs (libtpu, deviceless).

A topology is named like a slice request, `v5e-256`, `v4-2048`, `v5e-256x2` (two slices), or like
the compiler names it, `v5e:16x16` / `v4:8x8x16` (with `slices` given apart). Chips, not cores:
a v4 or v5p type counts TensorCores, two per chip, and JAX sees one device per chip only when the
topology is described with the `megacore` chip config; without it a v4-2048 would be 2,048
single-core devices with half the memory each.

`CHIPS` holds what the compiler cannot say: peak bf16 FLOP/s and the interconnect bandwidths
(Google Cloud's TPU pages), used for the step-time roofline. The HBM capacity is the compiler's own
limit (the figure libtpu 0.0.42.1 prints in RESOURCE_EXHAUSTED errors, below the nominal size).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import re
from typing import Any

from jax.experimental import topologies

from marin_lab.cluster.errors import TpuRequestError
from marin_lab.cluster.tpu_types import GENERATIONS, known_types, parse_tpu_type
from marin_lab.training.errors import TrainingError

GiB = 2**30
INSTALL_HINT = (
    "the TPU compiler (libtpu) is not installed; install it with "
    "`pip install -e '.[tpu]'` (or `pip install -c requirements/constraints.txt libtpu==0.0.42.1`)"
)


@dataclasses.dataclass(frozen=True)
class ChipSpec:
    """One TPU chip generation, as the report uses it."""

    generation: str
    peak_flops: float
    """Dense bf16 FLOP/s per chip."""
    hbm_bytes: int
    """What the compiler lets one chip's program use (its RESOURCE_EXHAUSTED limit)."""
    ici_bytes_per_s: float
    """Inter-chip interconnect bandwidth per chip (bidirectional, as Google states it)."""
    dcn_bytes_per_s: float | None
    """Data-centre network bandwidth per chip (a pod's DCN bandwidth / its chips); None: not published."""
    dims: int
    """2 (torus of chips, v5e/v6e) or 3 (v4/v5p)."""


CHIPS: dict[str, ChipSpec] = {
    # v5e: 197 TFLOP/s, 1,600 Gbps ICI per chip, 6.4 Tbps DCN per 256-chip pod (cloud.google.com/tpu/docs/v5e).
    "v5e": ChipSpec("v5e", 197e12, int(15.75 * GiB), 200e9, 6.4e12 / 8 / 256, 2),
    # v4: 275 TFLOP/s, 2,400 Gbps ICI per chip (cloud.google.com/tpu/docs/v4).
    "v4": ChipSpec("v4", 275e12, int(30.75 * GiB), 300e9, None, 3),
    # v5p: 459 TFLOP/s, 4,800 Gbps ICI per chip (cloud.google.com/tpu/docs/v5p).
    "v5p": ChipSpec("v5p", 459e12, int(95.74 * GiB), 600e9, None, 3),
    # v6e: 918 TFLOP/s, 3,584 Gbps ICI per chip (cloud.google.com/tpu/docs/v6e).
    "v6e": ChipSpec("v6e", 918e12, int(31.25 * GiB), 448e9, None, 2),
}

_COMPILER_NAME = re.compile(r"^(v[0-9a-z]+):(\d+(?:x\d+)+)$")
_SLICED = re.compile(r"^(v[0-9a-z]+-\d+)x(\d+)$")


@dataclasses.dataclass(frozen=True)
class Topology:
    """A compile target: `slices` slices of one chip grid."""

    name: str
    """As the report prints it, e.g. 'v5e-256x2' or 'v5e:2x2'."""
    chip: ChipSpec
    grid: tuple[int, ...]
    """Chips along each torus dimension of one slice."""
    slices: int = 1

    @property
    def chips_per_slice(self) -> int:
        return math.prod(self.grid)

    @property
    def chips(self) -> int:
        return self.chips_per_slice * self.slices

    @property
    def compiler_name(self) -> str:
        return f"{self.chip.generation}:{'x'.join(map(str, self.grid))}"

    def devices(self) -> list[Any]:
        """One abstract device per chip (slice-major), from libtpu; nothing is attached."""
        return list(_topology_devices(self.compiler_name, self.slices))


def known_topologies() -> list[str]:
    return [t for t in known_types() if t.split("-")[0] in CHIPS]


def parse_topology(name: str, slices: int | None = None) -> Topology:
    """'v5e-256', 'v5e-256x2', 'v4-2048' or 'v5e:2x2' (+ `slices`) -> Topology; TrainingError lists the known ones."""
    if slices is not None and slices < 1:
        raise TrainingError(f"topology {name!r}: slices must be at least 1, got {slices}")
    text = name.strip().lower()
    m = _COMPILER_NAME.match(text)
    if m:
        generation = {"v5litepod": "v5e", "v5lite": "v5e"}.get(m.group(1), m.group(1))
        if generation not in CHIPS:
            raise TrainingError(f"topology {name!r}: unknown TPU generation; known: {', '.join(CHIPS)}")
        grid = tuple(int(x) for x in m.group(2).split("x"))
        if len(grid) != CHIPS[generation].dims:
            raise TrainingError(
                f"topology {name!r}: {generation} chips form a {CHIPS[generation].dims}-D grid, "
                f"e.g. {generation}:{'x'.join(['2'] * CHIPS[generation].dims)}"
            )
        count = slices or 1
        return Topology(text if count == 1 else f"{text} x{count}", CHIPS[generation], grid, count)
    sliced = _SLICED.match(text)
    count = slices or 1
    if sliced:
        text, count = sliced.group(1), int(sliced.group(2))
        if slices not in (None, count):
            raise TrainingError(f"topology {name!r} says {count} slices but slices={slices}")
    try:
        tpu = parse_tpu_type(text)
    except TpuRequestError as err:
        raise TrainingError(
            f"unknown topology {name!r}; known: {', '.join(known_topologies())} "
            "(append xN for N slices, e.g. v5e-256x2), or a compiler name such as v5e:2x2"
        ) from err
    if tpu.generation.name not in CHIPS:
        raise TrainingError(
            f"topology {name!r}: no chip data for {tpu.generation.name}; known: {', '.join(known_topologies())}"
        )
    if count < 1:
        raise TrainingError(f"topology {name!r}: slices must be at least 1, got {count}")
    label = tpu.name if count == 1 else f"{tpu.name}x{count}"
    return Topology(label, CHIPS[tpu.generation.name], tpu.grid, count)


def require_libtpu() -> None:
    """Raise TrainingError saying how to install libtpu when it is missing."""
    if importlib.util.find_spec("libtpu") is None:
        raise TrainingError(INSTALL_HINT)


@functools.lru_cache(maxsize=16)
def _topology_devices(compiler_name: str, slices: int) -> tuple[Any, ...]:
    require_libtpu()
    # libtpu takes /tmp/libtpu_lockfile so that one process owns an attached TPU; compiling attaches
    # nothing, so several compiling processes (tests in parallel, a second shell) may load it at once.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    kwargs = {"chip_config_name": "megacore"} if compiler_name.startswith("v4:") else {}
    try:
        desc = topologies.get_topology_desc(platform="tpu", topology_name=compiler_name, num_slices=slices, **kwargs)
    except Exception as err:  # libtpu rejects the shape: say which, and what is known
        raise TrainingError(
            f"libtpu cannot describe topology {compiler_name} x{slices}: "
            f"{str(err).strip().splitlines()[0]}; known: {', '.join(known_topologies())}"
        ) from err
    return tuple(desc.devices)


def topology_for_resources(resources: Any) -> Topology | None:
    """The topology a step's declared TPU resources name (TpuResources, Marin's TpuPodConfig); None for others."""
    tpu = getattr(resources, "tpu", None) or getattr(resources, "tpu_type", None)
    if not isinstance(tpu, str) or tpu.split("-")[0] not in {**GENERATIONS, "v5litepod": None}:
        return None
    slices = getattr(resources, "slices", getattr(resources, "slice_count", 1))
    if not isinstance(slices, int):  # elastic: compile for the largest count it may get
        slices = max(slices)
    return parse_topology(tpu, slices)


def topologies_for_resources(resources: Any) -> list[Topology]:
    """Every topology a step may run on: one per alternative of a TpuAlternatives, else the one
    `topology_for_resources` names (none for a step without TPUs)."""
    shapes = getattr(resources, "shapes", None)
    candidates = shapes() if callable(shapes) else [resources]
    return [t for t in (topology_for_resources(c) for c in candidates) if t is not None]


__all__ = [
    "CHIPS",
    "INSTALL_HINT",
    "ChipSpec",
    "Topology",
    "known_topologies",
    "parse_topology",
    "require_libtpu",
    "topologies_for_resources",
    "topology_for_resources",
]
