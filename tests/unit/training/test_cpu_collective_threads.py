"""Simulated hosts (CPU processes joined through gloo) get an XLA thread pool with room to spare.

With exactly as many pool threads as local devices, 2 processes x 2 devices on a 2-core machine
deadlocked in a gloo all-reduce (3 of 3 runs of 200 data-parallel steps; 0 of 3 with 4 threads)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from marin_lab.training.distributed import leave_threads_for_collectives


def test_pool_is_twice_the_forced_devices_unless_the_user_chose():
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    assert leave_threads_for_collectives(env) == str(max(os.cpu_count() or 1, 4)) == env["NPROC"]
    assert leave_threads_for_collectives({"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "NPROC": "3"}) == "3"
    unforced: dict[str, str] = {}
    assert leave_threads_for_collectives(unforced) is None and "NPROC" not in unforced


_COUNT_POOL = """
import os, jax
jax.devices()  # starts the CPU client and its pool
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print(sum(n == "tf_XLAEigen" for n in names))
"""


@pytest.mark.slow
def test_the_cpu_client_sizes_its_pool_from_the_variable():
    """The mechanism itself, on this jaxlib: the pool XLA starts has NPROC threads."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    env.pop("NPROC", None)
    leave_threads_for_collectives(env)
    out = subprocess.run([sys.executable, "-c", _COUNT_POOL], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) == int(env["NPROC"]) >= 4
