"""Scaled tensors (Scalify, Graphcore, ICML 2024): low-precision data times an fp32 power-of-two scale.

A `ScaledArray` stands for `data * scale`. Scales are always powers of two, so moving a factor
between data and scale is exact (it changes only the exponent), and the ops below propagate
scales the way Scalify does, so that the data stays near unit magnitude whatever the value's
range:

    x * 2^k             data unchanged, scale * 2^k
    dot(a, b) over K    scale = s_a * s_b * pow2(sqrt(K)); data = dot(data_a, data_b) / pow2(sqrt(K))
    a + b               scale = pow2(sqrt(s_a^2 + s_b^2)); each data rescaled by its s / scale
    sum over n values   scale * pow2(sqrt(n)); data = sum / pow2(sqrt(n))
    cast                data converted, scale unchanged (never rescales)

Nothing rescales implicitly: `dynamic_rescale_max` / `dynamic_rescale_l2` are the explicit points
where the data is renormalised from its own statistics, and `quantize` is one followed by a cast
into a narrow format (float8, float16) with saturation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class ScaledArray:
    """The value `data * scale`: `data` in any float dtype, `scale` an fp32 power of two."""

    data: jax.Array
    scale: jax.Array

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> Any:
        return self.data.dtype

    def to_array(self, dtype: Any = F32) -> jax.Array:
        """The unscaled value, computed in fp32 and returned in `dtype`."""
        return (self.data.astype(F32) * self.scale).astype(dtype)


jax.tree_util.register_dataclass(ScaledArray, data_fields=["data", "scale"], meta_fields=[])


def pow2_round_down(x: jax.Array) -> jax.Array:
    """The largest power of two <= x (x > 0), exactly; 1 for x <= 0 or non-finite x."""
    x = jnp.asarray(x, F32)
    ok = jnp.isfinite(x) & (x > 0)
    mantissa, exponent = jnp.frexp(jnp.where(ok, x, 1.0))  # x = m * 2^e, m in [0.5, 1)
    del mantissa
    return jnp.where(ok, jnp.ldexp(jnp.ones_like(x), exponent - 1), 1.0)


def fit_scale(amax: jax.Array, limit: float) -> jax.Array:
    """The smallest power of two s with amax / s <= limit (1 when amax is 0): data = value / s fits."""
    amax = jnp.asarray(amax, F32)
    # amax / s <= limit  <=>  s >= amax / limit; take the power of two at or above amax / limit.
    ratio = amax / limit
    s = pow2_round_down(ratio)
    s = jnp.where(s < ratio, s * 2.0, s)
    tiny = jnp.finfo(F32).smallest_normal
    return jnp.where(amax > 0, jnp.maximum(s, tiny), 1.0)


def as_scaled(x: jax.Array) -> ScaledArray:
    """x as a scaled array with scale 1 (no rescaling)."""
    return ScaledArray(jnp.asarray(x), jnp.ones((), F32))


def mul_pow2(a: ScaledArray, exponent: int) -> ScaledArray:
    """a * 2^exponent: only the scale changes."""
    return ScaledArray(a.data, a.scale * (2.0**exponent))


def cast(a: ScaledArray, dtype: Any) -> ScaledArray:
    """The data in another dtype; the scale is unchanged (casting never rescales)."""
    return ScaledArray(a.data.astype(dtype), a.scale)


def scaled_dot(a: ScaledArray, b: ScaledArray) -> ScaledArray:
    """a [..., K] @ b [K, N]: the data dotted (fp32 accumulation), scales multiplied by pow2(sqrt(K))."""
    k = a.shape[-1]
    grow = float(2.0 ** math.floor(math.log2(math.sqrt(k))))
    data = jnp.matmul(a.data, b.data, preferred_element_type=F32) / grow
    return ScaledArray(data.astype(jnp.result_type(a.dtype, b.dtype)), a.scale * b.scale * grow)


def scaled_add(a: ScaledArray, b: ScaledArray) -> ScaledArray:
    """a + b with scale pow2(sqrt(s_a^2 + s_b^2)); both data rescaled by exact powers of two."""
    scale = pow2_round_down(jnp.sqrt(a.scale * a.scale + b.scale * b.scale))
    dtype = jnp.result_type(a.dtype, b.dtype)
    data = a.data.astype(F32) * (a.scale / scale) + b.data.astype(F32) * (b.scale / scale)
    return ScaledArray(data.astype(dtype), scale)


def scaled_sum(a: ScaledArray, axis: int | tuple[int, ...] | None = None) -> ScaledArray:
    """The sum over `axis` with the scale grown by pow2(sqrt(n)), n the number of values summed."""
    axes = range(a.data.ndim) if axis is None else ((axis,) if isinstance(axis, int) else axis)
    n = math.prod(a.shape[i] for i in axes)
    grow = float(2.0 ** math.floor(math.log2(math.sqrt(max(n, 1)))))
    data = jnp.sum(a.data.astype(F32), axis=axis) / grow
    return ScaledArray(data.astype(a.dtype), a.scale * grow)


def _renormalise(a: ScaledArray, stat: jax.Array) -> ScaledArray:
    s = pow2_round_down(stat)
    return ScaledArray((a.data.astype(F32) / s).astype(a.dtype), a.scale * s)


def dynamic_rescale_max(a: ScaledArray) -> ScaledArray:
    """Move pow2(max |data|) from the data into the scale (the value is unchanged, exactly)."""
    return _renormalise(a, jnp.max(jnp.abs(a.data.astype(F32))))


def dynamic_rescale_l2(a: ScaledArray) -> ScaledArray:
    """Move pow2(rms of data) from the data into the scale (the value is unchanged, exactly)."""
    data = a.data.astype(F32)
    return _renormalise(a, jnp.sqrt(jnp.mean(data * data)))


def quantize(x: jax.Array, dtype: Any, amax: jax.Array | None = None) -> ScaledArray:
    """x as `dtype` data (float8, float16, ...) with a per-tensor power-of-two scale.

    The scale maps `amax` (by default max |x|, the "current" scaling; a delayed recipe passes the
    amax of earlier steps) to at most the format's largest finite value; anything beyond is
    saturated to it, never turned into inf or NaN.
    """
    limit = float(jnp.finfo(dtype).max)
    x32 = jnp.asarray(x).astype(F32)
    amax = jnp.max(jnp.abs(x32)) if amax is None else jnp.asarray(amax, F32)
    scale = fit_scale(amax, limit)
    data = jnp.clip(x32 / scale, -limit, limit).astype(dtype)
    return ScaledArray(data, scale)


def dequantize(a: ScaledArray, dtype: Any = F32) -> jax.Array:
    """The value of a quantized array in `dtype` (upcast, then times the scale)."""
    return a.data.astype(dtype) * a.scale.astype(dtype)
