"""Float8 matmuls with per-tensor power-of-two scales: e4m3 forward, e5m2 gradients ("hybrid").

`fp8_matmul(x, w)` quantizes both operands to float8_e4m3fn with scales from their current
amax, multiplies them with fp32 accumulation, and returns the result in x's dtype. Its custom VJP
keeps only the float8 operands (and their scales) for the backward pass, quantizes the incoming
gradient to float8_e5m2 (wider range, less precision: gradients need range), and computes

    dx = g @ w.T   (in x's dtype)        dw = x.T @ g   (in w's dtype: fp32 for fp32 masters)

from those float8 tensors. The operands are dequantized ("upcast to fp32, times scale") right
before each 2-D dot: on Hopper GPUs XLA rewrites exactly this pattern into a cuBLASLt FP8 GEMM
when its Triton GEMMs are off (XLA_FLAGS=--xla_gpu_enable_triton_gemm=false; docs/benchmarks.md
shows the custom calls in the compiled HLO, forward and both gradient GEMMs); on CPU it runs
emulated, with the same numerics (every float8 value times a power of two is exact in fp32).

Delayed scaling and statistics. An `Fp8Meta` passed as a third argument carries, per matmul, an
amax history [3, H] (rows: x, w, g) and a placeholder for statistics. With a history, each
tensor is scaled by the largest amax of the previous H steps (the current amax only while the
history is still empty), so values above it saturate, as on hardware where the scale must be
known before the tensor is. The *cotangent* of the meta argument is not a gradient: it is the
history shifted by one with this step's amaxes in front, and this step's statistics (amax,
values saturated, values flushed to zero, per tensor). The trainer differentiates with respect
to the meta and keeps that cotangent as the new state: the same "overwrite with gradient" trick
Flax and Praxis use, which carries the state through `lax.scan`, remat and microbatching with no
side channel.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from marin_lab.precision.scaled import F32, ScaledArray, quantize

E4M3 = jnp.float8_e4m3fn
E5M2 = jnp.float8_e5m2

# Layout of the statistics vector of one matmul (the cotangent of Fp8Meta.stats).
STAT_NAMES = (
    "amax_x",
    "amax_w",
    "amax_g",
    "saturated_x",
    "saturated_w",
    "saturated_g",
    "flushed_x",
    "flushed_w",
    "flushed_g",
    "count_x",
    "count_w",
    "count_g",
)
NUM_STATS = len(STAT_NAMES)
AMAX_SLICE = slice(0, 3)  # combined across microbatches by max; every other entry is a count (sum)


@dataclasses.dataclass(frozen=True)
class Fp8Meta:
    """Per-matmul state: an amax history [3, H] (None: current scaling) and a stats placeholder."""

    history: jax.Array | None
    stats: jax.Array


jax.tree_util.register_dataclass(Fp8Meta, data_fields=["history", "stats"], meta_fields=[])


def empty_meta(history_len: int | None) -> Fp8Meta:
    """Meta of one matmul: a zero history of `history_len` steps (None: current scaling)."""
    history = None if history_len is None else jnp.zeros((3, history_len), F32)
    return Fp8Meta(history, jnp.zeros((NUM_STATS,), F32))


def _scale_amax(current: jax.Array, history: jax.Array | None) -> jax.Array:
    """The amax a tensor is scaled by: the history's largest, or the current one while it is empty."""
    if history is None:
        return current
    past = jnp.max(history)
    return jnp.where(past > 0, past, current)


def _quantize_stats(
    x: jax.Array, dtype: Any, history: jax.Array | None
) -> tuple[ScaledArray, jax.Array, jax.Array, jax.Array]:
    """(quantized x, current amax, values saturated, values flushed to zero)."""
    x32 = x.astype(F32)
    amax = jnp.max(jnp.abs(x32))
    q = quantize(x32, dtype, amax=_scale_amax(amax, history))
    limit = float(jnp.finfo(dtype).max)
    saturated = jnp.sum(jnp.abs(x32) > limit * q.scale, dtype=F32)
    flushed = jnp.sum((x32 != 0) & (q.data.astype(F32) == 0), dtype=F32)
    return q, amax, saturated, flushed


def _dot_dtype(x_dtype: Any) -> Any:
    # fp32 holds every float8 value times a power-of-two scale exactly. On an H100 (jax 0.11.2,
    # Triton GEMMs off) XLA rewrote "f8 -> f32, times scale, dot" into cuBLASLt FP8 GEMMs in a
    # whole 1B train step, forward and backward; bf16 dequantization was not tried in that step.
    del x_dtype
    return F32


def _dequantize(q: ScaledArray, dt: Any) -> jax.Array:
    """Exactly XLA's FP8 GEMM pattern: convert(f8) times a broadcast scalar scale.

    The barrier keeps the float8 tensor a real one: without it XLA's excess-precision
    simplification folds "f32 -> f8 -> f32" into nothing on GPU, which both skips the float8
    rounding and leaves no float8 operand for the FP8 GEMM rewrite to find.
    """
    return jax.lax.optimization_barrier(q.data).astype(dt) * q.scale.astype(dt)


def _dot2d(a: jax.Array, b: jax.Array) -> jax.Array:
    """a [..., K] @ b [K, N] in fp32, as one 2-D dot: cuBLASLt FP8 GEMMs (XLA's rewrite) take
    operands with exactly one contracting and one non-contracting dimension, so the leading
    dimensions are folded into rows (a reshape, which the rewrite moves before the dequantize)."""
    out = jnp.matmul(a.reshape(-1, a.shape[-1]), b, preferred_element_type=F32)
    return out.reshape(*a.shape[:-1], b.shape[-1])


def _forward(x: jax.Array, w: jax.Array, meta: Fp8Meta | None) -> tuple[jax.Array, tuple]:
    hist = None if meta is None or meta.history is None else meta.history
    xq, amax_x, sat_x, ftz_x = _quantize_stats(x, E4M3, None if hist is None else hist[0])
    wq, amax_w, sat_w, ftz_w = _quantize_stats(w, E4M3, None if hist is None else hist[1])
    dt = _dot_dtype(x.dtype)
    y = _dot2d(_dequantize(xq, dt), _dequantize(wq, dt)).astype(x.dtype)
    fwd_stats = jnp.stack([amax_x, amax_w, sat_x, sat_w, ftz_x, ftz_w])
    # Zero-size markers carry the operands' dtypes into the backward pass (dtypes are not arrays).
    markers = (jnp.zeros((0,), x.dtype), jnp.zeros((0,), w.dtype))
    return y, (xq, wq, meta, fwd_stats, markers)


def _backward(res: tuple, g: jax.Array) -> tuple[jax.Array, jax.Array, Fp8Meta | None]:
    xq, wq, meta, fwd_stats, (x_marker, w_marker) = res
    hist = None if meta is None or meta.history is None else meta.history
    gq, amax_g, sat_g, ftz_g = _quantize_stats(g, E5M2, None if hist is None else hist[2])
    dt = _dot_dtype(x_marker.dtype)
    g_deq, x_deq, w_deq = _dequantize(gq, dt), _dequantize(xq, dt), _dequantize(wq, dt)
    dx = _dot2d(g_deq, w_deq.T).astype(x_marker.dtype)
    k_in, n_out = wq.shape
    dw = _dot2d(x_deq.reshape(-1, k_in).T, g_deq.reshape(-1, n_out)).astype(w_marker.dtype)
    if meta is None:
        return dx, dw, None
    amax_x, amax_w, sat_x, sat_w, ftz_x, ftz_w = (fwd_stats[i] for i in range(6))
    counts = [float(xq.data.size), float(wq.data.size), float(gq.data.size)]
    stats = jnp.stack(
        [amax_x, amax_w, amax_g, sat_x, sat_w, sat_g, ftz_x, ftz_w, ftz_g, *(jnp.asarray(c, F32) for c in counts)]
    )
    new_hist = None
    if hist is not None:
        now = jnp.stack([amax_x, amax_w, amax_g])[:, None]
        new_hist = jnp.concatenate([now, hist[:, :-1]], axis=1)
    return dx, dw, Fp8Meta(new_hist, stats)


@jax.custom_vjp
def _fp8_dot(x: jax.Array, w: jax.Array, meta: Fp8Meta | None) -> jax.Array:
    return _forward(x, w, meta)[0]


_fp8_dot.defvjp(_forward, _backward)


def fp8_matmul(x: jax.Array, w: jax.Array, meta: Fp8Meta | None = None) -> jax.Array:
    """x [..., in] @ w [in, out] with float8 operands; the result (and dx) in x's dtype, dw in w's.

    Without `meta`: current per-tensor scaling. With an `Fp8Meta`: delayed scaling when it holds
    a history, and its cotangent is the updated history and this call's statistics.
    """
    if w.ndim != 2 or x.shape[-1] != w.shape[0]:
        raise ValueError(f"fp8_matmul: x {x.shape} and w {w.shape} do not contract (x [..., in], w [in, out])")
    return _fp8_dot(x, w, meta)


@dataclasses.dataclass(frozen=True)
class Fp8Weight:
    """A weight the model's `linear()` multiplies in float8 (a plain fp32 master underneath)."""

    w: jax.Array
    meta: Fp8Meta | None

    def linear(self, x: jax.Array) -> jax.Array:
        return fp8_matmul(x, self.w, self.meta)


jax.tree_util.register_dataclass(Fp8Weight, data_fields=["w", "meta"], meta_fields=[])


TRITON_GEMM_OFF = "--xla_gpu_enable_triton_gemm=false"
# XLA merges dots that share an operand (q, k, v) into one GEMM that is not rewritten to FP8.
DOT_MERGER_OFF = "--xla_disable_hlo_passes=dot-merger"


def gpu_flags_warning(backend: str, xla_flags: str) -> str | None:
    """Why the float8 matmuls would not become FP8 GEMMs on this GPU process, or None.

    Measured on an H100 (jax 0.11.2, docs/benchmarks.md): with XLA's Triton GEMMs enabled (the
    default) the dequantized fp32 dots stay fp32 GEMMs and a 1B step runs at 0.58x of bf16; with
    them disabled XLA emits `__cublas$lt$matmul$f8` for the forward and both gradient matmuls
    (1.04x of bf16 under the same flag; 1.09x with XLA's dot-merger pass also disabled, so that
    q/k/v stay three FP8 GEMMs). XLA reads the flags once, when the backend starts.
    """
    if backend != "gpu" or TRITON_GEMM_OFF in xla_flags.split():
        return None
    return (
        f"float8 matmuls on GPU become cuBLASLt FP8 GEMMs only with XLA_FLAGS={TRITON_GEMM_OFF} "
        "set before JAX starts; without it they run as fp32 GEMMs (0.58x of bf16 measured on H100). "
        f"Adding {DOT_MERGER_OFF} keeps q/k/v as separate FP8 GEMMs (1.09x of bf16 at 1B on H100)"
    )


def backend_error() -> str | None:
    """None when this process's backend compiles a float8 matmul and its gradient; else why not."""
    x = jax.ShapeDtypeStruct((8, 16), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((16, 8), F32)

    def loss(x: jax.Array, w: jax.Array) -> jax.Array:
        return jnp.sum(fp8_matmul(x, w).astype(F32))

    try:
        jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, w).compile()
    except Exception as err:  # noqa: BLE001 - any lowering failure means "cannot run it here"
        text = str(err).strip()
        return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"
    return None
