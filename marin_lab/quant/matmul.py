"""`x @ w` for a frozen base weight, with a backward pass that never keeps a materialised copy.

Plain autodiff of `x @ dequantize(q)` would save the dequantized matrix (full precision, 4-8x
the packed bytes) as a residual for the backward pass, for every layer. The custom VJP saves
only the weight as stored and materialises it again for `dx = g @ w.T`. The base is frozen: its
cotangent is zero (None), so no gradient buffer of its size ever exists.

Materialising a weight is, in order: fetch it from host memory (`fetch`, an offloaded base),
gather it whole onto every device (`gather`, a sharding: FSDP), dequantize it (NF4). The gather
runs on the stored form, so an NF4 weight crosses the interconnect as packed uint8 bytes and the
absmax codes, about a quarter of bf16's bytes; and since the residual is the *split* weight, the
backward pass gathers it again instead of keeping every layer's gathered copy alive.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from marin_lab.quant.nf4 import NF4Tensor


def materialize(w: Any, dtype: Any, gather: Any = None, fetch: bool = False) -> jax.Array:
    """The dense weight of `w` (an array or NF4Tensor) in `dtype`: fetched, gathered, dequantized."""
    if fetch:
        w = jax.device_put(w, jax.memory.Space.Device)
    if gather is not None:
        w = jax.tree_util.tree_map(lambda a: jax.lax.with_sharding_constraint(a, gather), w)
    if isinstance(w, NF4Tensor):
        # The barrier keeps the dequantized weight a value of its own, so the matmul is the same XLA
        # operation as with a dense weight: with zero adapters, QLoRA's logits equal the dequantized
        # base model's bit for bit (a fusion of dequantization into the dot would round differently).
        return jax.lax.optimization_barrier(w.dequantize(dtype))
    return w.astype(dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def frozen_matmul(x: jax.Array, w: Any, gather: Any = None, fetch: bool = False) -> jax.Array:
    """x [..., in] @ w [in, out] -> [..., out] (in x's dtype); `w` gets no gradient."""
    return jnp.matmul(x, materialize(w, x.dtype, gather, fetch))


def _forward(x: jax.Array, w: Any, gather: Any, fetch: bool) -> tuple[jax.Array, tuple[Any, jax.Array]]:
    # Residuals: the weight as stored (split, packed, maybe on host) and a zero-size marker
    # carrying x's dtype; never x or the materialised weight.
    return frozen_matmul(x, w, gather, fetch), (w, jnp.zeros((0,), x.dtype))


def _backward(gather: Any, fetch: bool, res: tuple[Any, jax.Array], g: jax.Array) -> tuple[jax.Array, None]:
    w, marker = res
    dense = materialize(w, g.dtype, gather, fetch)
    dx = jnp.matmul(g, jnp.swapaxes(dense, -1, -2)).astype(marker.dtype)
    return dx, None


frozen_matmul.defvjp(_forward, _backward)


def nf4_matmul(x: jax.Array, q: NF4Tensor) -> jax.Array:
    """x [..., in] @ dequantize(q) [in, out] -> [..., out] (in x's dtype)."""
    return frozen_matmul(x, q)
