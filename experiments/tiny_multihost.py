"""The quickstart's nano model trained as 2 simulated TPU hosts x 2 devices, through the executor.

Question: does a multi-host step survive losing a host? The script starts a local multi-node Ray
cluster that looks like one v4-16 slice (2 hosts; `testing/local_cluster.py`), makes (or reuses) a
small token cache, and runs one `train_lm` step with `TpuResources(tpu="v4-16")`: the slice runner
starts one process per host with 2 CPU devices each, and `train_lm` joins them into one JAX
cluster (jax.distributed over gloo), writes sharded checkpoints (each host its own shards), and
resumes from the last one when the executor retries the step after a preemption.

    python experiments/tiny_multihost.py --preempt_at_step 6 --compare true
    python experiments/tiny_multihost.py --prefix /tmp/mh --num_train_steps 20

`--preempt_at_step K` SIGKILLs host 1 after it computed step K (once): the executor sees the
host's actor die, counts a preemption and retries; the retry resumes from the last checkpoint.
`--compare true` also trains the same config unbroken (another step) and prints both final
parameter digests: they are equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import sys
import tempfile

# Before anything imports Ray: bind to loopback, no token auth on a throwaway local cluster.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from experiments.models import lab_nano  # noqa: E402
from marin_lab.cluster import TpuResources  # noqa: E402
from marin_lab.execution import ExecutorStep, executor_main, this_output_path  # noqa: E402
from marin_lab.execution.main import ExecutorMainConfig  # noqa: E402
from marin_lab.main.train_lm import train_lm  # noqa: E402
from marin_lab.testing.local_cluster import LocalTpuCluster  # noqa: E402
from marin_lab.testing.training import write_synthetic_cache  # noqa: E402
from marin_lab.training import CheckpointConfig, DataConfig, OptimizerConfig, TrainLmConfig  # noqa: E402
from marin_lab.training.metrics import WandbConfig  # noqa: E402

TPU = "v4-16"  # 2 hosts per slice
DEVICES_PER_HOST = 2


def train_config(cache: str, num_train_steps: int, save_every: int) -> TrainLmConfig:
    return TrainLmConfig(
        output_path=this_output_path(),
        data=DataConfig(caches={"synthetic": cache}),
        model=dataclasses.replace(lab_nano, max_seq_len=128),
        num_train_steps=num_train_steps,
        batch_size=8,
        seq_len=64,
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup=2),
        checkpoint=CheckpointConfig(save_every_steps=save_every, save_interval_s=None, keep_last=2),
        wandb=WandbConfig(enabled=False),
        compute_dtype="float32",
        export_hf=False,
        log_every=1,
    )


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--prefix",
        default=os.environ.get("MARIN_PREFIX") or os.path.join(tempfile.gettempdir(), "marin-tiny-multihost"),
        help="where steps write (default: $MARIN_PREFIX, else a folder under the temp dir)",
    )
    p.add_argument("--num_train_steps", type=int, default=12)
    p.add_argument("--save_every", type=int, default=4)
    p.add_argument("--preempt_at_step", type=int, default=None)
    p.add_argument("--compare", type=lambda s: s.lower() in ("1", "true", "yes"), default=False)
    p.add_argument(
        "--dry_run",
        type=lambda s: s.lower() in ("1", "true", "yes"),
        default=False,
        help="print the plan and run nothing (starts no cluster)",
    )
    args = p.parse_args(argv)

    cache = os.path.join(args.prefix, "token-cache")
    if not os.path.exists(os.path.join(cache, "ledger.json")):
        write_synthetic_cache(cache, train_docs=400)
    config = train_config(cache, args.num_train_steps, args.save_every)
    env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={DEVICES_PER_HOST}", "JAX_PLATFORMS": "cpu"}
    drill = dict(env)
    if args.preempt_at_step is not None:
        drill.update({"MARIN_FAULT_KILL_AT_STEP": str(args.preempt_at_step), "MARIN_FAULT_PROCESS": "1"})
    steps = [
        ExecutorStep(
            name="checkpoints/tiny-multihost", fn=train_lm, config=config, resources=TpuResources(tpu=TPU, env=drill)
        )
    ]
    if args.compare:
        steps.append(
            ExecutorStep(
                name="checkpoints/tiny-multihost-unbroken",
                fn=train_lm,
                config=config,
                resources=TpuResources(tpu=TPU, env=env),
            )
        )

    if args.dry_run:
        executor_main(ExecutorMainConfig(prefix=args.prefix, backend="ray", dry_run=True), steps=steps)
        return
    with LocalTpuCluster(TPU, slices=1):
        executor_main(ExecutorMainConfig(prefix=args.prefix, backend="ray", max_concurrent=1), steps=steps)

    for name in ("tiny-multihost", "tiny-multihost-unbroken")[: 1 + args.compare]:
        # name-hash8 (a bare `name-*` would also match tiny-multihost-unbroken-hash8)
        (summary_path,) = glob.glob(
            os.path.join(args.prefix, "checkpoints", f"{name}-{'[0-9a-f]' * 8}", "train_summary.json")
        )
        with open(summary_path) as f:
            summary = json.load(f)
        hosts = [(h["from_step"], h["process_count"], h["local_device_count"]) for h in summary["hardware"]]
        print(
            f"{name}: final step {summary['final_step']}, loss {summary['final_loss']:.4f}, "
            f"attempts (from_step, hosts, devices/host) {hosts}, digest {summary['param_checksum']}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
