"""Does XLA turn `fp8_matmul` (forward, and both gradient matmuls) into cuBLASLt FP8 GEMMs here?

Compiles `fp8_matmul` alone, forward and `jax.grad` (with a non-constant cotangent, so the e5m2
gradient is a real tensor), and prints the custom-call targets in the compiled HLO: on Hopper GPUs
the float8 GEMMs appear as `__cublas$lt$matmul$f8`; Triton GEMM fusions and plain cuBLAS calls
mean the dot ran in a wider type. On CPU it prints no GEMM calls (float8 is emulated there).
XLA flags come from the environment (e.g. XLA_FLAGS=--xla_gpu_enable_triton_gemm=false).

    python benchmarks/fp8_gemm_probe.py --rows 8192 --k 2048 --n 2048
"""

from __future__ import annotations

import argparse
import json
import os
import re

import jax
import jax.numpy as jnp

from marin_lab.precision import fp8_matmul


def gemm_counts(hlo: str) -> dict[str, int]:
    """Custom-call targets and Triton GEMM fusions in compiled HLO text."""
    targets = re.findall(r'custom_call_target="([^"]+)"', hlo)
    counts = {t: targets.count(t) for t in sorted(set(targets))}
    counts["triton_gemm_fusions"] = len(re.findall(r'"kind":"__triton(?:_nested)?_gemm', hlo))
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=256, help="batch x sequence rows of x")
    p.add_argument("--k", type=int, default=128)
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--out", default="", help="also write the counts as JSON here")
    args = p.parse_args()
    x = jax.ShapeDtypeStruct((4, args.rows // 4, args.k), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((args.k, args.n), jnp.float32)
    r = jax.ShapeDtypeStruct((4, args.rows // 4, args.n), jnp.bfloat16)

    def loss(x: jax.Array, w: jax.Array, r: jax.Array) -> jax.Array:
        return jnp.sum((fp8_matmul(x, w) * r).astype(jnp.float32))

    cases = {
        "forward": (lambda x, w: fp8_matmul(x, w), (x, w)),
        "grad dx,dw": (jax.grad(loss, argnums=(0, 1)), (x, w, r)),
        "value_and_grad": (jax.value_and_grad(loss, argnums=(0, 1)), (x, w, r)),
    }
    result = {
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
        "cases": {},
    }
    print(
        f"# {result['device']}; jax {result['jax']}; XLA_FLAGS={result['XLA_FLAGS']!r}; "
        f"x {x.shape} bf16, w {w.shape} f32"
    )
    for name, (fn, shapes) in cases.items():
        counts = gemm_counts(jax.jit(fn).lower(*shapes).compile().as_text())
        result["cases"][name] = counts
        print(f"{name:<16} {counts}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
