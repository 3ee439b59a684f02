"""Log-likelihood scoring with a trained model: the compiled piece shared by every evaluator (perplexity,
bits per byte, and lm-eval's adapter `harness.MarinLM`)."""

from __future__ import annotations

import functools
from typing import Any

import jax

# Numerics depend on this flag; fix it before any JAX operation runs in this process.
jax.config.update("jax_enable_x64", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from marin_lab.models.llama import LlamaConfig, Params, forward, token_log_likelihoods  # noqa: E402


@functools.lru_cache(maxsize=8)
def scorer(config: LlamaConfig, compute_dtype: str, attention_impl: str | None = None) -> Any:
    """The compiled `score(params, tokens [B, L]) -> (log p, greedy)`, both [B, L-1]: the log-likelihood
    of each next token and whether it is the model's most likely one. One program per shape."""

    def score(params: Params, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = forward(
            params, tokens[:, :-1], config, compute_dtype=jnp.dtype(compute_dtype), attention_impl=attention_impl
        )
        logp, _ = token_log_likelihoods(logits, tokens[:, 1:])
        return logp, jnp.argmax(logits.astype(jnp.float32), axis=-1) == tokens[:, 1:]

    return jax.jit(score)


def token_logprobs(
    params: Params,
    config: LlamaConfig,
    tokens: np.ndarray,
    *,
    batch_size: int = 8,
    compute_dtype: str = "float32",
    attention_impl: str | None = None,
) -> np.ndarray:
    """log p(tokens[:, t+1] | tokens[:, :t+1]) as fp32 [N, L-1] for int tokens [N, L].

    Rows are processed `batch_size` at a time; the last batch is padded so only one program is
    compiled per (batch_size, L).
    """
    fn = scorer(config, compute_dtype, attention_impl)
    n, length = tokens.shape
    out = np.empty((n, length - 1), np.float32)
    for lo in range(0, n, batch_size):
        chunk = tokens[lo : lo + batch_size]
        padded = np.zeros((batch_size, length), np.int32)
        padded[: len(chunk)] = chunk
        out[lo : lo + len(chunk)] = np.asarray(fn(params, jnp.asarray(padded))[0])[: len(chunk)]
    return out


def bucket_length(length: int, maximum: int) -> int:
    """Round up to a power of two (at least 16, at most `maximum`) to bound the compiled shapes."""
    return min(max(16, 1 << (max(length, 1) - 1).bit_length()), maximum)


def as_params(tree: Any) -> Params:
    return jax.tree_util.tree_map(jnp.asarray, tree)
