"""`x @ w` for an NF4 base weight, with a backward pass that never keeps a dequantized copy.

Plain autodiff of `x @ dequantize(q)` would save the dequantized matrix (full precision, 4-8x
the packed bytes) as a residual for the backward pass, for every layer. The custom VJP saves
only the packed weight and dequantizes it again for `dx = g @ w.T`. The base is frozen: its
cotangent is zero (None), so no gradient buffer of its size ever exists.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from marin_lab.quant.nf4 import NF4Tensor


def _contract_in(x: jax.Array, q: NF4Tensor) -> jax.Array:
    # The barrier keeps the dequantized weight a value of its own, so the matmul is the same XLA
    # operation as with a dense weight: with zero adapters, QLoRA's logits equal the dequantized
    # base model's bit for bit (a fusion of dequantization into the dot would round differently).
    w = jax.lax.optimization_barrier(q.dequantize(x.dtype))
    return jnp.matmul(x, w)


@jax.custom_vjp
def nf4_matmul(x: jax.Array, q: NF4Tensor) -> jax.Array:
    """x [..., in] @ dequantize(q) [in, out] -> [..., out] (in x's dtype)."""
    return _contract_in(x, q)


def _forward(x: jax.Array, q: NF4Tensor) -> tuple[jax.Array, tuple[NF4Tensor, jax.Array]]:
    # Residuals: the packed weight and a zero-size marker carrying x's dtype; never x or w.
    return _contract_in(x, q), (q, jnp.zeros((0,), x.dtype))


def _backward(res: tuple[NF4Tensor, jax.Array], g: jax.Array) -> tuple[jax.Array, None]:
    q, marker = res
    w = q.dequantize(g.dtype)
    dx = jnp.matmul(g, jnp.swapaxes(w, -1, -2)).astype(marker.dtype)
    return dx, None


nf4_matmul.defvjp(_forward, _backward)
