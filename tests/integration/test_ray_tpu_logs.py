"""A local Ray started on a host without a TPU does not forward the machine's libtpu logs.

Ray links its logs folder to libtpu's log folder when that exists and prints every file in it to
the driver as `(pid=)` lines: on a shared machine, the start-up logs of other projects' JAX
processes filled most of a run's console."""

from __future__ import annotations

import os

import pytest

from marin_lab.execution.run import backends

pytestmark = pytest.mark.ray


def test_the_local_ray_does_not_link_the_machines_tpu_logs(tmp_path, monkeypatch):
    import ray

    if ray.is_initialized():  # the shared Ray of tests before it (`ray_cluster` starts it again when needed)
        ray.shutdown()
    foreign = tmp_path / "tpu_logs"
    foreign.mkdir()
    (foreign / "tpu_driver.INFO").write_text("I1128 pending_event_logger.cc:964] another process's libtpu\n")
    monkeypatch.setenv("TPU_LOG_DIR", str(foreign))
    monkeypatch.setattr(backends, "has_accelerator", lambda: False)
    backend = backends.RayBackend()
    try:
        logs = ray._private.worker._global_node.get_logs_dir_path()
        link = os.path.join(logs, "tpu_logs")
        assert not (os.path.exists(link) and os.path.samefile(link, foreign)), (
            "the node links the machine's libtpu logs: its log monitor would print them"
        )
        assert os.environ["TPU_LOG_DIR"] == str(foreign)  # put back for this process and its children
    finally:
        backend.shutdown()
