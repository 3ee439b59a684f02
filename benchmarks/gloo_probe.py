"""How long one cross-process collective takes on CPU: 2 JAX processes x 2 devices, gloo.

Times a scalar all-reduce (sum of a sharded vector) and an all-gather (a sharded vector made
replicated) of 4 KB, 0.4 MB and 5 MB, 20 calls each after one warm-up, as `train_lm`'s
multi-process runs do them (joined by `training/distributed.py`, as `train_lm` is). Then the same 3.1 MB
summed over the 4 devices as one buffer and as 30 buffers in one compiled call (XLA combines them
into one all-reduce; gloo still runs one collective per buffer): why `train_step.py` reduces a
data-parallel step's gradients as one flat buffer. There is no peer: the figures explain
`multiprocess_step.py`'s overhead (docs/benchmarks.md, "Training on CPU").

    python benchmarks/gloo_probe.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _process() -> None:
    from marin_lab.training import distributed

    distributed.initialize_from_env()  # gloo collectives and the thread pool, as train_lm gets them
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    pid = jax.process_index()
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("data", "fsdp"))
    split, whole = NamedSharding(mesh, P(("data", "fsdp"))), NamedSharding(mesh, P())
    for mb in (0.004, 0.4, 5):
        size = int(mb * 2**20 / 4) // 4 * 4
        x = jax.make_array_from_callback((size,), split, lambda index, n=size: np.ones(n, np.float32)[index])
        for name, fn in (
            ("all-reduce (scalar)", jax.jit(jnp.sum, out_shardings=whole)),
            ("all-gather", jax.jit(lambda a: a * 2, out_shardings=whole)),
        ):
            fn(x).block_until_ready()
            t = time.perf_counter()
            for _ in range(20):
                fn(x).block_until_ready()
            if pid == 0:
                print(f"{name:20s} {mb:>6} MB: {(time.perf_counter() - t) / 20 * 1000:.2f} ms per call", flush=True)
    rows = NamedSharding(mesh, P(("data", "fsdp"), None))
    total = 800_000  # ~ the nano model's parameter count
    for parts in (1, 30):
        n = total // parts
        xs = [
            jax.make_array_from_callback((4, n), rows, lambda index, n=n: np.ones((4, n), np.float32)[index])
            for _ in range(parts)
        ]
        fn = jax.jit(lambda *a: [jnp.sum(v, axis=0) for v in a], out_shardings=whole)
        jax.block_until_ready(fn(*xs))
        t = time.perf_counter()
        for _ in range(20):
            jax.block_until_ready(fn(*xs))
        if pid == 0:
            print(
                f"all-reduce of {total * 4 / 2**20:.1f} MB as {parts:2d} buffer(s) in one call: "
                f"{(time.perf_counter() - t) / 20 * 1000:.2f} ms per call",
                flush=True,
            )
    jax.distributed.shutdown()


def main() -> None:
    if sys.argv[1:] == ["--host"]:
        _process()
        return
    from marin_lab.host_env import process_env
    from marin_lab.training.local_hosts import free_port

    coordinator = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    print(f"gloo probe: 2 processes x 2 CPU devices; 1-min load {os.getloadavg()[0]:.1f}", flush=True)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--host"],
            env={**env, **process_env(coordinator, 2, pid)},
            stdout=None if pid == 0 else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in range(2)
    ]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a probe process failed: exit codes {codes}")


if __name__ == "__main__":
    main()
