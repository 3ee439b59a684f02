"""Float8 on the quickstart model: fp32, bf16, fp8, fp8 with fp16-scaled Adam, and scalify, paired seeds.

Question: does per-tensor float8 training (e4m3 forward, e5m2 gradients, power-of-two scales;
marin_lab.precision) keep the quickstart Llama's loss within 2% of bf16, and does storing Adam's
moments as fp16 with a per-tensor scale (half the bytes) change it? And does Scalify's scale
propagation (float16 activations and gradients whose scales are propagated op by op and rescaled
per layer, float8 matmuls as casts with no amax) stay within 2% of fp32?
Baseline: the same model and data in fp32 and in bf16. Float8's effect (~1%) is smaller than the
seed-to-seed spread of a 1M-parameter model (3-7%), so every format is trained on the same seeds
(same initialisation, same data order) and compared pair by pair, never by unpaired means.

The data steps are the quickstart's (same identities: already-run steps are reused). On CPU the
float8 matmuls run emulated (slower than bf16, same numerics); on a Hopper GPU set
XLA_FLAGS=--xla_gpu_enable_triton_gemm=false so XLA emits FP8 GEMMs (docs/benchmarks.md).

    python experiments/fp8_nano.py                  # 10 runs of 200 steps (8 took 57 min on 2 loaded cores)
    python experiments/fp8_nano.py --dry_run true   # what would run, and why

The script prints, at the end, each policy's final and eval loss (means over seeds) with the gaps
against fp32 and bf16, the paired gaps seed by seed, and the address of the data browser's compare view
(`marin-lab browse`, then `#/compare/<experiment>`), where the ten loss curves (or any other
metric: eval loss, grad norm, the fp8 runs' saturated/flushed fractions, the scalify runs' per-layer
scales) are overlaid on one chart; each run's step page also plots its per-layer amax.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from experiments.defaults import default_train
from experiments.models import lab_nano
from experiments.quickstart import tokenized
from experiments.simple_train_config import SimpleTrainConfig
from marin_lab.execution import executor_main
from marin_lab.io import fs
from marin_lab.precision import PrecisionConfig

SEEDS = (0, 1)
VARIANTS = {
    "fp32": ("float32", PrecisionConfig()),
    "bf16": ("bfloat16", PrecisionConfig()),
    "fp8": ("bfloat16", PrecisionConfig(matmul="fp8")),
    "fp8-adam16": ("bfloat16", PrecisionConfig(matmul="fp8", optimizer_state="float16_scaled")),
    # float16 data: Scalify's scales give it the range that bf16 gets from its exponent bits.
    "scalify": ("float16", PrecisionConfig(matmul="scalify")),
}
"""name -> (compute dtype, precision policy); parameters stay fp32 in every run."""


def _train(variant: str, seed: int):
    compute_dtype, precision = VARIANTS[variant]
    step = default_train(
        f"fp8-nano-{variant}-seed{seed}",
        tokenized,
        lab_nano,
        SimpleTrainConfig(
            resources={"num_cpus": min(2, os.cpu_count() or 1)},
            train_batch_size=16,
            num_train_steps=200,
            train_seq_len=256,
            learning_rate=3e-3,
            warmup=0.1,
            lr_schedule="cosine",
            seed=seed,
            data_seed=seed,
            compute_dtype=compute_dtype,
            steps_per_eval=100,
            max_eval_batches=4,
        ),
        description=f"quickstart Llama, {variant} (compute {compute_dtype}, {precision}), seed {seed}",
    )
    # default_train has no precision argument: the policy goes onto the trainer config itself.
    return dataclasses.replace(step, config=dataclasses.replace(step.config, precision=precision))


runs = {(variant, seed): _train(variant, seed) for variant in VARIANTS for seed in SEEDS}


LAST = 10
"""The final training loss is the mean of the last LAST logged steps (one batch alone is noisy)."""


def _rows(output_path: str) -> list[dict]:
    return [json.loads(line) for line in fs.read_text(f"{output_path}/metrics.jsonl").splitlines() if line.strip()]


def _series(rows: list[dict], key: str) -> np.ndarray:
    return np.array([r[key] for r in rows if isinstance(r.get(key), (int, float))], dtype=np.float64)


def _print_table(report) -> None:
    """The table over the policies whose runs have all finished (`--run_only` may have chosen some)."""
    paths = {s.name: s.output_path for s in report.plan.steps}
    done = {
        key for key, step in runs.items() if step.name in paths and fs.exists(f"{paths[step.name]}/train_summary.json")
    }
    shown = [v for v in VARIANTS if all((v, s) in done for s in SEEDS)]
    rows = {key: _rows(paths[runs[key].name]) for key in done}
    curves = {key: _series(r, "loss") for key, r in rows.items()}
    evals = {
        key: _series(r, next((k for k in r[-1] if k.startswith("eval/") and k.endswith("/loss")), "-"))
        for key, r in rows.items()
    }
    # Per policy, the mean over seeds; gaps against the fp32 and bf16 means (nan where one did not run).
    final = {v: np.mean([curves[(v, s)][-LAST:].mean() for s in SEEDS]) for v in shown}
    held_out = {v: np.mean([evals[(v, s)][-1] if len(evals[(v, s)]) else np.nan for s in SEEDS]) for v in shown}
    bad = {v: sum(int((~np.isfinite(curves[(v, s)])).sum()) for s in SEEDS) for v in shown}
    print(
        f"\n{'policy':<12} {'final loss':>10} {'vs fp32':>8} {'vs bf16':>8} {'eval loss':>10} {'vs fp32':>8} "
        f"{'vs bf16':>8} {'non-finite':>10}   (means over seeds {SEEDS}; final = last {LAST} steps)"
    )
    for v in shown:
        print(
            f"{v:<12} {final[v]:>10.4f} {final[v] / final.get('fp32', np.nan) - 1:>+8.2%} "
            f"{final[v] / final.get('bf16', np.nan) - 1:>+8.2%} {held_out[v]:>10.4f} "
            f"{held_out[v] / held_out.get('fp32', np.nan) - 1:>+8.2%} "
            f"{held_out[v] / held_out.get('bf16', np.nan) - 1:>+8.2%} {bad[v]:>10}"
        )
    print(f"\n{'paired':<12} {'vs':<6} " + " ".join(f"{'seed ' + str(s) + ' final':>14} {'curve':>7}" for s in SEEDS))
    for variant, base in (
        ("bf16", "fp32"),
        ("fp8", "bf16"),
        ("fp8-adam16", "fp8"),
        ("scalify", "fp32"),
        ("scalify", "fp8"),
    ):
        if variant not in shown or base not in shown:
            continue
        cells = []
        for seed in SEEDS:
            a, b = curves[(variant, seed)], curves[(base, seed)]
            n = min(len(a), len(b))
            cells.append(
                f"{a[n - LAST : n].mean() / b[n - LAST : n].mean() - 1:>+14.2%} "
                f"{a[:n].mean() / b[:n].mean() - 1:>+7.2%}"
            )
        print(f"{variant:<12} {base:<6} " + " ".join(cells))
    experiment = os.path.basename(report.experiment_path).removesuffix(".json")
    print(
        f"\nThe curves side by side: marin-lab browse --prefix {report.plan.prefix}\n"
        f"  then open http://127.0.0.1:8765/#/compare/{experiment}"
    )


if __name__ == "__main__":
    report = executor_main(
        steps=list(runs.values()),
        description="Float8 on the quickstart model: paired fp32 / bf16 / fp8 / fp8 + fp16 Adam / scalify",
    )
    if report is not None and report.experiment_path:
        _print_table(report)
