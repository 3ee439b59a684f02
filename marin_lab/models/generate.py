"""Text generation with a key/value cache: prefill the prompts once, then one token per step.

A batch of prompts is right-padded to a bucket length P (a power of two) and written into a cache
of keys and values, `[layers, B, S, kv_heads, head_dim]` with S the bucket of (longest prompt +
new tokens), capped at the model's context. Each row keeps its own position: row b's prompt fills
slots 0..len_b-1 and its n-th new token goes to slot len_b + n, so positions (and RoPE angles) are
the ones the unpadded sequence has in `forward`. A query at position p attends to slots <= p; the
padding slots of a short prompt lie beyond its position and are overwritten before they are read.

Two programs per (batch size, P, S): the prefill, and a decode loop (`jax.lax.while_loop`) that
runs one single-token step of every layer (`jax.lax.scan` over the stacked layers, as in
`forward`) until a chunk's end, the token limit, or every row has produced a stop token. The
loop's bound is an argument, not a shape, so text-level stop strings are checked between chunks
without another compile.

Sampling: temperature 0 is greedy (argmax); otherwise logits / temperature, nucleus (top-p)
filtering, and a draw whose key is derived from (seed, the prompt's index in the request, the
token's index): the same request with the same seed gives the same tokens whatever the batch size.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from marin_lab.models.llama import (
    LlamaConfig,
    Params,
    _cast_param,
    _is_weight_wrapper,
    apply_rope,
    linear,
    output_logits,
    rms_norm,
    rope_tables,
)
from marin_lab.versioning import field_hints

logger = logging.getLogger(__name__)

MIN_BUCKET = 16
"""Shortest padded prompt / cache length: shorter ones share this program."""

DEFAULT_CHUNK = 32
"""New tokens generated between two host-side checks of stop strings (generate_text)."""


@field_hints
@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How new tokens are chosen."""

    max_new_tokens: int = 256
    """At most this many new tokens per prompt."""
    temperature: float = 0.0
    """0: greedy (argmax); otherwise the logits are divided by it before sampling."""
    top_p: float = 1.0
    """Nucleus sampling: draw from the smallest set of tokens whose probability reaches top_p."""
    seed: int = 0
    """Seed of the draws (sampling only)."""
    stop_token_ids: tuple[int, ...] = ()
    """Generation of a row ends at the first of these (not included in the output), e.g. EOS."""

    def validate(self) -> None:
        """Raise ValueError naming the field when a value is out of range."""
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens!r} must be a positive integer")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature={self.temperature!r} must be a finite number >= 0 (0 is greedy)")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p={self.top_p!r} must be in (0, 1]")


@dataclasses.dataclass
class Generation:
    """What `generate` returns: per prompt, in the order given."""

    tokens: list[list[int]]
    """New tokens (the stop token, and anything after a stop string, excluded)."""
    finish_reasons: list[str]
    """'stop_token', 'stop_string', 'length' (max_new_tokens) or 'context' (the model's context is full)."""
    truncated: list[int]
    """Prompt tokens dropped from the left to fit the context (0 for most prompts)."""

    @property
    def num_truncated(self) -> int:
        """Prompts that were cut."""
        return sum(1 for n in self.truncated if n)


def bucket(length: int, maximum: int) -> int:
    """`length` rounded up to a power of two (at least MIN_BUCKET), at most `maximum`."""
    return min(max(MIN_BUCKET, 1 << (max(length, 1) - 1).bit_length()), maximum)


# --- the cached forward pass --------------------------------------------------------------------


def _rope_rows(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """apply_rope with per-row tables: x [B, T, heads, hd], cos/sin [B, T, hd]."""
    return jax.vmap(lambda xi, c, s: apply_rope(xi[None], c, s)[0])(x, cos, sin)


def _write(cache: jax.Array, new: jax.Array, start: jax.Array) -> jax.Array:
    """cache [B, S, kv, hd] with new [B, T, kv, hd] written at slot start[b] of each row."""
    return jax.vmap(lambda c, u, s: jax.lax.dynamic_update_slice(c, u, (s, 0, 0)))(
        cache, new.astype(cache.dtype), start
    )


def _attend(q: jax.Array, k: jax.Array, v: jax.Array, visible: jax.Array) -> jax.Array:
    """Grouped-query attention of q [B, T, H, hd] over the cache k, v [B, S, KV, hd] where
    visible [B, T, S]; the same arithmetic as the model's einsum attention."""
    b, t, h, hd = q.shape
    kv = k.shape[2]
    qg = q.reshape(b, t, kv, h // kv, hd)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, k).astype(jnp.float32) / math.sqrt(hd)
    scores = jnp.where(visible[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
    return out.reshape(b, t, h, hd)


def _cached_block(
    config: LlamaConfig,
    x: jax.Array,
    layer: Params,
    k_cache: jax.Array,
    v_cache: jax.Array,
    cos: jax.Array,
    sin: jax.Array,
    start: jax.Array,
    visible: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One decoder block on x [B, T, D] at positions start[b] + t, reading and extending the cache."""
    b, t, _ = x.shape
    hd = config.resolved_head_dim
    h = rms_norm(x, layer["attn_norm"], config.norm_eps)
    q = linear(h, layer["wq"]).reshape(b, t, config.num_heads, hd)
    k = linear(h, layer["wk"]).reshape(b, t, config.num_kv_heads, hd)
    v = linear(h, layer["wv"]).reshape(b, t, config.num_kv_heads, hd)
    q, k = _rope_rows(q, cos, sin), _rope_rows(k, cos, sin)
    k_cache, v_cache = _write(k_cache, k, start), _write(v_cache, v, start)
    attn = _attend(q, k_cache, v_cache, visible).reshape(b, t, config.num_heads * hd)
    x = x + linear(attn, layer["wo"])
    h = rms_norm(x, layer["mlp_norm"], config.norm_eps)
    gated = jax.nn.silu(linear(h, layer["w_gate"])) * linear(h, layer["w_up"])
    return x + linear(gated, layer["w_down"]), k_cache, v_cache


def cached_forward(
    cast: Params, tokens: jax.Array, start: jax.Array, k_cache: jax.Array, v_cache: jax.Array, config: LlamaConfig
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(logits [B, T, vocab], k_cache, v_cache) for tokens [B, T] at positions start[b] + t.

    cast: params already in the compute dtype; caches [layers, B, S, kv_heads, head_dim].
    """
    b, t = tokens.shape
    s = k_cache.shape[2]
    positions = start[:, None] + jnp.arange(t, dtype=start.dtype)[None, :]  # [B, T]
    cos, sin = rope_tables(s, config.resolved_head_dim, config.rope_theta)
    cos, sin = cos[positions], sin[positions]
    visible = jnp.arange(s)[None, None, :] <= positions[:, :, None]  # [B, T, S]
    x = jnp.take(cast["embed"], tokens, axis=0)

    def body(x: jax.Array, xs: tuple[Params, jax.Array, jax.Array]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        layer, kc, vc = xs
        x, kc, vc = _cached_block(config, x, layer, kc, vc, cos, sin, start, visible)
        return x, (kc, vc)

    x, (k_cache, v_cache) = jax.lax.scan(body, x, (cast["layers"], k_cache, v_cache))
    x = rms_norm(x, cast["final_norm"], config.norm_eps)
    return output_logits(cast, x, config), k_cache, v_cache


# --- choosing tokens ----------------------------------------------------------------------------


def _choose(
    logits: jax.Array, keys: jax.Array, index: jax.Array, temperature: jax.Array, top_p: jax.Array, greedy: bool
) -> jax.Array:
    """Next token per row from logits [B, V]: argmax, or a top-p draw with key fold_in(keys[b], index)."""
    logits = logits.astype(jnp.float32)
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    order = jnp.argsort(-logits, axis=-1)
    ranked = jnp.take_along_axis(logits, order, axis=-1) / temperature
    probs = jax.nn.softmax(ranked, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # probability of the better-ranked tokens
    keep = (before < top_p).at[:, 0].set(True)
    ranked = jnp.where(keep, ranked, -jnp.inf)
    picks = jax.vmap(lambda k, row: jax.random.categorical(jax.random.fold_in(k, index), row))(keys, ranked)
    return jnp.take_along_axis(order, picks[:, None], axis=-1)[:, 0].astype(jnp.int32)


def _row_keys(seed: jax.Array, rows: jax.Array) -> jax.Array:
    base = jax.random.key(seed)
    return jax.vmap(lambda r: jax.random.fold_in(base, r))(rows)


# --- the two compiled programs -------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _programs(config: LlamaConfig, compute_dtype: str, greedy: bool, cache_len: int) -> tuple[Callable, Callable]:
    dtype = jnp.dtype(compute_dtype)
    hd, kv, n_layers = config.resolved_head_dim, config.num_kv_heads, config.num_layers

    def cast_params(params: Params) -> Params:
        return jax.tree_util.tree_map(lambda p: _cast_param(p, dtype), params, is_leaf=_is_weight_wrapper)

    def prefill(
        params: Params,
        tokens: jax.Array,
        lengths: jax.Array,
        rows: jax.Array,
        done: jax.Array,
        seed: jax.Array,
        temperature: jax.Array,
        top_p: jax.Array,
        stop_ids: jax.Array,
    ) -> dict[str, jax.Array]:
        b = tokens.shape[0]
        cast = cast_params(params)
        cache = jnp.zeros((n_layers, b, cache_len, kv, hd), dtype)
        logits, k_cache, v_cache = cached_forward(cast, tokens, jnp.zeros((b,), jnp.int32), cache, cache, config)
        last = jnp.take_along_axis(logits, (lengths - 1)[:, None, None], axis=1)[:, 0]
        token = _choose(last, _row_keys(seed, rows), jnp.int32(0), temperature, top_p, greedy)
        out = jnp.zeros((b, cache_len), jnp.int32).at[:, 0].set(token)
        return {
            "k": k_cache,
            "v": v_cache,
            "token": token,
            "pos": lengths,
            "out": out,
            "n": jnp.int32(1),
            "done": done | jnp.isin(token, stop_ids),
        }

    def decode(
        params: Params,
        state: dict[str, jax.Array],
        limit: jax.Array,
        rows: jax.Array,
        seed: jax.Array,
        temperature: jax.Array,
        top_p: jax.Array,
        stop_ids: jax.Array,
    ) -> dict[str, jax.Array]:
        cast = cast_params(params)
        keys = _row_keys(seed, rows)

        def cond(st: dict[str, jax.Array]) -> jax.Array:
            return (st["n"] < limit) & ~jnp.all(st["done"])

        def body(st: dict[str, jax.Array]) -> dict[str, jax.Array]:
            pos = jnp.minimum(st["pos"], cache_len - 1)  # finished rows stop moving at the cache's end
            logits, k_cache, v_cache = cached_forward(cast, st["token"][:, None], pos, st["k"], st["v"], config)
            token = _choose(logits[:, 0], keys, st["n"], temperature, top_p, greedy)
            token = jnp.where(st["done"], 0, token)
            return {
                "k": k_cache,
                "v": v_cache,
                "token": token,
                "pos": st["pos"] + 1,
                "out": st["out"].at[:, st["n"]].set(token),
                "n": st["n"] + 1,
                "done": st["done"] | jnp.isin(token, stop_ids),
            }

        return jax.lax.while_loop(cond, body, state)

    return jax.jit(prefill), jax.jit(decode, donate_argnums=(1,))


# --- the public API ------------------------------------------------------------------------------


def _cut(tokens: list[int], stop_ids: Sequence[int]) -> tuple[list[int], bool]:
    for i, tok in enumerate(tokens):
        if tok in stop_ids:
            return tokens[:i], True
    return tokens, False


def _batch_sharding(mesh: Any, batch: int) -> Any:
    """Rows split over the mesh's non-`model` axes when they divide the batch; else None."""
    if mesh is None:
        return None
    axes = tuple(n for n in mesh.axis_names if n != "model" and mesh.shape[n] > 1)
    if not axes or batch % math.prod(mesh.shape[n] for n in axes):
        return None
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axes))


def generate(
    params: Params,
    config: LlamaConfig,
    prompts: Sequence[Sequence[int]],
    sampling: SamplingConfig,
    *,
    compute_dtype: str = "float32",
    batch_size: int = 8,
    mesh: Any = None,
    stop: Callable[[int, list[int]], int | None] | None = None,
    chunk: int = DEFAULT_CHUNK,
) -> Generation:
    """New tokens for each prompt, with why each stopped and how many prompt tokens were cut.

    stop: called between chunks of `chunk` tokens as stop(prompt index, new tokens so far); an
    int ends that row there (its tokens are cut to that length), None lets it go on. Without it
    the decode loop runs to the token limit (or every row's stop token) in one call.
    """
    sampling.validate()
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be positive")
    if sampling.max_new_tokens >= config.max_seq_len:
        raise ValueError(
            f"max_new_tokens={sampling.max_new_tokens} leaves no room for a prompt in the model's "
            f"context (max_seq_len={config.max_seq_len}); ask for fewer tokens"
        )
    vocab = config.resolved_vocab_size
    room = config.max_seq_len - sampling.max_new_tokens
    kept: list[list[int]] = []
    truncated: list[int] = []
    for i, prompt in enumerate(prompts):
        ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError(f"prompt {i} is empty: give at least one token (e.g. the tokenizer's BOS)")
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt {i} holds token id {bad[0]}, outside the model's vocabulary [0, {vocab})")
        truncated.append(max(0, len(ids) - room))
        kept.append(ids[-room:])
    if any(truncated):
        logger.warning(
            "generate: %d of %d prompts were longer than %d tokens (max_seq_len %d - max_new_tokens %d) "
            "and were truncated from the left",
            sum(1 for n in truncated if n),
            len(kept),
            room,
            config.max_seq_len,
            sampling.max_new_tokens,
        )
    tokens: list[list[int]] = [[] for _ in kept]
    reasons = ["length"] * len(kept)
    stop_ids = np.asarray(list(sampling.stop_token_ids) or [-1], np.int32)
    # Similar lengths share a batch (fewer padded positions, fewer prompt buckets).
    order = sorted(range(len(kept)), key=lambda i: (len(kept[i]), i))
    for lo in range(0, len(order), batch_size):
        rows = order[lo : lo + batch_size]
        for i, (toks, reason) in zip(
            rows,
            _generate_batch(
                params,
                config,
                [kept[i] for i in rows],
                rows,
                sampling,
                stop_ids,
                compute_dtype,
                batch_size,
                mesh,
                stop,
                chunk,
            ),
            strict=True,
        ):
            tokens[i], reasons[i] = toks, reason
    return Generation(tokens=tokens, finish_reasons=reasons, truncated=truncated)


def _generate_batch(
    params: Params,
    config: LlamaConfig,
    prompts: list[list[int]],
    rows: list[int],
    sampling: SamplingConfig,
    stop_ids: np.ndarray,
    compute_dtype: str,
    batch_size: int,
    mesh: Any,
    stop: Callable[[int, list[int]], int | None] | None,
    chunk: int,
) -> list[tuple[list[int], str]]:
    n = len(prompts)
    longest = max(len(p) for p in prompts)
    cache_len = bucket(longest + sampling.max_new_tokens, config.max_seq_len)
    width = bucket(longest, cache_len)
    tokens = np.zeros((batch_size, width), np.int32)
    lengths = np.ones((batch_size,), np.int32)
    for r, p in enumerate(prompts):
        tokens[r, : len(p)] = p
        lengths[r] = len(p)
    done = np.arange(batch_size) >= n  # filler rows of the last batch are finished from the start
    row_ids = np.asarray(rows + [0] * (batch_size - n), np.int32)
    # A row may use the cache up to its end; it can never hold more than max_new_tokens new ones.
    limit_total = min(sampling.max_new_tokens, cache_len - longest)
    prefill, decode = _programs(config, compute_dtype, sampling.temperature == 0, cache_len)
    scalars = (
        jnp.int32(sampling.seed),
        jnp.float32(max(sampling.temperature, 1e-6)),
        jnp.float32(sampling.top_p),
        jnp.asarray(stop_ids),
    )
    sharding = _batch_sharding(mesh, batch_size)
    put = (lambda a: jax.device_put(a, sharding)) if sharding is not None else jnp.asarray
    rows_dev = put(row_ids)
    state = prefill(params, put(tokens), put(lengths), rows_dev, put(done), *scalars)
    cut_at: dict[int, int] = {}
    step = limit_total if stop is None else max(1, chunk)
    produced = 1
    while produced < limit_total:
        produced = min(limit_total, produced + step)
        state = decode(params, state, jnp.int32(produced), rows_dev, *scalars)
        if stop is not None:
            out, finished = np.asarray(state["out"]), np.asarray(state["done"]).copy()
            for r in range(n):
                if r in cut_at:
                    continue
                toks, _ = _cut(out[r, :produced].tolist(), sampling.stop_token_ids)
                at = stop(rows[r], toks)
                if at is not None:
                    cut_at[r] = at
                    finished[r] = True
            state["done"] = put(finished)
        if bool(np.all(np.asarray(state["done"]))):
            break
    out = np.asarray(state["out"])
    produced = int(state["n"])
    if stop is not None:  # the tokens since the last check (or the prefill's one alone)
        for r in range(n):
            if r not in cut_at:
                at = stop(rows[r], _cut(out[r, :produced].tolist(), sampling.stop_token_ids)[0])
                if at is not None:
                    cut_at[r] = at
    results = []
    for r in range(n):
        toks, stopped = _cut(out[r, :produced].tolist(), sampling.stop_token_ids)
        if r in cut_at:
            results.append((toks[: cut_at[r]], "stop_string"))
        elif stopped:
            results.append((toks, "stop_token"))
        elif len(toks) < sampling.max_new_tokens and len(prompts[r]) + len(toks) >= cache_len:
            results.append((toks, "context"))
        else:
            results.append((toks, "length"))
    return results


def generate_tokens(
    params: Params,
    config: LlamaConfig,
    prompts: list[list[int]],
    sampling: SamplingConfig,
    *,
    compute_dtype: str = "float32",
    batch_size: int = 8,
    mesh: Any = None,
) -> list[list[int]]:
    """New tokens for each prompt (prompt not included), stopping at a stop token (excluded) or
    max_new_tokens. Prompts of different lengths share a batch (right-padded, per-row positions);
    prompts longer than config.max_seq_len - max_new_tokens are truncated from the left (counted
    in `generate(...).truncated`)."""
    return generate(
        params, config, prompts, sampling, compute_dtype=compute_dtype, batch_size=batch_size, mesh=mesh
    ).tokens


def _stop_string_cut(text: str, until: Sequence[str]) -> int | None:
    """Index of the earliest stop string in `text`, or None."""
    found = [i for i in (text.find(s) for s in until if s) if i >= 0]
    return min(found) if found else None


def generate_text(
    params: Params,
    config: LlamaConfig,
    tokenizer: Any,
    prompts: list[str],
    sampling: SamplingConfig,
    *,
    until: Sequence[str] = (),
    compute_dtype: str = "float32",
    batch_size: int = 8,
    mesh: Any = None,
    prompt_ids: list[list[int]] | None = None,
    chunk: int = DEFAULT_CHUNK,
    result: Generation | None = None,
) -> list[str]:
    """Decoded continuations, each cut at the first stop string in `until` (the stop string excluded).

    tokenizer: a `tokenizers.Tokenizer`. prompt_ids: the prompts already encoded (e.g. rendered with
    a chat template); `prompts` is then unused. result: a Generation to fill in (finish reasons and
    truncation counts of this call).
    """
    encoded = prompt_ids if prompt_ids is not None else [tokenizer.encode(p).ids for p in prompts]
    stops = tuple(s for s in until if s)

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    def stop(_: int, toks: list[int]) -> int | None:
        if _stop_string_cut(decode(toks), stops) is None:
            return None
        # The fewest tokens whose text holds a stop string (the text is cut at it below).
        for k in range(1, len(toks) + 1):
            if _stop_string_cut(decode(toks[:k]), stops) is not None:
                return k
        return len(toks)

    gen = generate(
        params,
        config,
        encoded,
        sampling,
        compute_dtype=compute_dtype,
        batch_size=batch_size,
        mesh=mesh,
        stop=stop if stops else None,
        chunk=chunk,
    )
    if result is not None:
        result.tokens, result.finish_reasons, result.truncated = gen.tokens, gen.finish_reasons, gen.truncated
    texts = []
    for toks in gen.tokens:
        text = decode(toks)
        at = _stop_string_cut(text, stops)
        texts.append(text if at is None else text[:at])
    return texts
