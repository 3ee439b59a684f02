"""Causal grouped-query attention, one implementation per `attention_impl` name.

    None      einsum (also spelled "einsum"): fp32 scores [B, KV, G, T, T] in memory; any backend; the
              reference the others are tested against.
    "xla"     jax.nn.dot_product_attention's XLA path (the same T x T scores).
    "cudnn"   jax.nn.dot_product_attention's cuDNN flash kernel (NVIDIA GPUs).
    "splash"  the Pallas TPU Splash kernel (jax.experimental.pallas.ops.tpu.splash_attention): a
              flash-style kernel that walks [block_q, block_kv] tiles and skips the tiles above the
              causal diagonal, so no [T, T] buffer exists forward or backward.

Splash details. Grouped-query heads use the kernel's own multi-head form: `make_splash_mha` takes
q [H, T, hd] and k, v [KV, T, hd] with H a multiple of KV and maps query head h to kv head
h // (H / KV), the same grouping the einsum path uses; nothing is repeated in memory. The kernel
does not scale the scores, so q is multiplied by 1/sqrt(hd) before it. The kernel is a
single-device program: under a mesh it runs inside `jax.shard_map` over the batch axes (and the
`model` axis over heads, when it divides both head counts), so each device attends over its own
sequences and heads and nothing is gathered; inside an enclosing shard_map (the data-parallel
step) the arrays are already local and it is called directly.

Where the kernel runs: the program is lowered by `jax.lax.platform_dependent`, so a TPU lowering
(a real TPU or a deviceless compile for a TPU topology) gets the Mosaic kernel (a
`tpu_custom_call`), and any other backend runs the same kernel in Pallas interpret mode: slow,
for numerics tests on CPU only.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from marin_lab.errors import MarinLabError

IMPLS = (None, "einsum", "xla", "cudnn", "splash")
"""Values `attention_impl` accepts (None and "einsum" are the same path)."""

SPLASH_BLOCKS = (512, 256, 128)
"""Splash tile sizes tried, largest first; the kernel's kv tiles must be multiples of 128 lanes."""


class AttentionConfigError(MarinLabError, ValueError):
    """An attention implementation that cannot take this model, sequence length or backend."""


def check_attention(
    impl: str | None,
    *,
    seq_len: int,
    num_heads: int,
    num_kv_heads: int,
    platform: str | None = None,
    field: str = "attention_impl",
) -> None:
    """Raise AttentionConfigError (one line naming `field`) when `impl` cannot run this shape/backend.

    platform: the backend the step will run on ('cpu', 'gpu', 'tpu'; None: not checked). Splash
    is refused on GPUs (interpret mode there is only slow); on CPU it runs interpreted, for tests.
    """
    if impl not in IMPLS:
        raise AttentionConfigError(f"{field}={impl!r} is not one of {IMPLS}")
    gpu = platform in ("gpu", "cuda", "rocm")
    if platform is not None and ((impl == "cudnn" and not gpu) or (impl == "splash" and gpu)):
        usable = {"tpu": "'splash'", "cpu": "None (einsum)"}.get(platform, "'cudnn'")
        raise AttentionConfigError(
            f"{field}={impl!r} is not available on {platform} (cudnn: NVIDIA GPUs; splash: TPUs, "
            f"interpreted on CPU); use {usable} or 'xla' there"
        )
    if impl == "splash":
        if seq_len % SPLASH_BLOCKS[-1]:
            raise AttentionConfigError(
                f"{field}='splash' needs seq_len to be a multiple of {SPLASH_BLOCKS[-1]} (the "
                f"kernel's tile), got seq_len={seq_len}; change seq_len or use attention_impl=None"
            )
        if num_heads % num_kv_heads:
            raise AttentionConfigError(
                f"{field}='splash' needs num_heads ({num_heads}) to be a multiple of num_kv_heads ({num_kv_heads})"
            )


def attention(
    q: jax.Array, k: jax.Array, v: jax.Array, impl: str | None, sharding: NamedSharding | None = None
) -> jax.Array:
    """Causal GQA. q: [B, T, H, hd]; k, v: [B, T, KV, hd] -> [B, T, H, hd].

    sharding: where the residual stream [B, T, D] lives (its mesh and batch axes); splash runs
    under shard_map over them. None: one device, or already inside a shard_map.
    """
    if impl == "splash":
        return splash_attention(q, k, v, sharding)
    if impl in ("cudnn", "xla"):
        return jax.nn.dot_product_attention(
            q, k, v, is_causal=True, implementation="cudnn" if impl == "cudnn" else "xla"
        )
    if impl not in (None, "einsum"):
        raise AttentionConfigError(f"attention_impl={impl!r} is not one of {IMPLS}")
    return einsum_attention(q, k, v)


def einsum_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    b, t, h, hd = q.shape
    kv = k.shape[2]
    qg = q.reshape(b, t, kv, h // kv, hd)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, k).astype(jnp.float32) / math.sqrt(hd)
    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    scores = jnp.where(causal, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
    return out.reshape(b, t, h, hd)


def _block_size(seq_len: int) -> int:
    for block in SPLASH_BLOCKS:
        if seq_len % block == 0:
            return block
    check_attention("splash", seq_len=seq_len, num_heads=1, num_kv_heads=1)
    raise AssertionError("unreachable")


def _splash_local(q: jax.Array, k: jax.Array, v: jax.Array, *, interpret: bool) -> jax.Array:
    """The kernel on one device's arrays, heads-major: q [B, H, T, hd], k, v [B, KV, T, hd]."""
    _, h, t, _ = q.shape
    block = _block_size(t)
    sizes = splash.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )
    mask = splash.MultiHeadMask([splash.CausalMask((t, t)) for _ in range(h)])
    kernel = splash.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1, interpret=interpret)
    return jax.vmap(kernel)(q, k, v)


def _splash_any_platform(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    return jax.lax.platform_dependent(
        q,
        k,
        v,
        tpu=functools.partial(_splash_local, interpret=False),
        default=functools.partial(_splash_local, interpret=True),
    )


def _head_axis(sharding: NamedSharding, num_heads: int, num_kv_heads: int) -> str | None:
    size = dict(sharding.mesh.shape).get("model", 1)
    if size > 1 and num_heads % size == 0 and num_kv_heads % size == 0:
        return "model"
    return None


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, sharding: NamedSharding | None = None) -> jax.Array:
    """The Splash kernel on [B, T, heads, hd] arrays (see the module docstring)."""
    b, t, h, hd = q.shape
    check_attention("splash", seq_len=t, num_heads=h, num_kv_heads=k.shape[2])
    # Heads-major for the kernel; the softmax scale goes on q (the kernel applies none).
    qh = (q * jnp.asarray(1.0 / math.sqrt(hd), q.dtype)).transpose(0, 2, 1, 3)
    kh, vh = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    fn: Any = _splash_any_platform
    if sharding is not None and sharding.mesh.size > 1:
        batch_axes = sharding.spec[0]
        names = batch_axes if isinstance(batch_axes, tuple) else (batch_axes,)
        ways = math.prod(sharding.mesh.shape[n] for n in names if n is not None)
        if b % ways:  # a microbatch smaller than the batch axes: those sequences stay whole
            batch_axes = None
        spec = P(batch_axes, _head_axis(sharding, h, k.shape[2]), None, None)
        fn = jax.shard_map(fn, mesh=sharding.mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)
    return fn(qh, kh, vh).transpose(0, 2, 1, 3)
