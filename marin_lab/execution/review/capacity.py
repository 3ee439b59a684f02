"""Impossible requests fail fast: a step whose resources no node can ever hold never waits.

A step asks one node for CPUs, GPUs, memory, TPU chips or custom Ray resources (resources.py).
When the cluster is known before anything runs (the local backend: this machine; a Ray this
process already joined: its nodes; a local Ray the run will start: this machine), a request no
node can hold is refused with the plan: one line per step, naming the request and the largest
node. A real run stops there; a dry run prints it beside the step.

When the cluster is not known yet (`--ray_address` / `RAY_ADDRESS`: an autoscaling cluster may
add a node that fits), the step is submitted and watched: while no live node can hold it, a clock
runs; after `MARIN_UNSCHEDULABLE_TIMEOUT_S` (default 600 s, or the executor's
`unschedulable_timeout_s`) without one, the step is cancelled and FAILED with the same line.
A node that fits, appearing meanwhile, stops the clock. Nothing is pending for ever.
"""

from __future__ import annotations

import glob
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import psutil

UNSCHEDULABLE_TIMEOUT_ENV = "MARIN_UNSCHEDULABLE_TIMEOUT_S"
DEFAULT_UNSCHEDULABLE_TIMEOUT_S = 600.0
_ANY_ACCELERATOR = "accelerator_type:*"
"""On this machine with GPUs, their type is not looked up: any `accelerator_type` is taken to fit."""
_SCALAR = {"CPU", "GPU", "TPU", "memory"}


def unschedulable_timeout_s(explicit: float | None = None) -> float:
    """The bounded wait for a request no node can hold: `explicit`, else the environment, else 600 s."""
    if explicit is not None:
        return float(explicit)
    raw = os.environ.get(UNSCHEDULABLE_TIMEOUT_ENV, "").strip()
    try:
        return float(raw) if raw else DEFAULT_UNSCHEDULABLE_TIMEOUT_S
    except ValueError:
        return DEFAULT_UNSCHEDULABLE_TIMEOUT_S


def node_request(resources: Any) -> dict[str, float] | None:
    """What a step needs of one node, in Ray's resource names; None when it cannot be told (a
    HardwareRunner that says nothing of its needs) or it needs nothing beyond a CPU."""
    options: Any = resources
    if resources is not None and not isinstance(resources, dict):
        tpu = getattr(resources, "tpu_type", None)
        head, chips = getattr(tpu, "head_resource", None), getattr(tpu, "chips_per_host", None)
        if isinstance(head, str) and isinstance(chips, (int, float)):
            return {"TPU": float(chips), head: 1.0}
        make = getattr(resources, "ray_options", None)
        options = make() if callable(make) else None
        if not isinstance(options, dict):
            return None
    options = options or {}
    need: dict[str, float] = {}
    for key, name in (("num_cpus", "CPU"), ("num_gpus", "GPU"), ("memory", "memory")):
        value = options.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            need[name] = float(value)
    custom = options.get("resources")
    if isinstance(custom, dict):
        for key, value in custom.items():
            if isinstance(key, str) and isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                need[key] = float(value)
    accel = options.get("accelerator_type")
    if isinstance(accel, str) and accel:
        need[f"accelerator_type:{accel}"] = 0.001
    return need or None


def fits(need: dict[str, float], node: dict[str, float]) -> bool:
    for key, amount in need.items():
        have = node.get(key, 0.0)
        if key.startswith("accelerator_type:") and node.get(_ANY_ACCELERATOR):
            have = node.get(_ANY_ACCELERATOR, 0.0)
        if have + 1e-9 < amount:
            return False
    return True


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def describe(amounts: dict[str, float]) -> str:
    """`num_gpus=1, memory=2.0 GiB` / `4 CPU, 0 GPU, 7.6 GiB memory`-style text."""
    parts = []
    for key in ("CPU", "GPU", "TPU"):
        if key in amounts:
            value = amounts[key]
            parts.append(f"{value:g} {key}")
    if "memory" in amounts:
        parts.append(f"{_gib(amounts['memory'])} memory")
    extra = sorted(
        k
        for k in amounts
        if k not in _SCALAR and not k.startswith("node:") and k != _ANY_ACCELERATOR and not k.startswith("object_store")
    )
    parts += [f"{amounts[k]:g} {k}" for k in extra[:6]]
    if len(extra) > 6:
        parts.append(f"... ({len(extra) - 6} more resources)")
    return ", ".join(parts) or "nothing"


def largest(nodes: list[dict[str, float]]) -> dict[str, float]:
    return max(
        nodes, key=lambda n: (n.get("GPU", 0.0), n.get("TPU", 0.0), n.get("CPU", 0.0), n.get("memory", 0.0)), default={}
    )


def this_machine() -> dict[str, float]:
    """This machine as a local Ray sees it: its cores, its NVIDIA GPUs (CUDA_VISIBLE_DEVICES when
    set, else /dev/nvidiaN), its memory; TPUs only where a TPU VM says so."""
    node: dict[str, float] = {"CPU": float(os.cpu_count() or 1), "memory": float(psutil.virtual_memory().total)}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        gpus = len(ids)
    else:
        gpus = len([p for p in glob.glob("/dev/nvidia*") if p[len("/dev/nvidia") :].isdigit()])
    node["GPU"] = float(gpus)
    if gpus:
        node[_ANY_ACCELERATOR] = 1.0
    tpu_type = os.environ.get("TPU_ACCELERATOR_TYPE")
    if tpu_type and glob.glob("/dev/accel*") + glob.glob("/dev/vfio/[0-9]*"):
        chips = len(glob.glob("/dev/accel*")) or len(glob.glob("/dev/vfio/[0-9]*"))
        node["TPU"] = float(chips)
        node[f"TPU-{tpu_type}-head"] = 1.0
    return node


def ray_nodes() -> list[dict[str, float]] | None:
    """The live nodes of the Ray this process has joined (their total resources); None when it
    has joined none (Ray is never imported here for this)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    try:
        return [{k: float(v) for k, v in (n.get("Resources") or {}).items()} for n in ray.nodes() if n.get("Alive")]
    except Exception:  # the cluster cannot be asked now: not known
        return None


def known_cluster(backend: str, ray_address: str | None) -> tuple[list[dict[str, float]], str] | None:
    """(nodes, what they are) when the cluster a run will use is known before it starts."""
    if backend == "local":
        return [this_machine()], "this machine (--backend local)"
    nodes = ray_nodes()
    if nodes is not None:
        return nodes, "the Ray cluster this process has joined"
    if ray_address or os.environ.get("RAY_ADDRESS"):
        return None  # a cluster elsewhere, perhaps autoscaling: judged while the step waits
    return [this_machine()], "this machine (the local Ray a run starts here)"


def refusal(step: str, need: dict[str, float], nodes: list[dict[str, float]], where: str) -> str:
    top = largest(nodes)
    return (
        f"step '{step}': asks for {describe(need)} on one node, but no node of {where} can ever hold it "
        f"(largest node: {describe({'CPU': 0.0, 'GPU': 0.0, **top}) if top else 'none alive'}); lower its "
        "resources, or run it on a "
        "cluster that has them (--ray_address)"
    )


def check(
    step: str, resources: Any, nodes: list[dict[str, float]], where: str, *, local_backend: bool = False
) -> str | None:
    """The refusal line when no node can hold the step's request; None when one can (or the
    request cannot be told). The local backend runs every step in a process of this machine:
    CPUs and custom Ray resources are not reserved there, so only GPUs, TPUs and memory count."""
    need = node_request(resources)
    if not need:
        return None
    if local_backend:
        need = {
            k: v
            for k, v in need.items()
            if k in ("GPU", "TPU", "memory") or k.startswith("accelerator_type:") or k.startswith("TPU-")
        }
        if not need:
            return None
    if any(fits(need, node) for node in nodes):
        return None
    return refusal(step, need, nodes, where)


class UnschedulableWatch:
    """While a submitted step waits: the clock of how long no live node could hold it."""

    def __init__(
        self,
        step: str,
        resources: Any,
        nodes: Callable[[], list[dict[str, float]] | None],
        timeout_s: float,
        *,
        every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.step, self.need, self.nodes = step, node_request(resources), nodes
        self.timeout_s, self.every_s, self.clock = timeout_s, every_s, clock
        self._since: float | None = None
        self._last_check = -float("inf")

    def poll(self) -> str | None:
        """The refusal line once no node could hold the step for `timeout_s`; else None."""
        if not self.need:
            return None
        now = self.clock()
        if now - self._last_check < min(self.every_s, max(self.timeout_s / 2, 0.1)):
            return None
        self._last_check = now
        nodes = self.nodes()
        if nodes is None:
            return None
        if any(fits(self.need, node) for node in nodes):
            self._since = None
            return None
        if self._since is None:
            self._since = now
        if now - self._since >= self.timeout_s:
            return (
                refusal(self.step, self.need, nodes, "the Ray cluster")
                + f"; gave up after {self.timeout_s:g} s without one ({UNSCHEDULABLE_TIMEOUT_ENV})"
            )
        return None
