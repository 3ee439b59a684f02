"""Float8 on the quickstart model: fp32, bf16, fp8 and fp8 with fp16-scaled Adam, paired seeds.

Question: does per-tensor float8 training (e4m3 forward, e5m2 gradients, power-of-two scales;
marin_lab.precision) keep the quickstart Llama's loss within 2% of bf16, and does storing Adam's
moments as fp16 with a per-tensor scale (half the bytes) change it?
Baseline: the same model and data in fp32 and in bf16. Float8's effect (~1%) is smaller than the
seed-to-seed spread of a 1M-parameter model (3-7%), so every format is trained on the same seeds
(same initialisation, same data order) and compared pair by pair, never by unpaired means.

The data steps are the quickstart's (same identities: already-run steps are reused). On CPU the
float8 matmuls run emulated (slower than bf16, same numerics); on a Hopper GPU set
XLA_FLAGS=--xla_gpu_enable_triton_gemm=false so XLA emits FP8 GEMMs (docs/benchmarks.md).

    python experiments/fp8_nano.py                  # 8 runs of 200 steps (~15-20 min on 2 cores)
    python experiments/fp8_nano.py --dry_run true   # what would run, and why

Each run's loss, and the fp8 runs' per-layer amax and saturated/flushed fractions, are plotted in
the data browser (`marin-lab browse --prefix ...`, one step page per run); the script prints the
paired table at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from experiments.defaults import default_train
from experiments.models import llama_nano
from experiments.quickstart import tokenized
from experiments.simple_train_config import SimpleTrainConfig
from marin_lab.execution import executor_main
from marin_lab.io.fs import read_text
from marin_lab.precision import PrecisionConfig

SEEDS = (0, 1)
VARIANTS = {
    "fp32": ("float32", PrecisionConfig()),
    "bf16": ("bfloat16", PrecisionConfig()),
    "fp8": ("bfloat16", PrecisionConfig(matmul="fp8")),
    "fp8-adam16": ("bfloat16", PrecisionConfig(matmul="fp8", optimizer_state="float16_scaled")),
}
"""name -> (compute dtype, precision policy); parameters stay fp32 in every run."""


def _train(variant: str, seed: int):
    compute_dtype, precision = VARIANTS[variant]
    step = default_train(
        f"fp8-nano-{variant}-seed{seed}", tokenized, llama_nano,
        SimpleTrainConfig(
            resources={"num_cpus": min(2, os.cpu_count() or 1)}, train_batch_size=16, num_train_steps=200,
            train_seq_len=256, learning_rate=3e-3, warmup=0.1, lr_schedule="cosine", seed=seed,
            data_seed=seed, compute_dtype=compute_dtype, steps_per_eval=100, max_eval_batches=4,
        ),
        description=f"quickstart Llama, {variant} (compute {compute_dtype}, {precision}), seed {seed}",
    )
    # default_train has no precision argument: the policy goes onto the trainer config itself.
    return dataclasses.replace(step, config=dataclasses.replace(step.config, precision=precision))


runs = {(variant, seed): _train(variant, seed) for variant in VARIANTS for seed in SEEDS}


def _losses(output_path: str) -> np.ndarray:
    rows = [json.loads(line) for line in read_text(f"{output_path}/metrics.jsonl").splitlines() if line.strip()]
    return np.array([r["loss"] for r in rows if "loss" in r])


def _print_table(report) -> None:
    paths = {s.name: s.output_path for s in report.plan.steps}
    curves = {key: _losses(paths[step.name]) for key, step in runs.items()}
    print(f"\n{'variant':<12} {'vs':<6} " + " ".join(f"{'seed ' + str(s) + ' final':>14} {'curve':>7}" for s in SEEDS))
    for variant, base in (("bf16", "fp32"), ("fp8", "bf16"), ("fp8-adam16", "fp8")):
        cells = []
        for seed in SEEDS:
            a, b = curves[(variant, seed)], curves[(base, seed)]
            n = min(len(a), len(b))
            cells.append(f"{a[n - 1] / b[n - 1] - 1:>+14.2%} {a[:n].mean() / b[:n].mean() - 1:>+7.2%}")
        print(f"{variant:<12} {base:<6} " + " ".join(cells))
    print(f"\nBrowse the runs: marin-lab browse --prefix {report.plan.prefix}   (then open http://127.0.0.1:8765)")


if __name__ == "__main__":
    report = executor_main(steps=list(runs.values()),
                           description="Float8 on the quickstart model: paired fp32 / bf16 / fp8 / fp8 + fp16 Adam")
    if report is not None and report.experiment_path:
        _print_table(report)
