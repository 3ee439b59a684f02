"""MXFP8 (OCP microscaling: float8_e4m3fn blocks of 32 values sharing an e8m0 scale) through
`jax.nn.scaled_dot_general`, which quantizes, multiplies and differentiates block-scaled operands.

Only some backends lower it (NVIDIA GPUs with block-scaled cuDNN matmuls, Blackwell on); on
jax 0.10.2 there is no CPU lowering. `check_backend` compiles a tiny instance first, so a run
asking for it elsewhere stops with one clear line before any training step.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

BLOCK = 32
"""Values per shared scale along the contracted dimension (the MX specification's block)."""


def mx_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    """x [..., in] @ w [in, out] in MXFP8 (forward and backward), result in x's dtype."""
    configs = [jax.nn.get_scaled_dot_general_config("mxfp8")] * 3
    # scaled_dot_general contracts the last axis of both operands: give it w as [out, in].
    y = jax.nn.scaled_dot_general(
        x, w.T.astype(x.dtype), (((x.ndim - 1,), (1,)), ((), ())), preferred_element_type=jnp.float32, configs=configs
    )
    return y.astype(x.dtype)


@dataclasses.dataclass(frozen=True)
class MxWeight:
    """A weight the model's `linear()` multiplies in MXFP8."""

    w: jax.Array

    def linear(self, x: jax.Array) -> jax.Array:
        return mx_matmul(x, self.w)


jax.tree_util.register_dataclass(MxWeight, data_fields=["w"], meta_fields=[])


def backend_error() -> str | None:
    """None when this process's backend compiles an MXFP8 matmul (and its gradient); else why not."""
    x = jax.ShapeDtypeStruct((BLOCK, BLOCK * 2), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((BLOCK * 2, BLOCK), jnp.float32)

    def loss(x, w):
        return jnp.sum(mx_matmul(x, w).astype(jnp.float32))

    try:
        jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, w).compile()
    except Exception as err:  # noqa: BLE001 - any lowering failure means "cannot run it here"
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"{type(err).__name__}: {first}"
    return None
