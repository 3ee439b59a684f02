"""Float8 accuracy figures against their targets, printed (the tests assert the bounds).

fp8_matmul vs fp32 on N(0,1) 256x256 (relative Frobenius error, with and without a x1000
outlier), gradient cosines against jax.grad of the fp32 product, and the paired loss gaps of
the tiny Llama (200 steps, seeds 0 and 1; the same variants as tests/unit/test_precision_training.py).

    python benchmarks/fp8_accuracy.py
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from marin_lab.precision import PrecisionConfig, fp8_matmul
from marin_lab.precision.paired import Variant, cosine, paired_curves, relative_error
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.training.testing import synthetic_documents, tiny_model


def _normal(seed: int, shape: tuple[int, ...]) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def main() -> None:
    print(f"# jax {jax.__version__} on {jax.devices()[0].device_kind}; 1-min load {os.getloadavg()[0]:.1f}")
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
    print(f"gradients (bf16 x, fp32 w) vs fp32 reference: cosine dx {cosine(dx, rx):.5f} ({dx.dtype}), "
          f"dw {cosine(dw, rw):.5f} ({dw.dtype})")
    variants = (Variant("fp32"), Variant("bf16", "bfloat16"),
                Variant("fp8", "bfloat16", PrecisionConfig(matmul="fp8")),
                Variant("fp32+adam_fp16", "float32", PrecisionConfig(optimizer_state="float16_scaled")))
    seeds = (0, 1)
    tokens = np.concatenate(synthetic_documents(400, seed=0))
    curves = paired_curves(tiny_model(), OptimizerConfig(learning_rate=3e-3, warmup=0.1, decay=0.2),
                           variants, seeds, tokens, steps=200, batch_size=8, seq_len=32)
    print("tiny Llama, 200 steps, paired seeds: gap of the final loss (mean of the last 10 steps) "
          "and of the mean over the curve, per seed")
    for a, b in (("bf16", "fp32"), ("fp8", "bf16"), ("fp32+adam_fp16", "fp32")):
        cells = []
        for s in seeds:
            la, lb = curves.losses[(a, s)], curves.losses[(b, s)]
            cells.append(f"seed {s}: final {la[-10:].mean() / lb[-10:].mean() - 1:+.3%}, "
                         f"curve {la.mean() / lb.mean() - 1:+.3%}")
        print(f"  {a:<15} vs {b:<5} " + "; ".join(cells))
    finite = all(bool(np.all(np.isfinite(v))) for v in curves.losses.values())
    print(f"  no NaN/inf at any step: {finite}; moment bytes fp32 Adam {curves.moment_bytes['fp32']}, "
          f"fp16-scaled {curves.moment_bytes['fp32+adam_fp16']}")


if __name__ == "__main__":
    main()
