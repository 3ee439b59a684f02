"""A local multi-node Ray cluster that looks like TPU slices: one Ray node per simulated host.

Every node carries what Ray's TPU support puts on a real TPU VM: `TPU: <chips per host>`, a
resource named after its slice, `TPU-<type>-head` on the slice's first host, and the
`ray.io/tpu-slice-name` / `ray.io/tpu-worker-id` labels. `TpuResources(tpu=...)` then reserves
and runs on these nodes exactly as on TPU VMs; with `env={"XLA_FLAGS":
"--xla_force_host_platform_device_count=N", "JAX_PLATFORMS": "cpu"}` each host's process has N
CPU devices and `train_lm` runs as one JAX cluster across them.

    with LocalTpuCluster("v4-16", slices=1) as cluster:   # 2 hosts
        TpuResources(tpu="v4-16", env=...).run(train_lm, config, step_name="train")
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from marin_lab.cluster.tpu_types import parse_tpu_type
from marin_lab.ray_niceness import run_workers_at_normal_priority

SLICE_NAME_LABEL = "ray.io/tpu-slice-name"
WORKER_ID_LABEL = "ray.io/tpu-worker-id"


class LocalTpuCluster:
    """`slices` slices of `tpu` (each `hosts` Ray nodes) on this machine; ray.init-ed on entry."""

    def __init__(
        self,
        tpu: str,
        slices: int = 1,
        *,
        slice_names: Sequence[str] | None = None,
        fast_failure_detection: bool = True,
    ):
        self.tpu = parse_tpu_type(tpu)
        self.slice_names = list(slice_names or [f"slice-{i}" for i in range(slices)])
        self.fast_failure_detection = fast_failure_detection
        self.cluster: Any = None
        self.nodes: dict[tuple[str, int], Any] = {}

    def _node_args(self, slice_name: str, worker: int) -> dict[str, Any]:
        resources = {"TPU": self.tpu.chips_per_host, slice_name: 1}
        if worker == 0:
            resources[self.tpu.head_resource] = 1
        return {
            "num_cpus": 0,
            "resources": resources,
            "labels": {
                SLICE_NAME_LABEL: slice_name,
                WORKER_ID_LABEL: str(worker),
                "ray.io/tpu-pod-type": self.tpu.name,
            },
        }

    def start(self) -> LocalTpuCluster:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        run_workers_at_normal_priority()  # the simulated hosts' trainers run in Ray workers
        import ray
        from ray.cluster_utils import Cluster

        first = self.slice_names[0]
        head = {**self._node_args(first, 0), "num_cpus": 1, "include_dashboard": False}
        if self.fast_failure_detection:
            # Notice a removed node within ~1 s instead of the default ~30 s. A live node stays safe
            # on a loaded machine: each check waits up to 10 s for its answer (Ray's default, made
            # explicit), and 3 must fail in a row.
            head["_system_config"] = {
                "health_check_initial_delay_ms": 0,
                "health_check_period_ms": 300,
                "health_check_timeout_ms": 10_000,
                "health_check_failure_threshold": 3,
            }
        # The Ray head doubles as the first host: one raylet fewer to start.
        self.cluster = Cluster(initialize_head=True, head_node_args=head)
        self.nodes[(first, 0)] = self.cluster.head_node
        for name in self.slice_names:
            for worker in range(self.tpu.hosts):
                if (name, worker) not in self.nodes:
                    self.add_host(name, worker)
        ray.init(address=self.cluster.address, logging_level=logging.WARNING)
        return self

    def add_host(self, slice_name: str, worker: int) -> None:
        self.nodes[(slice_name, worker)] = self.cluster.add_node(**self._node_args(slice_name, worker))

    def remove_host(self, slice_name: str, worker: int, *, wait_until_dead: bool = False) -> None:
        """Take a host away abruptly (what a preemption does to a TPU VM)."""
        import ray

        node = self.nodes.pop((slice_name, worker))
        self.cluster.remove_node(node, allow_graceful=False)
        if not wait_until_dead:
            return
        # On a loaded machine Ray takes longer than usual to notice; a request made before it has
        # may be placed on the dead node. Wait on the condition, not on a guess of how long it takes.
        deadline = time.monotonic() + 60
        while any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"Ray still lists {slice_name}/{worker} alive 60 s after its removal")
            time.sleep(0.2)

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()

    def __enter__(self) -> LocalTpuCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
