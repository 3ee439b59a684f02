"""Multi-process overhead: `train_lm` as 2 processes x 2 CPU devices vs 1 process x 4 devices.

The same config, the same 4 devices' worth of work; the only difference is that the 2-process run
joins through `jax.distributed` (gloo collectives between processes) and each process reads half of
each batch, as two hosts would. Runs alternate (2x2, 1x4, 2x2, 1x4, ...; not in blocks); each
run's throughput is its summary's tokens/s (steps after the first, so compilation is excluded).
Target: overhead <= 1.15x on CPU.

Meshes, both sides using the same one: `dp` (parameters replicated on all 4 devices; the step
all-reduces every gradient as one flat buffer), `fsdp` (every parameter split over all 4 devices,
so each layer's all-gather and reduce-scatter crosses the process boundary) and `hsdp` (data=2 x
fsdp=2: parameters split over the 2 devices of a process and replicated across processes -- the
usual layout when hosts are joined by a slower network than their own devices).
`--meshes dp,fsdp,hsdp` runs all three, interleaved.

    python benchmarks/multiprocess_step.py --model lab_nano --steps 20 --repeats 3 --meshes dp,fsdp,hsdp
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.models import MODELS  # noqa: E402
from marin_lab.main.train_lm import train_lm  # noqa: E402
from marin_lab.testing.training import write_synthetic_cache  # noqa: E402
from marin_lab.training import CheckpointConfig, DataConfig, OptimizerConfig, TrainLmConfig  # noqa: E402
from marin_lab.training.local_hosts import run_hosts  # noqa: E402
from marin_lab.training.mesh import MeshConfig  # noqa: E402
from marin_lab.training.metrics import WandbConfig  # noqa: E402

# The meshes both sides run (step_probe.py uses them too).
MESHES = {
    "fsdp": MeshConfig(),
    "hsdp": MeshConfig(data=2, fsdp=-1),
    "dp": MeshConfig(data=-1, fsdp=1, param_sharding="replicated"),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="lab_nano")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--meshes", default="fsdp", help="comma-separated: fsdp, hsdp, dp (replicated parameters)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="mp-bench-") as root:  # its runs reach ~3 GB (nano, 3 meshes x 3 repeats)
        compare(args, root)


def compare(args: argparse.Namespace, root: str) -> None:
    cache = write_synthetic_cache(os.path.join(root, "cache"), train_docs=2000)
    model = dataclasses.replace(MODELS[args.model], max_seq_len=max(args.seq, MODELS[args.model].max_seq_len))

    chosen = args.meshes.split(",")
    if unknown := set(chosen) - set(MESHES):
        raise SystemExit(f"--meshes: unknown {sorted(unknown)}; choose from {sorted(MESHES)}")

    def config(out: str, mesh: MeshConfig) -> TrainLmConfig:
        return TrainLmConfig(
            output_path=out,
            mesh=mesh,
            data=DataConfig(caches={"c": cache}),
            model=model,
            num_train_steps=args.steps,
            batch_size=args.batch,
            seq_len=args.seq,
            optimizer=OptimizerConfig(),
            wandb=WandbConfig(enabled=False),
            checkpoint=CheckpointConfig(save_every_steps=None, save_interval_s=None, save_final=True),
            compute_dtype="float32",
            export_hf=False,
            log_every=1000,
        )

    sides = {f"{m}: {n}": (m, h, d) for m in chosen for n, h, d in (("2 processes x 2", 2, 2), ("1 process x 4", 1, 4))}
    tps: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}  # CPU-seconds of all the run's processes
    loads = [os.getloadavg()[0]]
    for r in range(args.repeats):
        for name, (mesh, hosts, devices) in sides.items():
            tag = f"{mesh}-{hosts}x{devices}-{r}"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            result = run_hosts(
                config(os.path.join(root, tag), MESHES[mesh]),
                fn=train_lm,
                hosts=hosts,
                devices_per_host=devices,
                workdir=os.path.join(root, f"w-{tag}"),
            )
            if not result.ok:
                raise SystemExit("\n".join(result.stderr_tails))
            tps[name].append(result.summary["tokens_per_s"])
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            loads.append(os.getloadavg()[0])
            print(
                f"  repeat {r}: {name}: {tps[name][-1]:,.0f} tokens/s, {cpu[name][-1]:.1f} CPU-s in all "
                f"(load {loads[-1]:.1f})",
                flush=True,
            )
    print(
        f"{args.model}, batch {args.batch} x {args.seq}, {args.steps} steps, median of {args.repeats}; "
        f"1-min load {min(loads):.1f}-{max(loads):.1f}"
    )
    for m in chosen:
        multi, single = (statistics.median(tps[f"{m}: {n}"]) for n in ("2 processes x 2", "1 process x 4"))
        pairs = [s / mu for mu, s in zip(tps[f"{m}: 2 processes x 2"], tps[f"{m}: 1 process x 4"], strict=True)]
        print(
            f"mesh {m}: 2 processes x 2 devices: {multi:,.0f} tokens/s; 1 process x 4 devices: {single:,.0f} "
            f"tokens/s; overhead (single / multi) {single / multi:.3f}x (target <= 1.15x); per repeat "
            + " ".join(f"{x:.2f}" for x in pairs)
        )
        multi_cpu, single_cpu = (statistics.median(cpu[f"{m}: {n}"]) for n in ("2 processes x 2", "1 process x 4"))
        print(
            f"mesh {m}: CPU-seconds per run (start, compile, {args.steps} steps): 2 processes {multi_cpu:.1f}, "
            f"1 process {single_cpu:.1f} ({multi_cpu / single_cpu:.2f}x)"
        )


if __name__ == "__main__":
    main()
