"""4-bit NormalFloat (NF4) weights with double quantization, as in QLoRA (Dettmers et al., 2023).

NF4 has 16 levels placed at quantiles of N(0, 1), normalised to [-1, 1], with 0 exactly
representable. A weight matrix is cut into blocks of `block_size` (64) consecutive weights; each
block is divided by its absolute maximum ("absmax") and every weight is replaced by the index of
the nearest level, two indices per byte. Double quantization stores the absmax constants
themselves in 8 bits: their mean is subtracted, and groups of 256 are scaled by their own absmax
and mapped onto an 8-bit dynamic (exponent + linear fraction) float code, leaving one fp32 scale
per group. Overhead per weight: 8/64 + 32/(64*256) ~ 0.127 bit instead of 32/64 = 0.5 bit.

Layout (chosen to match bitsandbytes and Hugging Face checkpoints, which tests use as an oracle):
the model multiplies `x [.., in] @ w [in, out]`, but blocks run over the transposed matrix
`w.T [out, in]` in row-major order, i.e. along the input dimension, as torch's `Linear.weight`
is stored. Leading axes (the stacked `layers` axis) are quantized matrix by matrix, so
`jax.lax.scan` can slice an `NF4Tensor` leaf by leaf like any other parameter.

    packed         uint8   [*lead, blocks, block_size // 2]   level indices, first one in the high nibble
    absmax         float32 [*lead, blocks]                    (double_quant=False)
                   uint8   [*lead, blocks]                    dynamic-code indices (double_quant=True)
    absmax_scale   float32 [*lead, groups]                    one per 256 absmax values (double quant)
    absmax_offset  float32 [*lead]                            the subtracted mean (double quant)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from marin_lab.quant.errors import QuantizationError

DOUBLE_QUANT_GROUP = 256
"""Absmax constants per second-level block (QLoRA's choice)."""

# The 16 NF4 levels as listed in the QLoRA paper (appendix E); `normal_float_code()` derives them.
NF4_CODE = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=np.float32,
)


def normal_float_code(bits: int = 4) -> np.ndarray:
    """The NormalFloat levels from their definition: quantiles of N(0, 1), normalised to [-1, 1].

    An asymmetric construction gives zero an exact level: 2^(k-1) quantiles for the positive half
    and 2^(k-1) - 1 for the negative half, each half ending at the probability
    delta = 1/2 (1/(2*16) + 1/(2*15)) from the tail (for k = 4), then joined at 0.
    """
    from scipy.stats import norm

    n = 2**bits
    tail = 1.0 - 0.5 * (1.0 / (2 * n) + 1.0 / (2 * (n - 1)))
    positive = norm.ppf(np.linspace(tail, 0.5, n // 2 + 1, dtype=np.float32)[:-1].astype(np.float64))
    negative = -norm.ppf(np.linspace(tail, 0.5, n // 2, dtype=np.float32)[:-1].astype(np.float64))
    levels = np.sort(np.concatenate([positive, [0.0], negative]))
    return (levels / levels.max()).astype(np.float32)


def dynamic_code() -> np.ndarray:
    """The signed 8-bit dynamic code (Dettmers, 2015) used for the second quantization level.

    Each value is sign x 10^-e x f: the exponent e (0..6) is a run of zero bits, and the bits left
    after it hold a linear fraction f in [0.1, 1] (more fraction bits for larger magnitudes). With
    0 and 1 that makes 256 sorted levels, dense near +-1 where scaled absmax values sit.
    """
    values = [0.0, 1.0]
    for i in range(7):
        edges = np.linspace(0.1, 1.0, 2**i + 1, dtype=np.float32)
        middles = (edges[:-1] + edges[1:]) / np.float32(2)
        magnitude = np.float32(10.0 ** (i - 6)) * middles  # float32 products, as bitsandbytes
        values += list(magnitude) + list(-magnitude)
    return np.sort(np.asarray(values, dtype=np.float32))


DYNAMIC_CODE = dynamic_code()


def _nearest(scaled: jax.Array, code: np.ndarray) -> jax.Array:
    """Index of the nearest level of a sorted code (a value on a midpoint goes to the lower level)."""
    midpoints = jnp.asarray((code[:-1] + code[1:]) / 2, jnp.float32)
    return jnp.searchsorted(midpoints, scaled, side="left").astype(jnp.uint8)


def _blockwise(values: jax.Array, block: int, code: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """(indices, absmax) of `values [..., n]` quantized in blocks of `block` onto `code`."""
    blocks = values.reshape(*values.shape[:-1], values.shape[-1] // block, block).astype(jnp.float32)
    absmax = jnp.max(jnp.abs(blocks), axis=-1)
    # Multiply by the reciprocal (as bitsandbytes does) so levels match it bit for bit.
    scaled = jnp.clip(blocks * (1.0 / jnp.maximum(absmax, 1e-38))[..., None], -1.0, 1.0)
    return _nearest(scaled, code), absmax


@dataclasses.dataclass(frozen=True)
class NF4Tensor:
    """A frozen weight `[*lead, in, out]` stored as NF4 blocks; `.linear(x)` multiplies by it."""

    packed: jax.Array
    absmax: jax.Array
    absmax_scale: jax.Array | None
    absmax_offset: jax.Array | None
    shape: tuple[int, int]
    """Static: (in, out) of one matrix, as the model multiplies it."""
    block_size: int
    """Static: weights per first-level block."""

    @property
    def double_quant(self) -> bool:
        return self.absmax_scale is not None

    @property
    def lead_shape(self) -> tuple[int, ...]:
        return tuple(self.packed.shape[:-2])

    @property
    def num_blocks(self) -> int:
        return int(self.packed.shape[-2])

    def block_absmax(self) -> jax.Array:
        """The first-level absmax constants, float32 [*lead, blocks] (second level undone)."""
        scale, offset = self.absmax_scale, self.absmax_offset
        if scale is None:
            return self.absmax.astype(jnp.float32)
        if offset is None:
            raise QuantizationError("an NF4Tensor with absmax_scale needs absmax_offset too (quantize_nf4 sets both)")
        n = self.num_blocks
        groups = scale.shape[-1]
        codes = jnp.asarray(DYNAMIC_CODE)[self.absmax.astype(jnp.int32)]
        pad = groups * DOUBLE_QUANT_GROUP - n
        codes = jnp.pad(codes, [(0, 0)] * (codes.ndim - 1) + [(0, pad)])
        grouped = codes.reshape(*codes.shape[:-1], groups, DOUBLE_QUANT_GROUP)
        values = (grouped * scale[..., None]).reshape(*codes.shape[:-1], -1)[..., :n]
        # Compiled, XLA may contract this multiply-add into one FMA: a jitted dequantization and
        # an eager one can differ in the last bit (compiled programs agree with each other).
        return values + offset[..., None]

    def dequantize(self, dtype: Any = jnp.float32) -> jax.Array:
        """The weight `[*lead, in, out]` in `dtype` (computed in float32)."""
        hi = (self.packed >> 4).astype(jnp.int32)
        lo = (self.packed & 0xF).astype(jnp.int32)
        idx = jnp.stack([hi, lo], axis=-1).reshape(*self.packed.shape[:-1], self.block_size)
        values = jnp.asarray(NF4_CODE)[idx] * self.block_absmax()[..., None]
        d_in, d_out = self.shape
        transposed = values.reshape(*self.lead_shape, d_out, d_in)
        return jnp.swapaxes(transposed, -1, -2).astype(dtype)

    def linear(self, x: jax.Array) -> jax.Array:
        """x [..., in] @ w: the base gets no gradient, and backward re-dequantizes (see matmul)."""
        from marin_lab.quant.matmul import nf4_matmul

        return nf4_matmul(x, self)

    @property
    def nbytes(self) -> int:
        return sum(int(leaf.size) * jnp.dtype(leaf.dtype).itemsize for leaf in jax.tree_util.tree_leaves(self))


jax.tree_util.register_dataclass(
    NF4Tensor,
    data_fields=["packed", "absmax", "absmax_scale", "absmax_offset"],
    meta_fields=["shape", "block_size"],
)


def check_block_size(shape: tuple[int, ...], block_size: int, name: str = "weight") -> None:
    """Raise QuantizationError naming `name` unless whole blocks tile each `[in, out]` matrix."""
    if block_size < 2 or block_size % 2:
        raise QuantizationError(f"quant.block_size={block_size} must be an even number >= 2 (two levels per byte)")
    if len(shape) < 2:
        raise QuantizationError(f"{name}: shape {tuple(shape)} is not a matrix; only linear layers are quantized")
    per_matrix = shape[-1] * shape[-2]
    if per_matrix % block_size:
        raise QuantizationError(
            f"{name}: quant.block_size={block_size} does not divide its {shape[-2]}x{shape[-1]} = "
            f"{per_matrix} weights per matrix; choose a block size that divides in*out (64 divides "
            "every Llama shape)"
        )


def quantize_nf4(w: jax.Array, block_size: int = 64, double_quant: bool = True, *, name: str = "weight") -> NF4Tensor:
    """Quantize `w [*lead, in, out]` to NF4 (see the module docstring for the layout)."""
    w = jnp.asarray(w)
    check_block_size(w.shape, block_size, name)
    *lead, d_in, d_out = w.shape
    rows = jnp.swapaxes(w, -1, -2).reshape(*lead, d_in * d_out)
    idx, absmax = _blockwise(rows, block_size, NF4_CODE)
    packed = (idx[..., 0::2] << 4) | idx[..., 1::2]
    scale = offset = None
    if double_quant:
        n = absmax.shape[-1]
        groups = math.ceil(n / DOUBLE_QUANT_GROUP)
        offset = jnp.mean(absmax, axis=-1)
        centred = absmax - offset[..., None]
        # Zero padding never changes a group's absmax; the padded codes are dropped again.
        centred = jnp.pad(centred, [(0, 0)] * len(lead) + [(0, groups * DOUBLE_QUANT_GROUP - n)])
        codes, scale = _blockwise(centred, DOUBLE_QUANT_GROUP, DYNAMIC_CODE)
        absmax = codes.reshape(*lead, -1)[..., :n]
    return NF4Tensor(
        packed=packed,
        absmax=absmax,
        absmax_scale=scale,
        absmax_offset=offset,
        shape=(int(d_in), int(d_out)),
        block_size=int(block_size),
    )


def dequantize_nf4(q: NF4Tensor, dtype: Any = jnp.float32) -> jax.Array:
    """The weight `[*lead, in, out]` that `q` stands for."""
    return q.dequantize(dtype)


def is_nf4(x: Any) -> bool:
    return isinstance(x, NF4Tensor)
