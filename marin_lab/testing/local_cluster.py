"""A local multi-node Ray cluster that looks like TPU slices: one Ray node per simulated host.

Every node carries what Ray's TPU support puts on a real TPU VM: `TPU: <chips per host>`, a
resource named after its slice, `accelerator_type:TPU-V4`, `TPU-<pod type>-head` on the slice's
first host, the labels `ray.io/tpu-slice-name`, `ray.io/tpu-worker-id`, `ray.io/tpu-pod-type`,
`ray.io/tpu-topology` and `ray.io/accelerator-type`, and `TPU_NAME` in its processes' environment
(where Ray's TPU API reads a reserved head's slice name), so `ray.util.tpu` runs its own code paths
here. Each host also has its own instance-metadata stand-in on 127.0.0.1 (`MARIN_PREEMPTED_URL`):
`notice_preemption` makes it answer TRUE, as GCE does about 30 s before it reclaims a VM.
`TpuResources(tpu=...)` then reserves and runs on these nodes exactly as on TPU VMs; with `env={"XLA_FLAGS":
"--xla_force_host_platform_device_count=N", "JAX_PLATFORMS": "cpu"}` each host's process has N
CPU devices and `train_lm` runs as one JAX cluster across them.

    with LocalTpuCluster("v4-16", slices=1) as cluster:   # 2 hosts
        TpuResources(tpu="v4-16", env=...).run(train_lm, config, step_name="train")
"""

from __future__ import annotations

import http.server
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from marin_lab.cluster.classify import PREEMPTED_URL_ENV
from marin_lab.cluster.tpu_types import parse_tpu_type
from marin_lab.ray_niceness import run_workers_at_normal_priority

SLICE_NAME_LABEL = "ray.io/tpu-slice-name"
WORKER_ID_LABEL = "ray.io/tpu-worker-id"
POD_TYPE_LABEL = "ray.io/tpu-pod-type"
TOPOLOGY_LABEL = "ray.io/tpu-topology"
ACCELERATOR_TYPE_LABEL = "ray.io/accelerator-type"


class MetadataStandIn:
    """One VM's instance metadata on 127.0.0.1: `/computeMetadata/v1/instance/preempted` answers
    FALSE until `preempted` is set (GCE's answer once the VM got its preemption notice)."""

    def __init__(self) -> None:
        stand_in = self
        self.preempted = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path != "/computeMetadata/v1/instance/preempted" or self.headers["Metadata-Flavor"] != "Google":
                    self.send_error(404)
                    return
                body = b"TRUE" if stand_in.preempted.is_set() else b"FALSE"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # one request a second per host: keep quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, name="metadata-stand-in", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/computeMetadata/v1/instance/preempted"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


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
        self.metadata: dict[tuple[str, int], MetadataStandIn] = {}

    def _node_args(self, slice_name: str, worker: int) -> dict[str, Any]:
        tpu = self.tpu
        resources = {"TPU": tpu.chips_per_host, slice_name: 1, f"accelerator_type:{tpu.ray_accelerator_type}": 1}
        if worker == 0:
            resources[tpu.head_resource] = 1
        return {
            "num_cpus": 0,
            "resources": resources,
            "labels": {
                SLICE_NAME_LABEL: slice_name,
                WORKER_ID_LABEL: str(worker),
                POD_TYPE_LABEL: tpu.accelerator_type,
                TOPOLOGY_LABEL: tpu.topology,
                ACCELERATOR_TYPE_LABEL: tpu.ray_accelerator_type,
            },
            # Ray reads a reserved head's slice name from TPU_NAME in that host's workers (its GKE path).
            "env_vars": {"TPU_NAME": slice_name, PREEMPTED_URL_ENV: self._metadata(slice_name, worker).url},
        }

    def _metadata(self, slice_name: str, worker: int) -> MetadataStandIn:
        if (slice_name, worker) not in self.metadata:
            self.metadata[(slice_name, worker)] = MetadataStandIn()
        return self.metadata[(slice_name, worker)]

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
        self._metadata(slice_name, worker).preempted.clear()  # a new VM in the old one's place
        self.nodes[(slice_name, worker)] = self.cluster.add_node(**self._node_args(slice_name, worker))

    def notice_preemption(self, slice_name: str, worker: int) -> None:
        """The host's instance metadata starts answering preempted=TRUE (it keeps running)."""
        self.metadata[(slice_name, worker)].preempted.set()

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
        for stand_in in self.metadata.values():
            stand_in.close()

    def __enter__(self) -> LocalTpuCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
