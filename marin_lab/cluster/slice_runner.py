"""Run a function once per host on whole TPU slices reserved through Ray.

How a TPU slice looks to Ray (Ray's own TPU support sets this up on real TPU VMs, and the tests
fake it with `ray.cluster_utils.Cluster`): every host of a slice carries a custom resource named
after the slice (value 1) and `TPU: <chips on the host>`; the slice's first host also carries
`TPU-<type>-head: 1`; Ray 2.4x+ adds the node labels `ray.io/tpu-slice-name` and
`ray.io/tpu-worker-id`.

One attempt goes like this:
1. Reserve slices by starting one actor per wanted slice that asks for the head resource (this
   also tells an autoscaler what to bring up). Wait until enough of them are placed; an elastic
   request takes the largest allowed count that is placed after `elastic_wait_s`.
2. Each head actor reports its slice name; the slice's other hosts get one actor each, pinned by
   the slice-name resource plus the host's whole TPU count, so no host runs two.
3. Every host runs `fn(config)` with TPU_WORKER_ID, the MARIN_* variables with which `train_lm`
   joins one JAX cluster (`training.distributed`; coordinator: worker 0 of slice 0, on a port
   free there) and, for more than one slice, the MEGASCALE_* variables.
4. Results are gathered as they arrive; the first error kills every host's actor at once, so no
   host keeps training alone, and is re-raised carrying the attempt's hardware (slices, and each
   host's Ray node), so the record lists it for a preempted attempt too. A host's own error first
   waits a little for news of a lost peer: the collectives of the hosts that remain break when one
   is reclaimed, and then the attempt is a preemption, not a failure. All actors are killed at
   the end either way.
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

from marin_lab.cluster.classify import PREEMPTION, PreemptionProbe, classify_error, safe_probe
from marin_lab.cluster.errors import ClusterError, PreemptedError, SliceCapacityTimeout, StepCancelled
from marin_lab.cluster.tpu_types import TpuType
from marin_lab.execution.plan.resources import attach_hardware
from marin_lab.host_env import NUM_SLICES, process_env

logger = logging.getLogger(__name__)

NAMESPACE = "marin_lab"
"""Ray namespace of the host actors; their names are `marin:{step}:{run_id}:s{slice}:h{host}`."""
SLICE_NAME_LABEL = "ray.io/tpu-slice-name"
WORKER_ID_LABEL = "ray.io/tpu-worker-id"
_STANDARD_RESOURCES = {"CPU", "GPU", "TPU", "memory", "object_store_memory"}


class _SliceHost:
    """One host's share of a step: runs `fn(config)` in a dedicated worker process."""

    # @ray.method without options changes nothing at runtime; it types `.where.remote()` for mypy.
    @ray.method
    def where(self) -> dict:
        ctx = ray.get_runtime_context()
        labels = {}
        with contextlib.suppress(Exception):  # older Rays have no labels; resources are the fallback
            labels = dict(ctx.get_node_labels())
        with socket.socket() as probe:  # a port free on this host, for JAX's coordinator if it is host 0
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        return {
            "node_id": ctx.get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "labels": labels,
            "free_port": port,
        }

    @ray.method
    def run(self, fn: Callable[[Any], Any], config: Any, env: Mapping[str, str], probe: PreemptionProbe | None) -> Any:
        # A dedicated actor process, so setting the environment affects only this host's work.
        os.environ.update(env)
        try:
            return fn(config)
        except Exception as err:
            # The metadata lives on the host, so the host asks it before the error leaves.
            if probe is not None and not isinstance(err, PreemptedError) and safe_probe(probe):
                raise PreemptedError(
                    f"host {env.get('TPU_WORKER_ID')} of slice {env.get('MARIN_SLICE_NAME')} was preempted "
                    f"(instance metadata) while running: {type(err).__name__}: {err}"
                ) from err
            raise


@dataclasses.dataclass
class SliceRun:
    """What one attempt used and produced."""

    result: Any
    """fn's return value on worker 0 of slice 0 (every host's values are in `host_results`)."""
    host_results: list[Any]
    hardware: dict


def _slice_name_of(node_id: str, labels: Mapping[str, str], tpu: TpuType) -> str:
    if labels.get(SLICE_NAME_LABEL):
        return labels[SLICE_NAME_LABEL]
    # No labels: the slice name is the node's one custom resource that is not a standard one.
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            candidates = [
                key
                for key, value in node.get("Resources", {}).items()
                if key not in _STANDARD_RESOURCES
                and value == 1
                and not key.startswith(("node:", "accelerator_type:"))
                and key != tpu.head_resource
                and not key.startswith("TPU-")
            ]
            if len(candidates) == 1:
                return candidates[0]
            raise ClusterError(
                f"cannot tell the slice name of node {node_id}: it has no {SLICE_NAME_LABEL!r} label and "
                f"{len(candidates)} candidate slice resources {candidates}; give TPU hosts a slice-name label"
            )
    raise PreemptedError(f"node {node_id} holding a {tpu.name} slice head vanished while reserving it")


def _check_cancel(cancel: threading.Event | None, step_name: str) -> None:
    if cancel is not None and cancel.is_set():
        raise StepCancelled(f"step {step_name!r}: cancelled; every host's work was stopped")


def _kill_all(actors: Sequence[Any]) -> None:
    for actor in actors:
        with contextlib.suppress(Exception):  # already dead is fine
            ray.kill(actor, no_restart=True)


def _await_hosts(
    s: dict,
    tpu: TpuType,
    step_name: str,
    t0: float,
    capacity_timeout_s: float,
    poll_s: float,
    cancel: threading.Event | None,
) -> None:
    """Wait until every other host of a reserved slice has its actor placed."""
    while s["where"]:
        _check_cancel(cancel, step_name)
        ready, _ = ray.wait(s["where"], num_returns=len(s["where"]), timeout=poll_s)
        if len(ready) == len(s["where"]):
            return
        hosts, _ = _slice_census(tpu)
        elapsed = time.monotonic() - t0
        if hosts.get(s["name"], 0) < tpu.hosts or elapsed >= capacity_timeout_s:
            raise SliceCapacityTimeout(
                f"step {step_name!r}: slice {s['name']} has {hosts.get(s['name'], 0)} of {tpu.hosts} hosts alive and "
                f"{1 + len(ready)} placed after {elapsed:.0f}s; a host was lost while reserving the slice"
            )


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
) -> SliceRun:
    """Reserve whole slices, run `fn(config)` once per host, and gather the results (see module doc).

    A host's own error waits up to `peer_loss_grace_s` for news that another host of the attempt
    was lost (see `_lost_peer`); about Ray's time to notice a dead node (~30 s by default).
    `on_hardware(hardware)` is called once every host is placed, before training starts: the
    executor records it then, so even an attempt whose driver dies mid-run lists its hosts."""
    counts = sorted(set(slice_counts))
    want = counts[-1]
    run_id = uuid.uuid4().hex[:8]
    chips = tpu.chips_per_host
    actors: list[Any] = []
    t0 = time.monotonic()

    base_env = {k: str(v) for k, v in (extra_env or {}).items()}

    def actor_opts(name: str, resources: dict) -> dict:
        opts = {
            "name": name,
            "namespace": NAMESPACE,
            "num_cpus": 0,
            "max_restarts": 0,
            "max_task_retries": 0,
            "resources": resources,
        }
        if base_env:
            # Set when the host's process starts, before anything imports JAX (JAX_PLATFORMS is
            # read at import, XLA_FLAGS when the backend starts); Ray merges these env_vars with
            # the job's runtime environment.
            opts["runtime_env"] = {"env_vars": base_env}
        return opts

    remote_host = ray.remote(_SliceHost)
    hardware: dict | None = None  # known once every host is placed; an error after that carries it
    try:
        heads = [
            remote_host.options(
                **actor_opts(f"marin:{step_name}:{run_id}:s{i}:h0", {tpu.head_resource: 1, "TPU": chips})
            ).remote()
            for i in range(want)
        ]
        actors.extend(heads)
        where_refs = [h.where.remote() for h in heads]
        chosen, names, infos = _await_slices(
            where_refs, counts, tpu, step_name, t0, capacity_timeout_s, elastic_wait_s, poll_s, cancel
        )
        n_slices = len(chosen)
        _kill_all([h for i, h in enumerate(heads) if i not in chosen])

        # Slice layout: for each chosen slice, its name and every host's actor.
        slices: list[dict] = []
        for slice_id, head_index in enumerate(chosen):
            info, name = infos[head_index], names[head_index]
            others = [
                remote_host.options(
                    **actor_opts(f"marin:{step_name}:{run_id}:s{slice_id}:h{h}", {name: 1, "TPU": chips})
                ).remote()
                for h in range(1, tpu.hosts)
            ]
            actors.extend(others)
            slices.append(
                {
                    "name": name,
                    "actors": [heads[head_index], *others],
                    "infos": [info],
                    "where": [h.where.remote() for h in others],
                }
            )
        for s in slices:
            _await_hosts(s, tpu, step_name, t0, capacity_timeout_s, poll_s, cancel)
            s["infos"].extend(ray.get(s["where"]))
            _assign_worker_ids(s)

        coordinator_info = slices[0]["infos"][_worker0_index(slices[0])]
        coordinator_ip = coordinator_info["ip"]
        hardware = _hardware(tpu, slices, f"{coordinator_ip}:{megascale_port}" if n_slices > 1 else None)
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
                    env.update(
                        {
                            "MEGASCALE_COORDINATOR_ADDRESS": f"{coordinator_ip}:{megascale_port}",
                            "MEGASCALE_NUM_SLICES": str(n_slices),
                            "MEGASCALE_SLICE_ID": str(slice_id),
                            "MEGASCALE_PORT": str(megascale_port),
                        }
                    )
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
                    lost = _lost_peer(pending, hardware["nodes"], failed, step_name, peer_loss_grace_s, poll_s)
                    if lost is not None:
                        raise lost from err
                    raise

        order = sorted(range(len(run_refs)), key=lambda i: owners[i])
        return SliceRun(result=results[order[0]], host_results=[results[i] for i in order], hardware=hardware)
    except BaseException as err:
        attach_hardware(err, hardware)  # a preempted or failed attempt's record lists its hosts too
        raise
    finally:
        _kill_all(actors)


def _lost_peer(
    pending: list, nodes: list[dict], failed: str, step_name: str, grace_s: float, poll_s: float
) -> PreemptedError | None:
    """After `failed` raised its own error: a PreemptedError if another host of the attempt turns
    out lost within `grace_s` (Ray lists its node dead, or its actor died), else None.

    When a VM is reclaimed, the other hosts' collectives break at once, usually before Ray has
    noticed the lost node; their errors are its consequence, and charging them to the failure
    budget would fail a step that only lost hardware.
    """
    deadline = time.monotonic() + grace_s
    pending = list(pending)
    while True:
        alive = {n.get("NodeID") for n in ray.nodes() if n.get("Alive")}
        gone = [n for n in nodes if n["node_id"] not in alive]
        if gone:
            return PreemptedError(
                f"step {step_name!r}: host {gone[0]['worker_id']} of slice {gone[0]['slice']} lost its Ray node "
                f"{gone[0]['node_id'][:12]} while {failed} raised; that error is taken for a consequence"
            )
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


def _slice_census(tpu: TpuType) -> tuple[dict[str, int], int]:
    """Alive hosts per slice-name resource, and how many whole slices of `tpu` the cluster has now."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    hosts: dict[str, int] = {}
    for node in nodes:
        for key, value in node.get("Resources", {}).items():
            if value == 1 and key not in _STANDARD_RESOURCES and not key.startswith(("node:", "TPU-")):
                hosts[key] = hosts.get(key, 0) + 1
    whole = 0
    for node in nodes:
        if node.get("Resources", {}).get(tpu.head_resource):
            name = node.get("Labels", {}).get(SLICE_NAME_LABEL)
            if name is None:
                names = [k for k in node["Resources"] if k in hosts and not k.startswith("accelerator_type:")]
                name = names[0] if len(names) == 1 else None
            whole += int(name is not None and hosts.get(name, 0) >= tpu.hosts)
    return hosts, whole


def _await_slices(
    where_refs: list,
    counts: list[int],
    tpu: TpuType,
    step_name: str,
    t0: float,
    capacity_timeout_s: float,
    elastic_wait_s: float,
    poll_s: float,
    cancel: threading.Event | None = None,
) -> tuple[list[int], dict[int, str], dict[int, dict]]:
    """Wait until enough head actors are placed on slices whose every host is alive.

    Returns the indices of the chosen heads (slice 0 first), and each placed head's slice name and
    location. A slice missing a host (partly reclaimed) does not count: its head stays reserved,
    since nothing else could use that slice either. An elastic request stops waiting early once it
    holds every whole slice the cluster has, else after `elastic_wait_s`.
    """
    want, names, infos = counts[-1], {}, {}
    while True:
        _check_cancel(cancel, step_name)
        ready, _ = ray.wait(where_refs, num_returns=len(where_refs), timeout=poll_s)
        for ref in ready:
            i = where_refs.index(ref)
            if i not in infos:
                infos[i] = ray.get(ref)
                names[i] = _slice_name_of(infos[i]["node_id"], infos[i]["labels"], tpu)
        hosts, whole = _slice_census(tpu)
        complete = [i for i in sorted(infos) if hosts.get(names[i], 0) >= tpu.hosts]
        elapsed = time.monotonic() - t0
        usable = [c for c in counts if c <= len(complete)]
        if len(complete) >= want or (usable and (elapsed >= elastic_wait_s or len(complete) >= whole)):
            return complete[: usable[-1]], names, infos
        if elapsed >= capacity_timeout_s:
            raise SliceCapacityTimeout(
                f"step {step_name!r}: only {len(complete)} whole {tpu.name} slice(s) free after {elapsed:.0f}s, "
                f"need {counts[0] if len(counts) > 1 else want}; the cluster is short of capacity (check "
                f"`ray status` and `marin-lab cluster status`), or raise capacity_timeout_s"
            )


def _worker0_index(s: dict) -> int:
    return next(i for i, info in enumerate(s["infos"]) if info["worker_id"] == 0)


def _assign_worker_ids(s: dict) -> None:
    """Use the hosts' own TPU worker ids when every host has one, else head=0 and the rest by IP."""
    labelled = [info["labels"].get(WORKER_ID_LABEL) for info in s["infos"]]
    if all(v is not None and str(v).isdigit() for v in labelled) and sorted(int(v) for v in labelled) == list(
        range(len(labelled))
    ):
        for info, v in zip(s["infos"], labelled, strict=True):
            info["worker_id"] = int(v)
        return
    s["infos"][0]["worker_id"] = 0
    rest = sorted(range(1, len(s["infos"])), key=lambda i: (s["infos"][i]["ip"], s["infos"][i]["node_id"]))
    for wid, i in enumerate(rest, start=1):
        s["infos"][i]["worker_id"] = wid


__all__ = ["NAMESPACE", "SliceRun", "run_on_slices"]
