"""Run a function once per host on whole TPU slices reserved through Ray's own TPU API.

How a TPU slice looks to Ray (Ray's TPU support sets this up on real TPU VMs; `testing/local_cluster`
fakes it with `ray.cluster_utils.Cluster`): every host carries `TPU: <chips on the host>`, a
resource named after the slice and the labels `ray.io/tpu-slice-name`, `ray.io/tpu-worker-id`,
`ray.io/tpu-pod-type` and `ray.io/tpu-topology`; the slice's worker 0 also carries
`TPU-<pod type>-head: 1`.

One attempt goes like this:
1. Reserve the slices (`slice_reserve.reserve_slices`): one named STRICT_SPREAD placement group per
   slice through `ray.util.tpu.SlicePlacementGroup`, saying why while it waits.
2. Place one actor in every bundle of every group (bundle i is worker i of its slice).
3. Every host runs `fn(config)` with TPU_WORKER_ID, the MARIN_* variables with which `train_lm`
   joins one JAX cluster (`training.distributed`; coordinator: worker 0 of slice 0, on a port free
   there) and, for more than one slice, Ray's `get_tpu_coordinator_env_vars` (MEGASCALE_*). A
   thread on each host polls the instance metadata about every second; a preemption notice sets
   `host_env.PREEMPTION_NOTICE`, which a training loop checks to checkpoint and stop.
4. Results are gathered as they arrive. Losing any host (its actor or node dies, its slice's group
   is rescheduled, its VM is preempted) ends the attempt for every host at once as one preemption:
   a host's own error first waits a little for news of a lost peer, since the collectives of the
   hosts that remain break when one is reclaimed. Any other first error kills every host too and
   is re-raised carrying the attempt's hardware (slices, and each host's Ray node), so the record
   lists it for a preempted attempt as well. The actors die and the groups are removed at the end
   either way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray
from ray.util.placement_group import placement_group_table
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from ray.util.tpu import get_tpu_coordinator_env_vars

from marin_lab.cluster.classify import PREEMPTION, PreemptionProbe, PreemptionWatcher, classify_error, safe_probe
from marin_lab.cluster.errors import PreemptedError, StepCancelled
from marin_lab.cluster.slice_reserve import (
    READY,
    WORKER_ID_LABEL,
    PendingCallback,
    SliceReservation,
    release_all,
    reserve_slices,
)
from marin_lab.cluster.tpu_types import TpuType
from marin_lab.execution.plan.resources import attach_hardware
from marin_lab.host_env import NUM_SLICES, PREEMPTION_NOTICE, process_env

logger = logging.getLogger(__name__)

NAMESPACE = "marin_lab"
"""Ray namespace of the host actors; their names are `marin:{step}:{run_id}:s{slice}:h{host}`."""


class _SliceHost:
    """One host's share of a step: runs `fn(config)` in a dedicated worker process."""

    # @ray.method without options changes nothing at runtime; it types `.where.remote()` for mypy.
    @ray.method
    def where(self) -> dict:
        ctx = ray.get_runtime_context()
        with socket.socket() as probe:  # a port free on this host, for JAX's coordinator if it is host 0
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        return {
            "node_id": ctx.get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "labels": dict(ctx.get_node_labels()),
            "free_port": port,
        }

    @ray.method
    def run(self, fn: Callable[[Any], Any], config: Any, env: Mapping[str, str], probe: PreemptionProbe | None) -> Any:
        # A dedicated actor process, so setting the environment affects only this host's work.
        os.environ.update(env)
        where = f"host {env.get('TPU_WORKER_ID')} of slice {env.get('MARIN_SLICE_NAME')}"
        watcher = PreemptionWatcher(probe, PREEMPTION_NOTICE, where) if probe is not None else None
        if watcher is not None:
            watcher.start()
        try:
            return fn(config)
        except Exception as err:
            # The metadata lives on the host, so the host asks it before the error leaves.
            if not isinstance(err, PreemptedError) and (
                PREEMPTION_NOTICE.is_set() or (probe is not None and safe_probe(probe))
            ):
                raise PreemptedError(
                    f"{where} was preempted (instance metadata) while running: {type(err).__name__}: {err}"
                ) from err
            raise
        finally:
            if watcher is not None:
                watcher.stop()


@dataclasses.dataclass
class SliceRun:
    """What one attempt used and produced."""

    result: Any
    """fn's return value on worker 0 of slice 0 (every host's values are in `host_results`)."""
    host_results: list[Any]
    hardware: dict


def _kill_all(actors: Sequence[Any]) -> None:
    for actor in actors:
        with contextlib.suppress(Exception):  # already dead is fine
            ray.kill(actor, no_restart=True)


def _check_cancel(cancel: threading.Event | None, step_name: str) -> None:
    if cancel is not None and cancel.is_set():
        raise StepCancelled(f"step {step_name!r}: cancelled; every host's work was stopped")


def run_on_slices(
    fn: Callable[[Any], Any],
    config: Any,
    *,
    tpu: TpuType,
    slice_counts: Sequence[int],
    step_name: str,
    probe: PreemptionProbe | None = None,
    capacity_timeout_s: float = 3600.0,
    elastic_wait_s: float = 60.0,
    megascale_port: int = 8081,
    extra_env: Mapping[str, str] | None = None,
    poll_s: float = 0.5,
    cancel: threading.Event | None = None,
    peer_loss_grace_s: float = 30.0,
    on_hardware: Callable[[dict], None] | None = None,
    on_pending: PendingCallback | None = None,
) -> SliceRun:
    """Reserve whole slices, run `fn(config)` once per host, and gather the results (see module doc).

    A host's own error waits up to `peer_loss_grace_s` for news that another host of the attempt
    was lost (see `_lost_peer`); about Ray's time to notice a dead node (~30 s by default).
    `on_hardware(hardware)` is called once every host is placed, before training starts: the
    executor records it then, so even an attempt whose driver dies mid-run lists its hosts.
    `on_pending(reason)` hears why the attempt waits for its slices whenever that changes."""
    run_id = uuid.uuid4().hex[:8]
    actors: list[Any] = []
    reservations: list[SliceReservation] = []
    base_env = {k: str(v) for k, v in (extra_env or {}).items()}
    hardware: dict | None = None  # known once every host is placed; an error after that carries it
    try:
        reservations = reserve_slices(
            tpu,
            slice_counts,
            step_name=step_name,
            run_id=run_id,
            capacity_timeout_s=capacity_timeout_s,
            elastic_wait_s=elastic_wait_s,
            poll_s=poll_s,
            cancel=cancel,
            on_pending=on_pending,
        )
        n_slices = len(reservations)
        remote_host = ray.remote(_SliceHost)
        slices: list[dict] = []
        for slice_id, r in enumerate(reservations):
            hosts = [
                remote_host.options(
                    name=f"marin:{step_name}:{run_id}:s{slice_id}:h{bundle}",
                    namespace=NAMESPACE,
                    num_cpus=0,
                    resources={"TPU": tpu.chips_per_host},
                    max_restarts=0,
                    max_task_retries=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(r.group, placement_group_bundle_index=bundle),
                    # Set when the host's process starts, before anything imports JAX (JAX_PLATFORMS is
                    # read at import, XLA_FLAGS when the backend starts); Ray merges these env_vars with
                    # the job's runtime environment.
                    **({"runtime_env": {"env_vars": base_env}} if base_env else {}),
                ).remote()
                for bundle in range(tpu.hosts)
            ]
            actors.extend(hosts)
            slices.append({"name": r.slice_name, "actors": hosts, "where": [h.where.remote() for h in hosts]})
        for s in slices:
            s["infos"] = _placed(s["where"], reservations, step_name, cancel, poll_s)
            for bundle, info in enumerate(s["infos"]):
                info["worker_id"] = int(info["labels"].get(WORKER_ID_LABEL, bundle))

        coordinator_info = next(info for info in slices[0]["infos"] if info["worker_id"] == 0)
        coordinator_ip = coordinator_info["ip"]
        hardware = _hardware(tpu, slices, f"{coordinator_ip}:{megascale_port}" if n_slices > 1 else None)
        hardware["placement_groups"] = [r.name for r in reservations]
        if on_hardware is not None:
            on_hardware(hardware)
        jax_coordinator = f"{coordinator_ip}:{coordinator_info['free_port']}"
        fn_ref, config_ref = ray.put(fn), ray.put(config)
        run_refs, owners = [], []
        for slice_id, s in enumerate(slices):
            hostnames = ",".join(info["ip"] for info in sorted(s["infos"], key=lambda i: i["worker_id"]))
            for actor, info in zip(s["actors"], s["infos"], strict=True):
                env = {
                    **base_env,
                    "TPU_WORKER_ID": str(info["worker_id"]),
                    "TPU_WORKER_HOSTNAMES": hostnames,
                    "MARIN_SLICE_NAME": s["name"],
                    "MARIN_SLICE_ID": str(slice_id),
                    NUM_SLICES: str(n_slices),
                    "MARIN_STEP_NAME": step_name,
                    "MARIN_RUN_ID": run_id,
                    "MARIN_NUM_HOSTS": str(n_slices * tpu.hosts),
                }
                if n_slices * tpu.hosts > 1:  # one JAX process per host, joined by train_lm
                    env.update(
                        process_env(jax_coordinator, n_slices * tpu.hosts, slice_id * tpu.hosts + info["worker_id"])
                    )
                if n_slices > 1:
                    env.update(get_tpu_coordinator_env_vars(coordinator_ip, n_slices, slice_id, str(megascale_port)))
                run_refs.append(actor.run.remote(fn_ref, config_ref, env, probe))
                owners.append((slice_id, info["worker_id"]))
        logger.info(
            "step %r: running on %d x %s (%d hosts), coordinator %s",
            step_name,
            n_slices,
            tpu.name,
            len(run_refs),
            coordinator_ip,
        )

        results: dict[int, Any] = {}
        pending = list(run_refs)
        index_of = {ref: i for i, ref in enumerate(run_refs)}
        while pending:
            _check_cancel(cancel, step_name)
            done, pending = ray.wait(pending, num_returns=1, timeout=poll_s)
            for ref in done:
                # ray.get raises the host's error; the finally below stops every other host.
                try:
                    results[index_of[ref]] = ray.get(ref)
                except Exception as err:
                    if classify_error(err) == PREEMPTION:
                        raise
                    slice_id, worker = owners[index_of[ref]]
                    failed = f"host {worker} of slice {slices[slice_id]['name']} ({type(err).__name__})"
                    lost = _lost_peer(
                        pending, reservations, hardware["nodes"], failed, step_name, peer_loss_grace_s, poll_s
                    )
                    if lost is not None:
                        raise lost from err
                    raise
            if pending and not done:
                lost = _lost_host(reservations, hardware["nodes"], step_name, "while the hosts ran")
                if lost is not None:
                    raise lost

        order = sorted(range(len(run_refs)), key=lambda i: owners[i])
        return SliceRun(result=results[order[0]], host_results=[results[i] for i in order], hardware=hardware)
    except BaseException as err:
        attach_hardware(err, hardware)  # a preempted or failed attempt's record lists its hosts too
        raise
    finally:
        _kill_all(actors)
        release_all(reservations)


def _placed(
    where: list, reservations: Sequence[SliceReservation], step_name: str, cancel: threading.Event | None, poll_s: float
) -> list[dict]:
    """Every host actor's location, once all are placed in their (ready) groups."""
    while True:
        _check_cancel(cancel, step_name)
        ready, _ = ray.wait(where, num_returns=len(where), timeout=poll_s)
        if len(ready) == len(where):
            return ray.get(where)
        lost = _lost_host(reservations, [], step_name, "while its hosts were being placed")
        if lost is not None:
            raise lost


def _lost_host(
    reservations: Sequence[SliceReservation], nodes: list[dict], step_name: str, when: str
) -> PreemptedError | None:
    """A PreemptedError naming the first lost host or slice of the attempt, or None if all are whole.

    A slice's group leaves CREATED as soon as Ray knows one of its nodes is dead (it is then being
    rescheduled), so a lost host ends the attempt for every host of every slice at once."""
    table = placement_group_table()
    for r in reservations:
        state = r.state(table)
        if state != READY:
            return PreemptedError(
                f"step {step_name!r}: slice {r.slice_name} lost a host {when} (its placement group {r.name} is "
                f"{state}); every host of the attempt was stopped"
            )
    if nodes:
        alive = {n.get("NodeID") for n in ray.nodes() if n.get("Alive")}
        gone = [n for n in nodes if n["node_id"] not in alive]
        if gone:
            return PreemptedError(
                f"step {step_name!r}: host {gone[0]['worker_id']} of slice {gone[0]['slice']} lost its Ray node "
                f"{gone[0]['node_id'][:12]} {when}; every host of the attempt was stopped"
            )
    return None


def _lost_peer(
    pending: list,
    reservations: Sequence[SliceReservation],
    nodes: list[dict],
    failed: str,
    step_name: str,
    grace_s: float,
    poll_s: float,
) -> PreemptedError | None:
    """After `failed` raised its own error: a PreemptedError if another host of the attempt turns
    out lost within `grace_s` (its group is rescheduled, Ray lists its node dead, or its actor
    died), else None.

    When a VM is reclaimed, the other hosts' collectives break at once, usually before Ray has
    noticed the lost node; their errors are its consequence, and charging them to the failure
    budget would fail a step that only lost hardware.
    """
    deadline = time.monotonic() + grace_s
    pending = list(pending)
    while True:
        lost = _lost_host(reservations, nodes, step_name, f"while {failed} raised (taken for a consequence)")
        if lost is not None:
            return lost
        if not pending or time.monotonic() >= deadline:
            return None
        done, pending = ray.wait(pending, num_returns=1, timeout=poll_s)
        for ref in done:
            try:
                ray.get(ref)
            except Exception as err:  # noqa: BLE001 - only a lost host matters here
                if classify_error(err) == PREEMPTION:
                    return PreemptedError(
                        f"step {step_name!r}: a host was lost ({type(err).__name__}) while "
                        f"{failed} raised; that error is taken for a consequence"
                    )


def _hardware(tpu: TpuType, slices: list[dict], coordinator: str | None) -> dict:
    """What an attempt runs on, for its record: the slices, and per host its slice, worker id and
    Ray node (a host that moved to another VM after a preemption shows up as another node)."""
    return {
        "kind": "tpu",
        "type": tpu.name,
        "slices": len(slices),
        "hosts": len(slices) * tpu.hosts,
        "hosts_per_slice": tpu.hosts,
        "chips": len(slices) * tpu.chips,
        "slice_names": [s["name"] for s in slices],
        "coordinator": coordinator,
        "nodes": [
            {
                "slice": s["name"],
                "worker_id": info["worker_id"],
                "node_id": info["node_id"],
                "ip": info["ip"],
                "hostname": info["hostname"],
            }
            for s in slices
            for info in sorted(s["infos"], key=lambda i: i["worker_id"])
        ],
    }


__all__ = ["NAMESPACE", "SliceRun", "run_on_slices"]
