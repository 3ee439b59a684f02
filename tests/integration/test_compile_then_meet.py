"""`distributed.compile_then_meet`: hosts compile their first step, then meet before any collective.

Gloo gives the peers of a CPU collective 30 s to meet the first time it runs; a host that compiled
slower than that (a 2-slice step on two busy cores) failed the step. Here two JAX processes join
one cluster, one of them late by `DELAY_S`: the other must wait at the barrier for it (not inside
the collective), and the collective then gives the right answer on both.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from marin_lab.host_env import process_env

DELAY_S = 4.0

HOST = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    from marin_lab.training import distributed
    assert distributed.initialize_from_env()
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()), ("d",))
    x = jax.make_array_from_process_local_data(
        NamedSharding(mesh, P("d")), np.full((1,), jax.process_index() + 1.0, np.float32)
    )
    total = jax.jit(lambda x: x.sum(), out_shardings=NamedSharding(mesh, P()))
    if jax.process_index() == 1:
        time.sleep(float(sys.argv[1]))  # a host still compiling, or started late
    waited = distributed.compile_then_meet(total, (x,), "the test's sum")
    print(json.dumps({"waited": waited, "sum": float(total(x))}))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_late_host_is_waited_for_at_the_barrier_and_the_collective_is_right():
    coordinator = f"127.0.0.1:{_free_port()}"
    procs = []
    for pid in range(2):
        env = {
            **os.environ,
            **process_env(coordinator, 2, pid),
            "JAX_PLATFORMS": "cpu",
            "MARIN_DISTRIBUTED_TIMEOUT_S": "120",
        }
        env.pop("XLA_FLAGS", None)  # one CPU device per process
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", HOST, str(DELAY_S)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            p.kill()
    assert [o["sum"] for o in outs] == [3.0, 3.0]
    # process 0 compiled first and waited for the late one at the barrier
    assert outs[0]["waited"] >= DELAY_S * 0.75, outs
    assert outs[1]["waited"] < outs[0]["waited"], outs


def test_single_process_compiles_ahead_and_the_call_reuses_it():
    import jax
    import jax.numpy as jnp

    from marin_lab.training import distributed

    traced = []

    @jax.jit
    def f(x):
        traced.append(1)
        return x * 2

    x = jnp.arange(3.0)
    assert distributed.compile_then_meet(f, (x,), "f") == 0.0
    assert len(traced) == 1
    assert f(x).tolist() == [0.0, 2.0, 4.0]
    assert len(traced) == 1  # traced once, ahead of the call


@pytest.mark.parametrize("fn", [lambda x: x, print])
def test_a_function_without_lower_is_left_to_its_first_call(fn):
    from marin_lab.training import distributed

    assert distributed.compile_then_meet(fn, (1,), "plain") == 0.0
