"""Reserving whole TPU slices through Ray's own TPU API, and saying why a reservation waits.

A slice is one placement group: `ray.util.tpu.SlicePlacementGroup` first holds the slice's head
(`TPU-<pod type>-head` on its worker 0, which is also the demand an autoscaler sees), reads the
slice's name there, then asks for one STRICT_SPREAD bundle per host of that slice (`TPU: <chips
per host>`, bundle i on worker i by the `ray.io/tpu-worker-id` label). The group becomes ready only
when every host is free, so a slice is taken whole or not at all.

Each group is named `marin:{step}:{attempt}:slice{n}` and detached: it outlives a driver that dies,
and the next driver of the same step (the executor's lease makes it the only one) adopts the groups
still whole (holding their heads again) and removes the rest, so a restart does not queue again
for hardware it held. The head reservations stay held until the attempt ends: Ray's own head
reservation would otherwise land on a slice the attempt already holds and wait there forever.

While slices are missing, `pending_reason` says why from Ray's own state (the groups' states, the
hosts alive per slice, the slices of the type the cluster has and whether they are free).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence

import ray
from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group
from ray.util.tpu import SlicePlacementGroup, get_num_tpu_slices

from marin_lab.cluster.errors import SliceCapacityTimeout, StepCancelled, TpuRequestError
from marin_lab.cluster.tpu_types import TpuType

logger = logging.getLogger(__name__)

SLICE_NAME_LABEL = "ray.io/tpu-slice-name"
WORKER_ID_LABEL = "ray.io/tpu-worker-id"
POD_TYPE_LABEL = "ray.io/tpu-pod-type"
GROUP_PREFIX = "marin"
"""Slice placement groups are named `marin:{step}:{attempt}:slice{n}`."""
READY, PENDING, RESCHEDULING, REMOVED = "CREATED", "PENDING", "RESCHEDULING", "REMOVED"

PendingCallback = Callable[[str | None], None]
"""Hears the current pending reason whenever it changes, and None once the slices are held."""


@dataclasses.dataclass
class SliceReservation:
    """One slice's placement group (and its held head) for one attempt."""

    name: str
    group: PlacementGroup
    slice_name: str
    handle: SlicePlacementGroup | None = None
    """Ray's handle for a group reserved by this driver (it also holds the head)."""
    head: PlacementGroup | None = None
    """The head held again for a group adopted from an earlier driver."""

    def state(self, table: dict[str, dict] | None = None) -> str:
        table = placement_group_table() if table is None else table
        return str(table.get(self.group.id.hex(), {}).get("state", REMOVED))

    def release(self) -> None:
        with contextlib.suppress(Exception):  # already gone is fine
            if self.handle is not None:
                self.handle.shutdown()
            else:
                remove_placement_group(self.group)
        if self.head is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(self.head)


def group_prefix(step_name: str) -> str:
    return f"{GROUP_PREFIX}:{step_name}:"


def step_groups(step_name: str) -> list[tuple[PlacementGroup, dict]]:
    """The step's slice placement groups that Ray has not removed, with their table entries."""
    prefix = group_prefix(step_name)
    return [
        (PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))), info)
        for pg_id, info in placement_group_table().items()
        if str(info.get("name", "")).startswith(prefix) and info.get("state") != REMOVED
    ]


def _alive_nodes() -> dict[str, dict]:
    return {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}


def held_pod_types(step_name: str) -> set[str]:
    """The pod types (`ray.io/tpu-pod-type`) of the hosts the step's remaining groups are placed on."""
    nodes = _alive_nodes()
    return {
        str(nodes[node_id].get("Labels", {}).get(POD_TYPE_LABEL))
        for _, info in step_groups(step_name)
        for node_id in info.get("bundles_to_node_id", {}).values()
        if node_id in nodes
    }


def _hold_head(tpu: TpuType, slice_name: str) -> PlacementGroup:
    """Hold an adopted slice's head as Ray's own reservation does (same resource, same labels)."""
    return placement_group(
        [{tpu.head_resource: 1}],
        bundle_label_selector=[
            {WORKER_ID_LABEL: "0", POD_TYPE_LABEL: tpu.accelerator_type, SLICE_NAME_LABEL: slice_name}
        ],
    )


def adopt_or_release(step_name: str, tpu: TpuType, want: int) -> list[SliceReservation]:
    """Take over the step's groups left by an earlier driver: a ready group of `tpu` on one whole
    slice is kept (up to `want`), anything else is removed."""
    nodes = _alive_nodes()
    kept: list[SliceReservation] = []
    for group, info in step_groups(step_name):
        hosts = [nodes.get(node_id, {}).get("Labels", {}) for node_id in info.get("bundles_to_node_id", {}).values()]
        slices = {labels.get(SLICE_NAME_LABEL) for labels in hosts}
        whole = (
            info.get("state") == READY
            and len(hosts) == tpu.hosts == len(info.get("bundles", {}))
            and all(labels.get(POD_TYPE_LABEL) == tpu.accelerator_type for labels in hosts)
            and len(slices) == 1
            and None not in slices
        )
        if whole and len(kept) < want:
            slice_name = str(next(iter(slices)))
            kept.append(SliceReservation(info["name"], group, slice_name, head=_hold_head(tpu, slice_name)))
            logger.info(
                "step %r: reusing slice %s held by %s (an earlier driver's)", step_name, slice_name, info["name"]
            )
        else:
            logger.info("step %r: removing %s (%s), left by an earlier driver", step_name, info["name"], info["state"])
            with contextlib.suppress(Exception):
                remove_placement_group(group)
    return kept


def try_reserve(tpu: TpuType, name: str, head_wait_s: float, step_name: str) -> SliceReservation | None:
    """Ask Ray for one more slice: None when no slice head came free within `head_wait_s`."""
    try:
        handle = SlicePlacementGroup(
            topology=tpu.topology,
            accelerator_version=tpu.generation.gce_accelerator_prefix,
            resources_per_bundle={"TPU": tpu.chips_per_host, "CPU": 0},
            strategy="STRICT_SPREAD",
            name=name,
            lifetime="detached",
            head_reservation_timeout_s=head_wait_s,
            bundle_label_selector=[{WORKER_ID_LABEL: str(w)} for w in range(tpu.hosts)],
        )
    except TimeoutError:
        return None
    except ValueError as err:
        raise TpuRequestError(
            f"step {step_name!r}: Ray's TPU API cannot reserve {tpu.name} (topology {tpu.topology}): {err}; "
            f"choose another slice type"
        ) from err
    group = handle.placement_group
    assert group is not None  # one group per handle (pg_per_slice=False)
    return SliceReservation(name, group, handle.bundle_label_selector[0].get(SLICE_NAME_LABEL, ""), handle=handle)


@dataclasses.dataclass(frozen=True)
class Census:
    """What Ray says about the slices of one type right now."""

    intact: int
    """Slices of the type whose every host is alive (`get_num_tpu_slices`)."""
    hosts_alive: dict[str, int]
    """Alive hosts per slice name, for the slices the attempt is waiting on."""


def census(tpu: TpuType, waiting_on: Sequence[str]) -> Census:
    hosts: dict[str, int] = dict.fromkeys(waiting_on, 0)
    for node in _alive_nodes().values():
        name = node.get("Labels", {}).get(SLICE_NAME_LABEL)
        if name in hosts:
            hosts[name] += 1
    return Census(get_num_tpu_slices(tpu.topology, tpu.ray_accelerator_type), hosts)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def pending_reason(tpu: TpuType, want: int, held: Sequence[SliceReservation], table: dict[str, dict]) -> str:
    """Why `want` slices of `tpu` are not all held, from Ray's state (without the elapsed time)."""
    ready = [r for r in held if r.state(table) == READY]
    waiting = [r for r in held if r.state(table) != READY]
    seen = census(tpu, [r.slice_name for r in waiting])
    parts = [f"{len(ready)} slice{'s' if len(ready) != 1 else ''} ready"]
    for r in waiting:
        alive = seen.hosts_alive.get(r.slice_name, 0)
        if alive < tpu.hosts:
            parts.append(f"slice {r.slice_name} has {alive} of {tpu.hosts} hosts (waiting for them to come back)")
        else:
            parts.append(f"slice {r.slice_name} is whole, its hosts not all free yet")
    missing = want - len(held)
    if missing > 0:
        # Whole slices of the type that this attempt does not hold are busy with other work.
        ours = len(ready) + sum(1 for r in waiting if seen.hosts_alive[r.slice_name] >= tpu.hosts)
        busy = min(missing, max(0, seen.intact - ours))
        absent = missing - busy

        def count(n: int) -> str:
            return "the other" if n == missing == 1 and want > 1 else str(n)

        if busy:
            parts.append(f"{count(busy)} held by other work")
        if absent:
            parts.append(f"{count(absent)} not in the cluster (infeasible until nodes are added)")
    return ", ".join(parts)


def reserve_slices(
    tpu: TpuType,
    counts: Sequence[int],
    *,
    step_name: str,
    run_id: str,
    capacity_timeout_s: float,
    elastic_wait_s: float,
    poll_s: float,
    cancel: threading.Event | None = None,
    on_pending: PendingCallback | None = None,
) -> list[SliceReservation]:
    """Hold the largest allowed count of whole slices (slice 0 first); release everything else.

    A fixed count waits for all its slices. An elastic one (several counts) takes the largest
    count it holds once it holds every whole slice the cluster has, or after `elastic_wait_s`.
    Raises SliceCapacityTimeout (a preemption: capacity was lost) after `capacity_timeout_s`,
    StepCancelled when `cancel` is set; either way nothing stays reserved."""
    counts = sorted(set(counts))
    want = counts[-1]
    head_wait_s = max(poll_s, 1.0)
    held = adopt_or_release(step_name, tpu, want)
    made = 0
    t0 = time.monotonic()
    said: str | None = None
    try:
        while True:
            if cancel is not None and cancel.is_set():
                raise StepCancelled(f"step {step_name!r}: cancelled while waiting for {want} x {tpu.name}")
            # Take every slice whose head is free now; the first that is not ends the round.
            while len(held) < want:
                reservation = try_reserve(tpu, f"{group_prefix(step_name)}{run_id}:slice{made}", head_wait_s, step_name)
                made += 1
                if reservation is None:
                    break
                held.append(reservation)
            waiting = [r.group.ready() for r in held]
            if waiting:  # a group just asked for is usually placed at once; let it be before judging
                ray.wait(waiting, num_returns=len(waiting), timeout=poll_s)
            table = placement_group_table()
            ready = [r for r in held if r.state(table) == READY]
            elapsed = time.monotonic() - t0
            usable = [c for c in counts if c <= len(ready)]
            whole = get_num_tpu_slices(tpu.topology, tpu.ray_accelerator_type) if usable and len(counts) > 1 else 0
            if len(ready) >= want or (usable and (elapsed >= elastic_wait_s or len(ready) >= whole)):
                chosen = ready[: usable[-1]]
                for r in held:
                    if r not in chosen:
                        r.release()
                if said is not None:
                    logger.info("step %r: holds %d x %s after %s", step_name, len(chosen), tpu.name, _duration(elapsed))
                    if on_pending is not None:
                        on_pending(None)
                return chosen
            why = pending_reason(tpu, want, held, table)
            if why != said:
                line = f"waiting {_duration(elapsed)} for {want} x {tpu.name}: {why}"
                logger.info("step %r: %s", step_name, line)
                said = why
                if on_pending is not None:
                    on_pending(line)
            if elapsed >= capacity_timeout_s:
                raise SliceCapacityTimeout(
                    f"step {step_name!r}: only {len(ready)} whole {tpu.name} slice(s) free after {elapsed:.0f}s, "
                    f"need {counts[0]} ({why}); add capacity (`ray status`, `marin-lab cluster status`), allow "
                    f"fewer slices (slices=[1, ...]) or raise capacity_timeout_s"
                )
    except BaseException:
        for r in held:
            r.release()
        raise


def release_all(reservations: Sequence[SliceReservation]) -> None:
    for r in reservations:
        r.release()


__all__ = [
    "GROUP_PREFIX",
    "Census",
    "PendingCallback",
    "SliceReservation",
    "adopt_or_release",
    "held_pod_types",
    "pending_reason",
    "release_all",
    "reserve_slices",
    "step_groups",
]
