"""Per-position log-likelihoods from the final hidden states, without the whole logits tensor.

The output projection of a large-vocabulary model makes the biggest activation of the step: fp32
logits [B, T, vocab] (Llama 3's 128,256 entries: 3.9 GiB for 2 x 4096 tokens), and autodiff keeps
them, or their softmax, for the backward pass. Here the sequence is cut into chunks of
`chunk_size` positions and a `lax.scan` computes each chunk's logits, its logsumexp and its
target's logit, keeping only those two numbers per position. The scan body is rematerialised
(`jax.checkpoint`), so the backward pass recomputes one chunk's logits at a time from the hidden
states it saved, and the weight's gradient is accumulated across chunks by the scan's transpose:
the largest logits buffer, forward and backward, is [B, chunk_size, vocab].

Each chunk's logits are the same matmul, in the same dtype, as the unchunked path's, and the
per-position values are identical; the loss differs only in the order of the final fp32 sums.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp


def log_likelihoods(logits: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-position log p(target) and logsumexp, both fp32 [..., T], from logits [..., T, vocab]."""
    logits32 = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(logits32, axis=-1)
    target_logit = jnp.take_along_axis(logits32, targets[..., None], axis=-1)[..., 0]
    return target_logit - lse, lse


def chunked_log_likelihoods(
    hidden: jax.Array,
    head: Callable[[jax.Array], jax.Array],
    targets: jax.Array,
    chunk_size: int,
    constrain: Callable[[jax.Array], jax.Array] = lambda a: a,
) -> tuple[jax.Array, jax.Array]:
    """(log p(target), logsumexp), fp32 [B, T], computing `head(hidden)` chunk_size positions at a time.

    hidden: [B, T, D]; head: [B, C, D] -> logits [B, C, vocab]; constrain: applied to each chunk of
    hidden states (the trainer pins its batch sharding). T need not divide: the last chunk is padded
    and the padding dropped.
    """
    b, t, d = hidden.shape
    n = -(-t // chunk_size)
    pad = n * chunk_size - t
    if pad:
        hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
        targets = jnp.pad(targets, ((0, 0), (0, pad)))
    # [n, B, C, ...]: the scan walks the sequence; each chunk keeps every sequence of the batch, so
    # the batch sharding of the hidden states carries over to the chunk unchanged.
    xs = hidden.reshape(b, n, chunk_size, d).swapaxes(0, 1)
    ts = targets.reshape(b, n, chunk_size).swapaxes(0, 1)

    @functools.partial(jax.checkpoint, prevent_cse=False)  # inside a scan CSE cannot undo the remat
    def one_chunk(x: jax.Array, tgt: jax.Array) -> tuple[jax.Array, jax.Array]:
        return log_likelihoods(head(constrain(x)), tgt)

    def body(carry: None, chunk: tuple[jax.Array, jax.Array]) -> tuple[None, tuple[jax.Array, jax.Array]]:
        return carry, one_chunk(*chunk)

    _, (logp, lse) = jax.lax.scan(body, None, (xs, ts))
    logp = logp.swapaxes(0, 1).reshape(b, n * chunk_size)[:, :t]
    lse = lse.swapaxes(0, 1).reshape(b, n * chunk_size)[:, :t]
    return logp, lse
