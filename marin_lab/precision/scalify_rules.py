"""Scale-propagation rules of the Scalify interpreter, one per JAX primitive (first-order ops).

Each rule takes the equation and its inputs, where an input is either a `ScaledArray` (the value
`data * scale`, scale an fp32 power of two, 0 for an exact zero) or a plain array, and returns
the outputs in the same representation. The rules follow Scalify (Graphcore, 2024):

    linear in its input (reshape, transpose, slice, gather, pad, neg, convert, ...)
        the data goes through the op, the scale is kept
    x * y, x / y        data * data, scale * scale (or /); a plain scalar's power of two joins the scale
    x + y               scale pow2(sqrt(s_x^2 + s_y^2)), both data rescaled exactly to it
    select, concat, max the largest scale, the other data rescaled exactly to it
    dot over K values   s_x * s_y * pow2(sqrt K), data divided by it (unit-variance inputs stay unit)
    sum over n values   scale * pow2(sqrt n)
    sqrt, rsqrt, x^n    the scale's exponent halved / negated / multiplied
    exp, log, tanh, ... nonlinear: computed on the value in fp32, result scale 1
    cast to float8      the data saturated to the format's range and cast; the scale is kept. No
                        reduction: the scale was propagated, not measured.

Rules only run when an input is scaled; ops on plain inputs run as they are. An op with a scaled
input and no rule here is an error (`scalify.py` names the op and where it sits in the model).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from marin_lab.precision.scaled import F32, ScaledArray, dynamic_rescale_l2, pow2_round_down

Rule = Callable[[Any, Sequence[Any]], list[Any]]
FLOAT8 = (jnp.dtype(jnp.float8_e4m3fn), jnp.dtype(jnp.float8_e5m2))


def is_scaled(x: Any) -> bool:
    return isinstance(x, ScaledArray)


def stacked_scale(x: ScaledArray) -> jax.Array:
    """x's scale shaped to broadcast against its data (a per-layer [L] scale along axis 0)."""
    if x.scale.ndim == 0:
        return x.scale
    return x.scale.reshape(x.scale.shape + (1,) * (x.data.ndim - x.scale.ndim))


def unscale(x: Any) -> jax.Array:
    """The value of x in fp32 (plain arrays converted)."""
    if is_scaled(x):
        return x.data.astype(F32) * stacked_scale(x)
    return jnp.asarray(x).astype(F32) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating) else jnp.asarray(x)


def ratio(a: jax.Array, b: jax.Array) -> jax.Array:
    """a / b for powers of two (exact), 0 where b is 0 (a zero value's scale)."""
    return jnp.where(b > 0, a / jnp.where(b > 0, b, 1.0), 0.0)


def single_scale(x: Any) -> Any:
    """x with one scalar scale: a per-layer [L] scale is folded into the data (the largest kept)."""
    if not is_scaled(x) or x.scale.ndim == 0:
        return x
    top = jnp.max(x.scale)
    data = x.data.astype(F32) * stacked_scale(ScaledArray(x.data, ratio(x.scale, top)))
    return ScaledArray(data.astype(x.dtype), top)


def _out_dtype(eqn: Any, i: int = 0) -> Any:
    return eqn.outvars[i].aval.dtype


def _scaled(data: jax.Array, scale: jax.Array, dtype: Any) -> ScaledArray:
    return ScaledArray(data.astype(dtype), jnp.asarray(scale, F32))


def _in_scale(value: jax.Array, scale: jax.Array) -> jax.Array:
    """A plain value expressed as data of the given scale (fp32)."""
    return ratio(unscale(value), scale) if not is_scaled(value) else value


def common(values: Sequence[Any]) -> tuple[list[jax.Array], jax.Array]:
    """(fp32 data of every value at one shared scale, that scale): the largest of the scales."""
    vals = [single_scale(v) for v in values]
    scales = [v.scale for v in vals if is_scaled(v)]
    scale = scales[0]
    for s in scales[1:]:
        scale = jnp.maximum(scale, s)
    out = []
    for v in vals:
        if is_scaled(v):
            out.append(v.data.astype(F32) * ratio(v.scale, scale))
        else:
            out.append(_in_scale(v, scale))
    return out, scale


def _bind(eqn: Any, args: Sequence[Any]) -> Any:
    return eqn.primitive.bind(*args, **eqn.params)


# ---- ops linear in one operand: the data goes through, the scale stays ----


def on_data(eqn: Any, invals: Sequence[Any], operand: int = 0) -> list[Any]:
    x = single_scale(invals[operand])
    if any(is_scaled(v) for i, v in enumerate(invals) if i != operand):
        raise TypeError(f"operand {operand} is the only one that may be scaled")
    args = list(invals)
    args[operand] = x.data
    out = _bind(eqn, args)
    outs = out if eqn.primitive.multiple_results else [out]
    return [_scaled(o, x.scale, o.dtype) for o in outs]


def convert(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    (x,) = invals
    new = jnp.dtype(eqn.params["new_dtype"])
    if not jnp.issubdtype(new, jnp.floating):
        return [unscale(x).astype(new)]
    if new == jnp.float16 and jnp.finfo(x.data.dtype).bits > 16:
        # A rescale point: narrowing wider data to float16 is where range is lost. Between two
        # rescale points float32 arithmetic (a norm's statistics and their gradient) can leave rows
        # far from the scale the rules predicted (the gradient of an RMSNorm's input is 1/rms per
        # row); layer 0's gradient overflowed float16 that way on the quickstart model. The data's
        # measured RMS moves into the scale first (a power of two: exact). It is a sum of squares,
        # not an amax, and it is taken on the way to float16, not to float8.
        x = dynamic_rescale_l2(x)
    data = x.data
    if new in FLOAT8:
        # The float8 matmul operand: a cast of the data, saturated (float8_e4m3fn has no inf; an
        # unsaturated overflow would be NaN). No amax: the propagated scale already put it near 1.
        limit = float(jnp.finfo(new).max)
        data = jnp.clip(data.astype(F32), -limit, limit)
    return [ScaledArray(data.astype(new), x.scale)]


def neg(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    (x,) = invals
    return [ScaledArray(-x.data, x.scale)]


def abs_(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    (x,) = invals
    return [ScaledArray(jnp.abs(x.data), x.scale)]


def identity(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    return [invals[0]]


def pad(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    x, value = single_scale(invals[0]), invals[1]
    fill = _in_scale(value, x.scale).astype(x.dtype)
    return [ScaledArray(_bind(eqn, [x.data, fill]), x.scale)]


# ---- ops that mix operands at one scale ----


def _mixed(eqn: Any, invals: Sequence[Any], which: Sequence[int]) -> list[Any]:
    """Bind with the operands at positions `which` brought to one scale (the others plain)."""
    data, scale = common([invals[i] for i in which])
    args = list(invals)
    for i, d in zip(which, data, strict=True):
        args[i] = d.astype(eqn.invars[i].aval.dtype)
    out = _bind(eqn, args)
    outs = out if eqn.primitive.multiple_results else [out]
    return [_scaled(o, scale, o.dtype) for o in outs]


def select_n(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    if is_scaled(invals[0]):
        raise TypeError("the predicate of select_n is scaled")
    return _mixed(eqn, invals, range(1, len(invals)))


def all_operands(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    return _mixed(eqn, invals, range(len(invals)))


def compare(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    data, _ = common(invals)
    return [_bind(eqn, data)]


def dynamic_update_slice(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    return _mixed(eqn, invals, (0, 1))


def scatter_add(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    return _mixed(eqn, invals, (0, 2))  # (operand, indices, updates)


def clamp(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    return _mixed(eqn, invals, (0, 1, 2))


# ---- arithmetic ----


def add(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    a, b = (single_scale(v) for v in invals)
    sign = -1.0 if eqn.primitive.name == "sub" else 1.0
    dtype = _out_dtype(eqn)
    if not is_scaled(a) or not is_scaled(b):
        # A plain operand (a constant, an epsilon, instantiated zeros) joins at the scaled one's scale.
        x, p = (a, b) if is_scaled(a) else (b, a)
        pd = _in_scale(p, x.scale)
        data = x.data.astype(F32) + sign * pd if x is a else pd + sign * x.data.astype(F32)
        return [_scaled(data, x.scale, dtype)]
    scale = pow2_round_down(jnp.sqrt(a.scale * a.scale + b.scale * b.scale))
    scale = jnp.where((a.scale > 0) | (b.scale > 0), scale, 0.0)
    data = a.data.astype(F32) * ratio(a.scale, scale) + sign * b.data.astype(F32) * ratio(b.scale, scale)
    return [_scaled(data, scale, dtype)]


def _scalar_pow2(p: Any) -> tuple[jax.Array, jax.Array]:
    """(p / pow2(|p|), pow2(|p|)) for a plain scalar: its exponent can move into a scale exactly."""
    p = jnp.asarray(p, F32)
    e = pow2_round_down(jnp.abs(p))
    return p / e, e


def mul(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    a, b = invals
    dtype = _out_dtype(eqn)
    if is_scaled(a) and is_scaled(b):
        a, b = single_scale(a), single_scale(b)
        return [_scaled(a.data.astype(F32) * b.data.astype(F32), a.scale * b.scale, dtype)]
    x, p = (a, b) if is_scaled(a) else (b, a)
    if jnp.ndim(p) == 0:  # keeps a tiny factor such as 1/tokens out of narrow data
        m, e = _scalar_pow2(p)
        return [ScaledArray((x.data.astype(F32) * m).astype(dtype), x.scale * e)]
    x = single_scale(x)
    return [_scaled(x.data.astype(F32) * unscale(p), x.scale, dtype)]


def div(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    a, b = (single_scale(v) for v in invals)
    dtype = _out_dtype(eqn)
    if is_scaled(a) and is_scaled(b):
        return [_scaled(a.data.astype(F32) / b.data.astype(F32), ratio(a.scale, b.scale), dtype)]
    if is_scaled(a):
        if jnp.ndim(b) == 0:
            m, e = _scalar_pow2(b)
            return [_scaled(a.data.astype(F32) / m, a.scale / e, dtype)]
        return [_scaled(a.data.astype(F32) / unscale(b), a.scale, dtype)]
    return [_scaled(unscale(a) / b.data.astype(F32), 1.0 / b.scale, dtype)]


def integer_pow(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    x = single_scale(invals[0])
    y = eqn.params["y"]
    return [_scaled(x.data.astype(F32) ** y, x.scale**y, _out_dtype(eqn))]


def square(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    x = single_scale(invals[0])
    return [_scaled(jnp.square(x.data.astype(F32)), x.scale * x.scale, _out_dtype(eqn))]


def _root(eqn: Any, invals: Sequence[Any], inverse: bool) -> list[Any]:
    """sqrt / rsqrt: the scale's exponent halved; an odd exponent leaves sqrt(2) in the data."""
    x = single_scale(invals[0])
    root = jnp.sqrt(jnp.where(x.scale > 0, x.scale, 1.0))
    new = pow2_round_down(root)
    data = jnp.sqrt(x.data.astype(F32)) * (root / new)
    if inverse:
        return [_scaled(1.0 / data, 1.0 / new, _out_dtype(eqn))]
    return [_scaled(data, jnp.where(x.scale > 0, new, 0.0), _out_dtype(eqn))]


def sqrt(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    return _root(eqn, invals, inverse=False)


def rsqrt(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    return _root(eqn, invals, inverse=True)


def nonlinear(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    """exp, log, logistic, tanh, ...: on the value in fp32; bounded or fresh values get scale 1."""
    out = _bind(eqn, [unscale(v) for v in invals])
    return [ScaledArray(out.astype(_out_dtype(eqn)), jnp.ones((), F32))]


def to_plain(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    """Ops whose result is not a real value to scale (sign, is_finite, argmax): on the values."""
    out = _bind(eqn, [unscale(v) if is_scaled(v) else v for v in invals])
    return list(out) if eqn.primitive.multiple_results else [out]


# ---- contractions and reductions ----


def _grow(n: int) -> float:
    """pow2(sqrt(n)): how much a sum of n unit-variance terms grows, as a power of two."""
    return float(2.0 ** math.floor(math.log2(math.sqrt(max(n, 1)))))


def dot_general(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    a, b = (single_scale(v) if is_scaled(v) else ScaledArray(jnp.asarray(v), jnp.ones((), F32)) for v in invals)
    (contract_a, _), _ = eqn.params["dimension_numbers"]
    grow = _grow(math.prod(a.shape[d] for d in contract_a))
    # fp32 accumulation whatever the operands; the data comes back near unit size. Float8 data is
    # upcast right before the dot ("convert(f8) -> dot" is the pattern XLA turns into an FP8 GEMM on
    # Hopper; CPUs have no float8 dot). The barrier keeps XLA from folding the f32 -> f8 -> f32
    # round trip away, which would skip the float8 rounding.
    da, db = (jax.lax.optimization_barrier(d).astype(F32) if d.dtype in FLOAT8 else d for d in (a.data, b.data))
    params = {**eqn.params, "preferred_element_type": F32}
    out = eqn.primitive.bind(da, db, **params) / grow
    return [_scaled(out, a.scale * b.scale * grow, _out_dtype(eqn))]


def reduce_sum(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    x = single_scale(invals[0])
    grow = _grow(math.prod(x.shape[d] for d in eqn.params["axes"]))
    out = jnp.sum(x.data.astype(F32), axis=tuple(eqn.params["axes"])) / grow
    return [_scaled(out, x.scale * grow, _out_dtype(eqn))]


def reduce_extreme(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    """reduce_max / reduce_min / argmax / argmin: a positive scale does not change the order."""
    x = single_scale(invals[0])
    out = _bind(eqn, [x.data])
    if eqn.primitive.name in ("argmax", "argmin"):
        return [out]
    return [ScaledArray(out, x.scale)]


RULES: dict[str, Rule] = {
    "convert_element_type": convert,
    "neg": neg,
    "abs": abs_,
    "stop_gradient": identity,
    "copy": identity,
    "copy_p": identity,
    "pad": pad,
    "select_n": select_n,
    "concatenate": all_operands,
    "max": all_operands,
    "min": all_operands,
    "clamp": clamp,
    "dynamic_update_slice": dynamic_update_slice,
    "scatter-add": scatter_add,
    "scatter_add": scatter_add,
    "add": add,
    "add_any": add,
    "sub": add,
    "mul": mul,
    "div": div,
    "integer_pow": integer_pow,
    "square": square,
    "sqrt": sqrt,
    "rsqrt": rsqrt,
    "dot_general": dot_general,
    "reduce_sum": reduce_sum,
    "reduce_max": reduce_extreme,
    "reduce_min": reduce_extreme,
    "argmax": reduce_extreme,
    "argmin": reduce_extreme,
}
for _name in (
    "reshape",
    "transpose",
    "broadcast_in_dim",
    "squeeze",
    "expand_dims",
    "slice",
    "rev",
    "gather",
    "dynamic_slice",
    "split",
    "sharding_constraint",
    "reduce_precision",
    "real",
    "name",  # checkpoint_name: the tag stays on the data, so a selective remat policy still sees it
):
    RULES[_name] = on_data
for _name in (
    "exp",
    "exp2",
    "log",
    "log1p",
    "expm1",
    "logistic",
    "tanh",
    "one_minus_square",  # JAX 0.11 differentiates tanh as 1 - tanh(x)^2 with this one primitive
    "sin",
    "cos",
    "tan",
    "erf",
    "erfc",
    "erf_inv",
    "atan",
    "atan2",
    "asin",
    "acos",
    "sinh",
    "cosh",
    "pow",
    "cbrt",
):
    RULES[_name] = nonlinear
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    RULES[_name] = compare
for _name in ("sign", "is_finite", "floor", "ceil", "round", "nextafter"):
    RULES[_name] = to_plain
