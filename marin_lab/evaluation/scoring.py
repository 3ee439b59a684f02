"""Log-likelihood scoring with a trained model: the compiled piece shared by every evaluator (perplexity,
bits per byte, and lm-eval's adapter `harness.MarinLM`).

On a mesh (`scorer(..., mesh)`), the parameters keep the shardings they have (the training mesh's
in a train_lm run, split over every host), each batch is one global array whose rows are split over
the mesh's batch axes (`place_batch`), and the results come back replicated, so every process reads
every row. The forward pass is then a collective program: every process of a multi-process run must
call it in lockstep, with the same batch (each builds it identically from the same requests).
"""

from __future__ import annotations

import functools
from typing import Any

import jax

# Numerics depend on this flag; fix it before any JAX operation runs in this process.
jax.config.update("jax_enable_x64", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from marin_lab.models.llama import LlamaConfig, Params, forward, token_log_likelihoods  # noqa: E402
from marin_lab.training.mesh import batch_divisor, batch_sharding  # noqa: E402
from marin_lab.training.train_step import param_shardings  # noqa: E402


@functools.lru_cache(maxsize=8)
def scorer(config: LlamaConfig, compute_dtype: str, attention_impl: str | None = None, mesh: Mesh | None = None) -> Any:
    """The compiled `score(params, tokens [B, L]) -> (log p, greedy)`, both [B, L-1]: the log-likelihood
    of each next token and whether it is the model's most likely one. One program per shape. With a
    `mesh`, both results are replicated over it: every process gets every row."""

    def score(params: Params, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = forward(
            params, tokens[:, :-1], config, compute_dtype=jnp.dtype(compute_dtype), attention_impl=attention_impl
        )
        logp, _ = token_log_likelihoods(logits, tokens[:, 1:])
        return logp, jnp.argmax(logits.astype(jnp.float32), axis=-1) == tokens[:, 1:]

    if mesh is None:
        return jax.jit(score)
    return jax.jit(score, out_shardings=NamedSharding(mesh, P()))


def batch_rows(batch_size: int, mesh: Mesh | None) -> int:
    """Rows of a scoring batch: `batch_size`, rounded up on a mesh so every device of its batch axes
    holds as many."""
    if mesh is None:
        return batch_size
    split = batch_divisor(mesh)
    return -(-batch_size // split) * split


def place_batch(tokens: np.ndarray, mesh: Mesh | None) -> jax.Array:
    """A host batch (the same on every process) as the scorer's input: on a mesh, one global array
    whose rows are split over the batch axes, each process supplying only its devices' rows."""
    if mesh is None:
        return jnp.asarray(tokens)
    return jax.make_array_from_callback(tokens.shape, batch_sharding(mesh), lambda index: tokens[index])


def host_array(value: jax.Array) -> np.ndarray:
    """A scorer result (replicated on a mesh) as numpy, read from this process's own copy."""
    if value.is_fully_addressable:
        return np.asarray(value)
    return np.asarray(value.addressable_data(0))


def shard_params(params: Params, config: LlamaConfig, mesh: Mesh, rule: str = "fsdp") -> Params:
    """Parameters held whole by every process (`loading.load_model`'s) placed on `mesh` with the
    training rule's shardings: each device keeps its shard."""
    shardings = param_shardings(config, mesh, rule)

    def place(value: Any, sharding: NamedSharding) -> jax.Array:
        host = np.asarray(value)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree_util.tree_map(place, params, shardings)


def params_mesh(params: Params) -> Mesh | None:
    """The mesh `params` are placed on (a train_lm run's state), or None for single-device arrays."""
    for leaf in jax.tree_util.tree_leaves(params):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, Mesh):
            return sharding.mesh
    return None


def token_logprobs(
    params: Params,
    config: LlamaConfig,
    tokens: np.ndarray,
    *,
    batch_size: int = 8,
    compute_dtype: str = "float32",
    attention_impl: str | None = None,
    mesh: Mesh | None = None,
) -> np.ndarray:
    """log p(tokens[:, t+1] | tokens[:, :t+1]) as fp32 [N, L-1] for int tokens [N, L].

    Rows are processed `batch_size` at a time (`batch_rows` on a mesh); the last batch is padded so
    only one program is compiled per (batch, L).
    """
    fn = scorer(config, compute_dtype, attention_impl, mesh)
    rows = batch_rows(batch_size, mesh)
    n, length = tokens.shape
    out = np.empty((n, length - 1), np.float32)
    for lo in range(0, n, rows):
        chunk = tokens[lo : lo + rows]
        padded = np.zeros((rows, length), np.int32)
        padded[: len(chunk)] = chunk
        out[lo : lo + len(chunk)] = host_array(fn(params, place_batch(padded, mesh))[0])[: len(chunk)]
    return out


def bucket_length(length: int, maximum: int) -> int:
    """Round up to the next of 16, 20, 24, 28, 32, 40, 48, ... (four steps between powers of two; at
    most `maximum`) to bound the compiled shapes: padding adds at most a quarter to a batch (a power
    of two added up to all of it: the 30M model's 10-shot arc_easy batches of 513-600 tokens ran at
    1,024)."""
    n = max(length, 1)
    if n <= 16:
        return min(16, maximum)
    step = (1 << (n - 1).bit_length()) // 8  # a quarter of the way from the power of two below
    return min(-(-n // step) * step, maximum)


def as_params(tree: Any) -> Params:
    return jax.tree_util.tree_map(jnp.asarray, tree)
