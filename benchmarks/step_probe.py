"""The compiled train step alone, 2 processes x 2 CPU devices vs 1 process x 4 (alternating).

Unlike `multiprocess_step.py` (whole `train_lm` runs), this times only `step_fn(state, batch)`
on one fixed batch: each step blocked on (sync) and dispatched back to back (piped). Each run
has a time limit, so it doubles as the stress loop that found a gloo deadlock (docs/training.md):
a run that does not finish in time is reported as hung.

    python benchmarks/step_probe.py --model lab_nano --mesh dp --steps 100 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def child(model_name: str, mesh_name: str, batch: int, seq: int, steps: int, out: str) -> None:
    import dataclasses

    import jax
    import numpy as np

    from marin_lab.training import distributed

    distributed.initialize_from_env()
    from multiprocess_step import MESHES as meshes  # this script's folder is on sys.path

    from experiments.models import MODELS
    from marin_lab.main.train_lm import _programs
    from marin_lab.training.config import OptimizerConfig
    from marin_lab.training.mesh import batch_sharding
    from marin_lab.training.train_step import StepSettings

    model = dataclasses.replace(MODELS[model_name], max_seq_len=max(seq, MODELS[model_name].max_seq_len))
    _, init_fn, step_fn = _programs(model, OptimizerConfig(), 1000, StepSettings(), meshes[mesh_name])
    state = init_fn(jax.random.key(0))
    full = np.random.default_rng(0).integers(0, model.vocab_size, size=(batch, seq + 1), dtype=np.int32)
    tokens = jax.make_array_from_callback(full.shape, batch_sharding(meshes[mesh_name].build()), lambda i: full[i])
    for _ in range(3):
        state, metrics = step_fn(state, tokens)
    jax.block_until_ready(metrics)
    sync = []
    for _ in range(steps):
        t = time.perf_counter()
        state, metrics = step_fn(state, tokens)
        jax.block_until_ready(metrics)
        sync.append(time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(steps):
        state, metrics = step_fn(state, tokens)
    jax.block_until_ready(metrics)
    piped = (time.perf_counter() - t) / steps
    if jax.process_index() == 0:
        with open(out, "w") as f:
            json.dump({"sync_s": statistics.median(sync), "piped_s": piped}, f)


def launch(hosts: int, devices: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="step-probe-") as work:
        return _run(hosts, devices, args, os.path.join(work, "result.json"))


def _run(hosts: int, devices: int, args: argparse.Namespace, out: str) -> dict:
    from marin_lab.host_env import process_env
    from marin_lab.training.local_hosts import free_port

    coordinator = f"127.0.0.1:{free_port()}"
    procs = []
    for pid in range(hosts):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
        if hosts > 1:
            env.update(process_env(coordinator, hosts, pid))
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    args.model,
                    args.mesh,
                    str(args.batch),
                    str(args.seq),
                    str(args.steps),
                    out,
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    try:
        for p in procs:
            if p.wait(timeout=args.timeout_s) != 0:
                return {"failed": True}
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        return {"hung": True}
    with open(out) as f:
        return json.load(f)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        a = sys.argv[2:]
        child(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), a[5])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="lab_nano")
    p.add_argument("--mesh", default="dp", choices=("dp", "fsdp", "hsdp"))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout_s", type=float, default=300)
    args = p.parse_args()
    runs: dict[str, list[dict]] = {"2 processes x 2": [], "1 process x 4": []}
    for r in range(args.repeats):
        order = list(runs) if r % 2 == 0 else list(runs)[::-1]
        for side in order:
            hosts, devices = (2, 2) if side.startswith("2") else (1, 4)
            res = launch(hosts, devices, args)
            runs[side].append(res)
            print(f"repeat {r}: {side}: {res} (load {os.getloadavg()[0]:.1f})", flush=True)
    for key in ("sync_s", "piped_s"):
        done = {side: [x[key] for x in rs if key in x] for side, rs in runs.items()}
        if all(done.values()):
            multi, single = (statistics.median(v) for v in done.values())
            print(
                f"{args.model} {args.mesh} {key}: 2x2 {multi * 1000:.1f} ms, 1x4 {single * 1000:.1f} ms, "
                f"ratio {multi / single:.3f}"
            )
    hung = {side: sum("hung" in x for x in rs) for side, rs in runs.items()}
    print(f"runs that did not finish within {args.timeout_s:.0f} s: {hung}")


if __name__ == "__main__":
    main()
