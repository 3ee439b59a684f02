"""Float8 accuracy figures against their targets, printed (the tests assert the bounds).

fp8_matmul vs fp32 on N(0,1) 256x256 (relative Frobenius error, with and without a x1000
outlier), gradient cosines against jax.grad of the fp32 product, and the paired loss gaps of
the tiny Llama (200 steps, seeds 0 and 1; the same variants as tests/unit/models/test_precision_training.py),
Scalify's propagated scales ('scalify': float16 data, float8 casts, fp32 masters; 'scalify+fp16':
float16 masters and fp16-scaled Adam too) beside Transformer-Engine-style amax scaling ('fp8'),
with the last step's per-layer scales (log2) of the residual stream and its gradient.

    python benchmarks/fp8_accuracy.py
    python benchmarks/fp8_accuracy.py --variants fp32,bf16,fp8,scalify,scalify+fp16 --skip-matmul
"""

from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np

from experiments.paired import Variant, cosine, paired_curves, relative_error
from marin_lab.precision import PrecisionConfig, fp8_matmul
from marin_lab.testing.training import synthetic_documents, tiny_model
from marin_lab.training.optimizer import OptimizerConfig


def _normal(seed: int, shape: tuple[int, ...]) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


VARIANTS = {
    v.name: v
    for v in (
        Variant("fp32"),
        Variant("bf16", "bfloat16"),
        Variant("fp8", "bfloat16", PrecisionConfig(matmul="fp8")),
        Variant("fp32+adam_fp16", "float32", PrecisionConfig(optimizer_state="float16_scaled")),
        Variant("scalify", "float16", PrecisionConfig(matmul="scalify")),
        Variant(
            "scalify+fp16",
            "float16",
            PrecisionConfig(matmul="scalify", master_weights="float16_scaled", optimizer_state="float16_scaled"),
        ),
    )
}
PAIRS = (
    ("bf16", "fp32"),
    ("fp8", "bf16"),
    ("fp8", "fp32"),
    ("fp32+adam_fp16", "fp32"),
    ("scalify", "fp32"),
    ("scalify+fp16", "fp32"),
    ("scalify", "fp8"),
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {list(VARIANTS)}")
    p.add_argument("--skip-matmul", action="store_true", help="only the paired training curves")
    args = p.parse_args()
    print(f"# jax {jax.__version__} on {jax.devices()[0].device_kind}; 1-min load {os.getloadavg()[0]:.1f}")
    if not args.skip_matmul:
        matmul_figures()
    paired(args.variants.split(","))
    print(f"# 1-min load at the end {os.getloadavg()[0]:.1f}")


def matmul_figures() -> None:
    x, w = _normal(0, (256, 256)), _normal(1, (256, 256))
    print(f"fp8_matmul vs fp32, N(0,1) 256x256: relative Frobenius error {relative_error(fp8_matmul(x, w), x @ w):.4f}")
    xo = x.at[3, 7].multiply(1000.0)
    yo = fp8_matmul(xo, w)
    print(f"  with one x1000 outlier: finite {bool(jnp.all(jnp.isfinite(yo)))}, error {relative_error(yo, xo @ w):.4f}")
    xg, wg, t = _normal(2, (4, 64, 128)).astype(jnp.bfloat16), _normal(3, (128, 96)), _normal(4, (4, 64, 96))

    def loss(fn, a, b):
        return jnp.sum((fn(a, b).astype(jnp.float32) - t) ** 2)

    dx, dw = jax.grad(lambda a, b: loss(fp8_matmul, a, b), argnums=(0, 1))(xg, wg)
    rx, rw = jax.grad(lambda a, b: loss(lambda p, q: p.astype(jnp.float32) @ q, a, b), argnums=(0, 1))(xg, wg)
    print(
        f"gradients (bf16 x, fp32 w) vs fp32 reference: cosine dx {cosine(dx, rx):.5f} ({dx.dtype}), "
        f"dw {cosine(dw, rw):.5f} ({dw.dtype})"
    )


def paired(names: list[str]) -> None:
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"--variants: {unknown} not among {list(VARIANTS)}")
    variants = [VARIANTS[n] for n in names]
    seeds = (0, 1)
    tokens = np.concatenate(synthetic_documents(400, seed=0))
    curves = paired_curves(
        tiny_model(),
        OptimizerConfig(learning_rate=3e-3, warmup=0.1, decay=0.2),
        variants,
        seeds,
        tokens,
        steps=200,
        batch_size=8,
        seq_len=32,
    )
    print(
        "tiny Llama, 200 steps, paired seeds: gap of the final loss (mean of the last 10 steps) "
        "and of the mean over the curve, per seed"
    )
    for a, b in PAIRS:
        if a not in names or b not in names:
            continue
        cells = []
        for s in seeds:
            la, lb = curves.losses[(a, s)], curves.losses[(b, s)]
            cells.append(
                f"seed {s}: final {la[-10:].mean() / lb[-10:].mean() - 1:+.3%}, curve {la.mean() / lb.mean() - 1:+.3%}"
            )
        print(f"  {a:<15} vs {b:<5} " + "; ".join(cells))
    for n in names:
        bad = sum(int((~np.isfinite(curves.losses[(n, s)])).sum()) for s in seeds)
        finals = ", ".join(f"{curves.losses[(n, s)][-10:].mean():.4f}" for s in seeds)
        print(
            f"  {n:<15} final loss (seeds {seeds}) {finals}; non-finite steps {bad}; "
            f"moment bytes {curves.moment_bytes[n]}"
        )
    for n in names:
        last = curves.last_metrics[(n, seeds[0])]
        layers = sorted({k.split("/")[1] for k in last if k.startswith("scalify/layer")})
        if layers:
            act = " ".join(f"{last[f'scalify/{la}/act_scale_log2']:g}" for la in layers)
            grad = " ".join(f"{last[f'scalify/{la}/grad_scale_log2']:g}" for la in layers)
            print(
                f"  {n:<15} last step, seed {seeds[0]}: log2 scale per layer, residual stream [{act}], its "
                f"gradient [{grad}]; non-finite layers {last['scalify/nonfinite']:g}"
            )


if __name__ == "__main__":
    main()
