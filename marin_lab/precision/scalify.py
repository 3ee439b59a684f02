"""The Scalify interpreter: run a JAX function with scaled tensors, propagating scales op by op.

`scalify(fn)(*args)` traces `fn` to a jaxpr with each `ScaledArray` argument standing for its
data's shape and dtype, then evaluates that jaxpr equation by equation: an equation with a scaled
input runs its rule from `scalify_rules.RULES` (the data through the op, the scale by the op's
propagation rule); one with only plain inputs runs as it is. Applied to `jax.value_and_grad(loss)`,
the forward pass *and* the backward pass (the gradients) flow as scaled tensors, with no change to
the model code. That is why an interpreter and not a model written on `ScaledArray`: the Llama
model, its remat and attention variants stay one piece of code for every precision policy, and
the backward pass, which JAX derives, is covered by the same rules as the forward pass.

Higher-order primitives are interpreted recursively: `jit`/`pjit`, `custom_jvp_call`,
`custom_vjp_call`, `checkpoint` (re-wrapped in `jax.checkpoint` with its policy), and `scan` and
`while`, whose floating carries become scaled tensors. **Dynamic rescale points.** At the end of
every scan iteration each floating carry is renormalised from its own RMS (a power of two moved
from the data into the scale, exactly): for the decoder's layer scan that is a rescale per layer
of the residual stream on the forward pass and of its gradient on the backward pass, where
Scalify places them. The power of two of each layer (log2) and whether the carry was finite are
returned as statistics (`Stats`). A per-layer `[L]` scale on a scan's stacked input or output
(a stacked weight, its gradient) is kept per layer and sliced with it.

Errors: an op with a scaled input and no rule raises `PrecisionError` naming the op, the model
function and line it comes from, and the scan (layer loop) it sits in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core as jcore
import jax.numpy as jnp
from jax._src import source_info_util

from marin_lab.precision.audit import scan_counts
from marin_lab.precision.errors import PrecisionError
from marin_lab.precision.scaled import F32, ScaledArray, pow2_round_down
from marin_lab.precision.scalify_rules import RULES, is_scaled, single_scale, unscale


@dataclasses.dataclass
class ScanStats:
    """One scan's rescale points: log2 of each iteration's carry scale, and whether it was finite."""

    reverse: bool
    log2_scale: jax.Array  # [length]
    finite: jax.Array  # [length] bool


@dataclasses.dataclass
class Stats:
    """What the interpreter observed, in program order (forward layer scan, then backward)."""

    scans: list[ScanStats] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _Ctx:
    stats: Stats | None  # None inside remat, whose tracers must not leak out
    scope: tuple[str, ...] = ()
    where: str = ""  # the innermost model line seen (ops inside library calls have none)

    def inner(self, what: str, eqn: Any, record: bool = True) -> _Ctx:
        return _Ctx(self.stats if record else None, (*self.scope, what), _where(eqn) or self.where)


def _where(eqn: Any) -> str:
    try:
        return source_info_util.summarize(eqn.source_info)
    except Exception:  # noqa: BLE001 - a location is a courtesy in an error message
        return ""


def _no_rule(eqn: Any, ctx: _Ctx) -> PrecisionError:
    scope = " > ".join(ctx.scope)
    inside = f", inside {scope}" if scope else ""
    where = _where(eqn) or ctx.where or "an unknown location"
    return PrecisionError(
        f"precision 'scalify' has no scale-propagation rule for op '{eqn.primitive.name}' (at {where}"
        f"{inside}); add one to marin_lab/precision/scalify_rules.py or keep that op's inputs unscaled"
    )


def _closed(j: Any) -> tuple[Any, Sequence[Any]]:
    return (j.jaxpr, j.consts) if hasattr(j, "consts") else (j, ())


def eval_jaxpr(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], ctx: _Ctx) -> list[Any]:
    """Evaluate a jaxpr on a mix of scaled and plain values."""
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, jcore.Literal) else env[v]

    def write(v: Any, value: Any) -> None:
        if not isinstance(v, jcore.DropVar):
            env[v] = value

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        write(v, c)
    for v, a in zip(jaxpr.invars, args, strict=True):
        write(v, a)
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        name_stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
        with source_info_util.user_context(eqn.source_info.traceback, name_stack=name_stack), eqn.ctx.manager:
            outs = _eval_eqn(eqn, invals, ctx)
        for v, o in zip(eqn.outvars, outs, strict=True):
            write(v, o)
    return [read(v) for v in jaxpr.outvars]


def _eval_eqn(eqn: Any, invals: list[Any], ctx: _Ctx) -> list[Any]:
    name = eqn.primitive.name
    if not any(is_scaled(x) for x in invals):
        out = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
        return list(out) if eqn.primitive.multiple_results else [out]
    if name in _HIGHER:
        return _HIGHER[name](eqn, invals, ctx)
    if name not in RULES:
        raise _no_rule(eqn, ctx)
    try:
        return RULES[name](eqn, invals)
    except TypeError as err:
        raise PrecisionError(f"precision 'scalify': op '{name}' at {_where(eqn) or ctx.where}: {err}") from err


def _call(eqn: Any, invals: Sequence[Any], ctx: _Ctx) -> list[Any]:
    key = next(k for k in ("jaxpr", "call_jaxpr", "fun_jaxpr") if k in eqn.params)
    jaxpr, consts = _closed(eqn.params[key])
    label = eqn.params.get("name", eqn.primitive.name)
    return eval_jaxpr(jaxpr, consts, invals, ctx.inner(str(label), eqn))


def _checkpoint(eqn: Any, invals: Sequence[Any], ctx: _Ctx) -> list[Any]:
    jaxpr, consts = _closed(eqn.params["jaxpr"])
    inner = ctx.inner("checkpoint", eqn, record=False)

    def body(*args: Any) -> list[Any]:
        return eval_jaxpr(jaxpr, consts, args, inner)

    return jax.checkpoint(body, prevent_cse=eqn.params.get("prevent_cse", True), policy=eqn.params.get("policy"))(
        *invals
    )


def _is_float(x: Any) -> bool:
    return jnp.issubdtype(jnp.asarray(x.data if is_scaled(x) else x).dtype, jnp.floating)


def _l2_pow2(data: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(pow2 of the data's RMS, or 1 when it is 0 or not finite; whether the RMS was finite)."""
    d = data.astype(F32)
    rms = jnp.sqrt(jnp.mean(d * d))
    return pow2_round_down(rms), jnp.isfinite(rms)


def _to_carry(x: Any) -> Any:
    """A floating carry as a scaled tensor with one scale (plain: measured once, 0 for zeros)."""
    if not _is_float(x):
        return x
    if is_scaled(x):
        return single_scale(x)
    x = jnp.asarray(x)
    s, _ = _l2_pow2(x)
    nonzero = jnp.any(x != 0)
    return ScaledArray((x.astype(F32) / s).astype(x.dtype), jnp.where(nonzero, s, 0.0))


def _match(out: Any, like: Any) -> Any:
    """A body output shaped like the carry it replaces (scaled, same data dtype, scalar scale)."""
    if not is_scaled(like):
        return out
    out = single_scale(out) if is_scaled(out) else ScaledArray(jnp.asarray(out), jnp.ones((), F32))
    return ScaledArray(out.data.astype(like.dtype), out.scale.astype(F32))


def _rescale(carry: list[Any]) -> tuple[list[Any], jax.Array, jax.Array]:
    """Every scaled carry renormalised by the pow2 of its RMS; (carry, log2 of the largest one's
    new scale, all finite)."""
    out, finite, main, size = [], jnp.asarray(True), jnp.zeros((), F32), -1
    for c in carry:
        if not is_scaled(c):
            out.append(c)
            continue
        s, ok = _l2_pow2(c.data)
        new = ScaledArray((c.data.astype(F32) / s).astype(c.dtype), c.scale * s)
        finite = finite & ok & jnp.isfinite(new.scale)
        if c.data.size > size:  # the residual stream (or its gradient) is the largest carry
            size = c.data.size
            main = jnp.where(ok, jnp.log2(jnp.where(new.scale > 0, new.scale, 1.0)), jnp.nan)
        out.append(new)
    return out, main, finite


def _to_xs(x: Any, length: int) -> Any:
    """A scan's stacked input: a scalar scale becomes one per iteration, so slices carry theirs."""
    if not is_scaled(x):
        return x
    scale = x.scale if x.scale.ndim == 1 else jnp.broadcast_to(x.scale, (length,))
    return ScaledArray(x.data, scale)


def _scan(eqn: Any, invals: Sequence[Any], ctx: _Ctx) -> list[Any]:
    p = eqn.params
    (nc, ncar), length = scan_counts(p), p["length"]
    consts, init, xs = invals[:nc], invals[nc : nc + ncar], invals[nc + ncar :]
    body, body_consts = _closed(p["jaxpr"])
    # The carry is renormalised on entry too, so that every iteration starts from data of unit RMS:
    # the first backward iteration (the top layer) gets the loss's gradient, whose data is far
    # from 1 (see _rescale), before any of its float8 casts.
    init, _, _ = _rescale([_to_carry(c) for c in init])
    xs = [_to_xs(x, length) for x in xs]
    inner = ctx.inner(f"scan over {length} ({'backward' if p['reverse'] else 'forward'})", eqn)

    def step(carry: list[Any], x: list[Any]) -> tuple[list[Any], tuple]:
        outs = eval_jaxpr(body, body_consts, [*consts, *carry, *x], inner)
        new = [_match(o, c) for o, c in zip(outs[:ncar], carry, strict=True)]
        new, log2_scale, finite = _rescale(new)
        return new, (outs[ncar:], log2_scale, finite)

    carry, (ys, log2_scale, finite) = jax.lax.scan(
        step, init, xs, length=length, reverse=p["reverse"], unroll=p.get("unroll", 1)
    )
    if ctx.stats is not None:
        ctx.stats.scans.append(ScanStats(bool(p["reverse"]), log2_scale, finite))
    return [*carry, *ys]


def _while(eqn: Any, invals: Sequence[Any], ctx: _Ctx) -> list[Any]:
    p = eqn.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    cond_consts, body_consts, init = invals[:cn], invals[cn : cn + bn], invals[cn + bn :]
    cond, cond_c = _closed(p["cond_jaxpr"])
    body, body_c = _closed(p["body_jaxpr"])
    inner = ctx.inner("while loop", eqn, record=False)

    def cond_fn(carry: Any) -> jax.Array:
        (out,) = eval_jaxpr(cond, cond_c, [*cond_consts, *carry], inner)
        if is_scaled(out):
            raise PrecisionError(f"precision 'scalify': the condition of the while loop at {_where(eqn)} is scaled")
        return out

    def body_fn(carry: Any) -> list[Any]:
        outs = eval_jaxpr(body, body_c, [*body_consts, *carry], inner)
        return _rescale([_match(o, c) for o, c in zip(outs, carry, strict=True)])[0]

    return list(jax.lax.while_loop(cond_fn, body_fn, _rescale([_to_carry(c) for c in init])[0]))


_HIGHER: dict[str, Callable[[Any, Sequence[Any], _Ctx], list[Any]]] = {
    "jit": _call,
    "pjit": _call,
    "closed_call": _call,
    "core_call": _call,
    "custom_jvp_call": _call,
    "custom_vjp_call": _call,
    "custom_vjp_call_jaxpr": _call,
    "checkpoint": _checkpoint,
    "remat": _checkpoint,
    "remat2": _checkpoint,
    "scan": _scan,
    "while": _while,
}


def _abstract(x: Any) -> jax.ShapeDtypeStruct:
    """What the traced function sees of an argument: a scaled one stands for its data."""
    data = jnp.asarray(x.data if is_scaled(x) else x)
    return jax.ShapeDtypeStruct(data.shape, data.dtype)


def scalify(fn: Callable[..., Any]) -> Callable[..., tuple[Any, Stats]]:
    """fn run on scaled tensors: `scalify(fn)(*args) -> (outputs, Stats)`.

    `ScaledArray` leaves of the arguments enter scaled (a per-layer `[L]` scale is allowed on
    stacked arrays); other leaves enter plain. Outputs are `ScaledArray`s wherever a scaled
    value reached them; `to_values` turns them into plain arrays.
    """

    def run(*args: Any) -> tuple[Any, Stats]:
        flat, tree = jax.tree_util.tree_flatten(args, is_leaf=is_scaled)

        def flat_fn(*xs: Any) -> Any:
            return fn(*jax.tree_util.tree_unflatten(tree, xs))

        closed, shapes = jax.make_jaxpr(flat_fn, return_shape=True)(*[_abstract(x) for x in flat])
        stats = Stats()
        outs = eval_jaxpr(closed.jaxpr, closed.consts, flat, _Ctx(stats))
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), outs), stats

    return run


def to_values(tree: Any, dtype: Any = None) -> Any:
    """Scaled leaves turned into plain arrays (`data * scale` in fp32, then `dtype` or the data's)."""

    def one(x: Any) -> Any:
        if not is_scaled(x):
            return x
        return unscale(x).astype(dtype or x.dtype)

    return jax.tree_util.tree_map(one, tree, is_leaf=is_scaled)


def per_layer_scale(x: jax.Array) -> ScaledArray:
    """A stacked [L, ...] array as scaled data with one power-of-two scale per layer (from its RMS)."""
    d = x.astype(F32)
    rms = jnp.sqrt(jnp.mean(d * d, axis=tuple(range(1, d.ndim))))
    s = pow2_round_down(rms)
    return ScaledArray((d / s.reshape((-1,) + (1,) * (d.ndim - 1))).astype(x.dtype), s)


def tensor_scale(x: jax.Array) -> ScaledArray:
    """An array as scaled data with one power-of-two scale from its RMS."""
    s, _ = _l2_pow2(x)
    return ScaledArray((x.astype(F32) / s).astype(x.dtype), s)
