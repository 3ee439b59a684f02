"""Perplexity and bits-per-byte on the validation split of each token cache.

Bits per byte = total negative log-likelihood (in bits) / UTF-8 bytes of the scored text. It is
comparable across tokenizers, unlike perplexity. Bytes come from decoding the scored tokens with
the cache's tokenizer; without a tokenizer, from a `bytes` count in the ledger's split entry
(scaled to the tokens scored); otherwise bits-per-byte is reported as null.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
from jax.sharding import Mesh

from marin_lab.evaluation.scoring import token_logprobs
from marin_lab.models.llama import LlamaConfig, Params
from marin_lab.processing.tokenizers import optional_tokenizer_at
from marin_lab.training.token_cache import TokenCache, TokenCacheError

logger = logging.getLogger(__name__)


def evaluate_cache(
    params: Params,
    model: LlamaConfig,
    cache_path: str,
    *,
    split: str,
    seq_len: int,
    batch_size: int,
    max_sequences: int | None,
    compute_dtype: str = "float32",
    name: str = "?",
    mesh: Mesh | None = None,
) -> dict[str, Any]:
    """{"perplexity", "bits_per_byte", "tokens", "bytes", "loss"} for one cache's split; on `mesh`
    (the parameters' own), every process reads the same windows and scores them together."""
    cache = TokenCache(cache_path)
    windows = cache.split(split, seq_len)
    n = windows.num_sequences if max_sequences is None else min(windows.num_sequences, max_sequences)
    if n == 0:
        raise TokenCacheError(
            f"validation set {name!r} ({cache_path}): split {split!r} has no sequence of "
            f"{seq_len + 1} tokens; lower seq_len or give a larger validation split"
        )
    # Evenly spaced windows: a cap on the count still covers the whole split, deterministically.
    idx = np.unique(np.linspace(0, windows.num_sequences - 1, n).astype(np.int64))
    tokens = windows.sequences(idx)
    logp = token_logprobs(params, model, tokens, batch_size=batch_size, compute_dtype=compute_dtype, mesh=mesh)
    nll = float(-logp.astype(np.float64).sum())
    count = int(logp.size)
    n_bytes = _count_bytes(cache, split, tokens[:, 1:])
    return {
        "loss": nll / count,
        "perplexity": math.exp(nll / count),
        "tokens": count,
        "bytes": n_bytes,
        "bits_per_byte": (nll / math.log(2) / n_bytes) if n_bytes else None,
    }


def _count_bytes(cache: TokenCache, split: str, targets: np.ndarray) -> int | None:
    tokenizer = optional_tokenizer_at(cache.tokenizer_url())
    if tokenizer is not None:
        texts = tokenizer.decode_batch([row.tolist() for row in targets], skip_special_tokens=False)
        return sum(len(t.encode("utf-8")) for t in texts)
    entry = cache.ledger["splits"].get(split, {})
    if entry.get("bytes") and entry.get("tokens"):
        return int(round(entry["bytes"] / entry["tokens"] * targets.size))
    logger.warning("cache %s has no tokenizer and no byte count; bits_per_byte is null", cache.path)
    return None
