"""Multi-process overhead: `train_lm` as 2 processes x 2 CPU devices vs 1 process x 4 devices.

The same config, the same 4 devices' worth of work; the only difference is that the 2-process run
joins through `jax.distributed` (gloo collectives between processes) and each process reads half of
each batch, as two hosts would. Runs alternate (2x2, 1x4, 2x2, 1x4, ...; not in blocks); each
run's throughput is its summary's tokens/s (steps after the first, so compilation is excluded).
Target: overhead <= 1.15x on CPU.

    python benchmarks/multiprocess_step.py --model llama_nano --steps 20 --repeats 3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.models import MODELS  # noqa: E402
from marin_lab.training import CheckpointConfig, DataConfig, OptimizerConfig, TrainLmConfig  # noqa: E402
from marin_lab.training.local_hosts import run_hosts  # noqa: E402
from marin_lab.training.metrics import WandbConfig  # noqa: E402
from marin_lab.training.testing import write_synthetic_cache  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama_nano")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    root = tempfile.mkdtemp(prefix="mp-bench-")
    cache = write_synthetic_cache(os.path.join(root, "cache"), train_docs=2000)
    model = dataclasses.replace(MODELS[args.model], max_seq_len=max(args.seq, MODELS[args.model].max_seq_len))

    def config(out: str) -> TrainLmConfig:
        return TrainLmConfig(output_path=out, data=DataConfig(caches={"c": cache}), model=model,
                             num_train_steps=args.steps, batch_size=args.batch, seq_len=args.seq,
                             optimizer=OptimizerConfig(), wandb=WandbConfig(enabled=False),
                             checkpoint=CheckpointConfig(save_every_steps=None, save_interval_s=None, save_final=True),
                             compute_dtype="float32", export_hf=False, log_every=1000)

    sides = {"2 processes x 2": (2, 2), "1 process x 4": (1, 4)}
    tps: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(args.repeats):
        for name, (hosts, devices) in sides.items():
            result = run_hosts(config(os.path.join(root, f"{hosts}x{devices}-{r}")), hosts=hosts,
                               devices_per_host=devices, workdir=os.path.join(root, f"w-{hosts}x{devices}-{r}"))
            if not result.ok:
                raise SystemExit("\n".join(result.stderr_tails))
            tps[name].append(result.summary["tokens_per_s"])
            print(f"  repeat {r}: {name}: {tps[name][-1]:,.0f} tokens/s", flush=True)
    multi, single = (statistics.median(tps[n]) for n in sides)
    print(f"{args.model}, batch {args.batch} x {args.seq}, {args.steps} steps, median of {args.repeats}")
    print(f"2 processes x 2 devices: {multi:,.0f} tokens/s; 1 process x 4 devices: {single:,.0f} tokens/s; "
          f"overhead (single / multi) {single / multi:.3f}x (target <= 1.15x)")


if __name__ == "__main__":
    main()
