"""An explicit dynamic-rescale point for gradients (Scalify's answer to global loss scaling).

`rescale_grad(x, probe)` is the identity on the forward pass. On the backward pass it multiplies
the incoming gradient by s = a power of two chosen from that gradient's own amax (so that it
becomes ~1), and hands s back as the cotangent of `probe`. Backpropagation is linear in the
cotangent, so from that point on every gradient carries the same exact factor s; the trainer
divides the parameter gradients by it (exact: a power of two, in fp32).

Where it pays: on the logits, in float16 compute. The gradient of a mean cross-entropy with
respect to the logits is (softmax - onehot) / tokens, ~1e-8 for a batch of thousands of tokens
and a large vocabulary: below float16's smallest subnormal (6e-8), so without rescaling it is
flushed to zero before it reaches any weight. bf16 has fp32's exponent range and does not need it;
the float8 matmuls rescale every gradient per tensor themselves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from marin_lab.precision.scaled import F32, pow2_round_down


@jax.custom_vjp
def rescale_grad(x: jax.Array, probe: jax.Array) -> jax.Array:
    """x unchanged; its gradient scaled to amax ~1 by a power of two, returned as probe's cotangent."""
    del probe
    return x


def _fwd(x: jax.Array, probe: jax.Array) -> tuple[jax.Array, None]:
    del probe
    return x, None


def _bwd(_res: None, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    amax = jnp.max(jnp.abs(g.astype(F32)))
    # 1 / pow2_round_down(amax) puts amax in [1, 2): large enough that the smallest useful
    # entries stay normal in float16, small enough that sums over a batch do not overflow.
    s = jnp.where(amax > 0, 1.0 / pow2_round_down(amax), 1.0).astype(F32)
    return (g.astype(F32) * s).astype(g.dtype), s


rescale_grad.defvjp(_fwd, _bwd)
