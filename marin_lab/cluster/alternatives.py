"""TPU alternatives: one step, an ordered list of acceptable slice shapes, the first Ray can place.

`ExecutorStep(resources=TpuAlternatives(["v5p-64", "v4-128", "2 x v5e-256"]))` (or Marin's
`ResourceConfig.with_tpu(["v5p-64", "v4-128"])`) asks for any of these shapes, in that order of
preference. How a run chooses:

- While planning, every alternative is checked like a `TpuResources` of its own (a type Google
  sells, a slice count its generation allows), those a cluster config says it can never hold are
  dropped, and an empty remainder is refused in one line. A training step's batch must split over
  the mesh of every alternative (`check_step`): a shape that cannot train is refused before any
  slice is booked. `marin-lab compile` compiles the step once per alternative.
- An attempt tries the alternatives in order, each for a bounded wait (`wait_s`): the first whose
  slices Ray places wins. One whose wait runs out is released whole and the next is tried; after
  the last, the first again, until `capacity_timeout_s` has passed in all (then one
  `SliceCapacityTimeout`, a preemption, naming every alternative). A driver that restarts while an
  earlier driver still holds one alternative's slices tries that one first, so it adopts them.
- The attempt's record names the shape it ran on (`hardware.alternative`), and every host runs
  with `MARIN_MESH_FOLLOWS_HARDWARE=1`, so `train_lm` and `finetune_lm` lay their mesh's `replica`
  axis over the slices they were given. The step's identity never depends on the choice (resources
  are not part of it); a resume on another alternative restores the checkpoint onto the new mesh
  (the hardware-move path, docs/multihost.md).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from marin_lab.cluster.errors import SliceCapacityTimeout, TpuRequestError
from marin_lab.cluster.resources import TpuResources
from marin_lab.execution.plan.resources import RunOutcome
from marin_lab.host_env import MESH_FOLLOWS_HARDWARE
from marin_lab.versioning import field_hints

logger = logging.getLogger(__name__)

_SHAPE = re.compile(r"^\s*(?:(?P<count>[0-9]+)\s*[xX*]\s*)?(?P<tpu>v[0-9a-z]+-[0-9]+)\s*$")


def parse_shape(shape: str | TpuResources) -> TpuResources:
    """`"v4-128"` or `"2 x v5e-256"` as a `TpuResources`; a `TpuResources` as it is."""
    if isinstance(shape, TpuResources):
        return shape
    if not isinstance(shape, str):
        raise TpuRequestError(
            f"TPU alternative {shape!r} is a {type(shape).__name__}; give a slice type such as 'v4-128', "
            "'2 x v5e-256', or a TpuResources"
        )
    match = _SHAPE.match(shape)
    if match is None:
        raise TpuRequestError(
            f"TPU alternative {shape!r} is not a slice shape; write a type such as 'v4-128' or a count and a "
            "type such as '2 x v5e-256'"
        )
    return TpuResources(tpu=match["tpu"], slices=int(match["count"] or 1))


def shape_label(option: TpuResources) -> str:
    """`v4-128`, `2 x v5e-256`, or `[1, 2] x v4-16` for an elastic count."""
    name = option.tpu_type.name
    if option.slices == 1:
        return name
    counts = list(option.slices) if isinstance(option.slices, tuple) else option.slices
    return f"{counts} x {name}"


@field_hints
@dataclasses.dataclass(frozen=True)
class TpuAlternatives:
    """Any one of several slice shapes, in order of preference: `TpuAlternatives(["v5p-64", "2 x v5e-256"])`."""

    options: Sequence[str | TpuResources]
    """The acceptable shapes, preferred first: 'v4-128', '2 x v5e-256', or TpuResources objects."""
    wait_s: float = 600.0
    """How long one alternative is waited for before the next is tried."""
    capacity_timeout_s: float = 3600.0
    """How long one attempt waits for any alternative in all before counting it as a preemption."""
    preemptible: bool = True
    """Whether spot/preemptible capacity is acceptable (applied to alternatives given as strings)."""

    def __post_init__(self) -> None:
        if isinstance(self.options, (str, TpuResources)):
            object.__setattr__(self, "options", (self.options,))
        elif isinstance(self.options, Sequence):
            object.__setattr__(self, "options", tuple(self.options))

    # -- request shape -------------------------------------------------------------------------
    def shapes(self) -> list[TpuResources]:
        """Every alternative as a TpuResources, in order (raises TpuRequestError on a bad one)."""
        shapes = []
        for option in self.options:
            shape = parse_shape(option)
            if isinstance(option, str) and not self.preemptible:
                shape = dataclasses.replace(shape, preemptible=False)
            shapes.append(shape)
        return shapes

    def holdable(self) -> list[TpuResources]:
        """The alternatives the cluster can ever hold (all of them when no cluster config says)."""
        kept = []
        for shape in self.shapes():
            try:
                capacity = shape.cluster_capacity()
            except TpuRequestError as err:  # the cluster config has no such workers
                logger.info("TPU alternative %s is left out: %s", shape_label(shape), err)
                continue
            if capacity is None or shape.slice_counts[0] <= capacity:
                kept.append(shape)
        return kept

    def validate(self) -> None:
        self._checked()

    def _checked(self) -> list[TpuResources]:
        """`validate`, returning the alternatives the cluster can hold (read once)."""
        if not isinstance(self.options, tuple) or not self.options:
            raise TpuRequestError("TpuAlternatives: options is empty; give at least one slice shape, e.g. ['v4-128']")
        for option in self.options:
            try:
                shape = parse_shape(option)
                # Each shape alone, the cluster's capacity aside: `holdable` judges that for all of them.
                dataclasses.replace(shape, max_cluster_slices=max(shape.slice_counts)).validate()
            except TpuRequestError as err:
                named = option if isinstance(option, str) else option.tpu
                raise TpuRequestError(f"TPU alternative {named!r}: {err}") from err
        labels = [shape_label(s) for s in self.shapes()]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise TpuRequestError(f"TpuAlternatives: {', '.join(repeated)} listed twice; name each shape once")
        if self.wait_s <= 0 or self.capacity_timeout_s <= 0:
            raise TpuRequestError("TpuAlternatives: wait_s and capacity_timeout_s must be > 0")
        holdable = self.holdable()
        if not holdable:
            raise TpuRequestError(
                f"none of the TPU alternatives {', '.join(labels)} fits the cluster (its config holds fewer "
                "slices of each, or none of its type); add a shape the cluster offers or raise its max_slices"
            )
        return holdable

    def check_step(self, config: Any) -> None:
        """A training step's batch must split over every alternative's mesh (refused while planning)."""
        mesh, batch = getattr(config, "mesh", None), getattr(config, "batch_size", None)
        if mesh is None or not hasattr(mesh, "batch_divisor_on") or not isinstance(batch, int):
            return
        microbatches = getattr(config, "microbatches", 1)
        for shape in self.shapes():
            for slices in shape.slice_counts:
                chips = slices * shape.tpu_type.chips
                where = f"on TPU alternative {slices} x {shape.tpu_type.name} ({chips} chips)"
                try:  # MeshConfig's arithmetic only (its MeshError is a ValueError): no devices, no JAX call
                    divisor = mesh.on_slices(slices).batch_divisor_on(chips)
                except ValueError as err:
                    raise TpuRequestError(f"field mesh does not fit {where}: {err}") from err
                if batch % (divisor * microbatches):
                    raise TpuRequestError(
                        f"field batch_size={batch} does not split {where}: the mesh's batch axes take "
                        f"{divisor} x microbatches={microbatches}; choose a batch_size every alternative divides "
                        "or drop that alternative"
                    )

    def describe(self) -> dict:
        shapes = self.shapes()
        first = shapes[0].describe()
        return {**first, "alternatives": [{"shape": shape_label(s), **s.describe()} for s in shapes]}

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
        """Run on the first alternative Ray places within its wait (see the module doc)."""
        shapes = _held_first(step_name, self._checked())
        labels = [shape_label(s) for s in shapes]
        t0 = time.monotonic()
        tried: list[str] = []
        while True:
            for index, shape in enumerate(shapes):
                left = self.capacity_timeout_s - (time.monotonic() - t0)
                if left <= 0:
                    raise SliceCapacityTimeout(
                        f"step {step_name!r}: none of the TPU alternatives {', '.join(labels)} could be placed "
                        f"within {self.capacity_timeout_s:.0f}s (tried {', '.join(tried)}); add capacity "
                        "(`ray status`, `marin-lab cluster status`), add an alternative or raise capacity_timeout_s"
                    )
                label = labels[index]
                attempt = dataclasses.replace(
                    shape,
                    capacity_timeout_s=min(self.wait_s, left),
                    env={**dict(shape.env or ()), MESH_FOLLOWS_HARDWARE: "1"},
                )

                def tagged(hardware: dict, label: str = label) -> None:
                    hardware["alternative"] = label
                    hardware["alternatives"] = labels
                    if on_hardware is not None:
                        on_hardware(hardware)

                def pending(reason: str | None, index: int = index) -> None:
                    if on_pending is not None:
                        on_pending(None if reason is None else f"alternative {index + 1} of {len(labels)}: {reason}")

                try:
                    outcome = attempt.run(
                        fn, config, step_name=step_name, cancel=cancel, on_hardware=tagged, on_pending=pending
                    )
                except SliceCapacityTimeout as err:
                    if getattr(err, "hardware", None) is not None:  # hardware was held: a real loss
                        raise
                    tried.append(label)
                    logger.info(
                        "step %r: %s could not be placed in time; trying the next alternative", step_name, label
                    )
                    continue
                hardware = dict(outcome.hardware or {})
                hardware.update(alternative=label, alternatives=labels)
                return RunOutcome(outcome.result, hardware)


def _held_first(step_name: str, shapes: list[TpuResources]) -> list[TpuResources]:
    """`shapes` with the one whose slices an earlier driver of the step still holds moved first."""
    try:
        from marin_lab.cluster.slice_reserve import held_pod_types  # Ray: only when a step runs

        held = held_pod_types(step_name)
    except Exception:  # noqa: BLE001 - no Ray state to read: keep the declared order
        return shapes
    first = [s for s in shapes if s.tpu_type.accelerator_type in held]
    return first[:1] + [s for s in shapes if s not in first[:1]]


def with_slice_count(tpu: str | Sequence[str], slices: int) -> list[str]:
    """Marin's `with_tpu([...], slice_count=n)`: every alternative without its own count takes n."""
    names = [tpu] if isinstance(tpu, str) else list(tpu)
    counted = [bool((m := _SHAPE.match(name)) is None or m["count"]) for name in names]
    return [name if slices == 1 or own else f"{slices} x {name}" for name, own in zip(names, counted, strict=True)]


__all__ = ["TpuAlternatives", "parse_shape", "shape_label", "with_slice_count"]
