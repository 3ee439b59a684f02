"""Which float8 casts of a program depend on an amax reduction (`reduce_max` of `abs`)?

Transformer-Engine-style scaling measures each tensor's amax right before its float8 cast; Scalify
propagates the scale instead, so none of its casts should depend on one. `amax_fed_float8_casts`
answers this for a jaxpr (the program `jax.jit` lowers and compiles, e.g. `jitted.trace(...).jaxpr`)
by forward taint analysis: a value is tainted when it is computed from the result of a
`reduce_max` whose operand is an `abs`, through any chain of ops, into and out of nested jaxprs
(jit, custom_jvp/vjp, checkpoint), and around scan and while loops (carries iterated to a fixed
point). Each `convert_element_type` to a float8 type is then counted, tainted or not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax.extend.core as jcore
import jax.numpy as jnp

FLOAT8 = (jnp.dtype(jnp.float8_e4m3fn), jnp.dtype(jnp.float8_e5m2))


@dataclasses.dataclass
class CastCount:
    """Float8 casts in a program (each cast site once, however often a loop runs it)."""

    float8_casts: int = 0
    amax_fed: int = 0


def scan_counts(params: dict[str, Any]) -> tuple[int, int]:
    """(consts, carry) of a scan equation's inputs (the xs follow). JAX up to 0.10 names both
    counts; 0.11 packs the inputs as one flat tree of (consts, carry, xs) instead."""
    if "num_consts" in params:
        return params["num_consts"], params["num_carry"]
    consts, carry, _ = params["ft_in"].unpack()
    return len(consts), len(carry)


def _inner(params: dict[str, Any]) -> Any:
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        if key in params:
            j = params[key]
            return j.jaxpr if hasattr(j, "consts") else j
    return None


def _taint(jaxpr: Any, inputs: Sequence[bool], count: CastCount | None) -> list[bool]:
    """Taint of each output given each input's; counts casts into `count` when given."""
    tainted: dict[Any, bool] = {}
    from_abs: set[Any] = set()

    def get(v: Any) -> bool:
        return False if isinstance(v, jcore.Literal) else tainted.get(v, False)

    for v in jaxpr.constvars:
        tainted[v] = False
    for v, t in zip(jaxpr.invars, inputs, strict=True):
        tainted[v] = t
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = [get(v) for v in eqn.invars]
        if name == "abs":
            from_abs.add(eqn.outvars[0])
        if name == "scan":
            outs = _loop(eqn.params["jaxpr"].jaxpr, ins, *scan_counts(eqn.params), count)
        elif name == "while":
            p = eqn.params
            body = p["body_jaxpr"].jaxpr
            nb, nc = p["body_nconsts"], p["cond_nconsts"]
            outs = _loop(body, ins[nc:], nb, len(ins) - nc - nb, count)
        elif _inner(eqn.params) is not None:
            outs = _taint(_inner(eqn.params), ins, count)
        else:
            out = any(ins) or (
                name == "reduce_max" and not isinstance(eqn.invars[0], jcore.Literal) and eqn.invars[0] in from_abs
            )
            outs = [out] * len(eqn.outvars)
            if name == "convert_element_type" and jnp.dtype(eqn.params["new_dtype"]) in FLOAT8 and count:
                count.float8_casts += 1
                count.amax_fed += int(ins[0])
        for v, t in zip(eqn.outvars, outs, strict=True):
            tainted[v] = t
    return [get(v) for v in jaxpr.outvars]


def _loop(body: Any, ins: list[bool], num_consts: int, num_carry: int, count: CastCount | None) -> list[bool]:
    """A loop body's output taints, carries iterated until they stop changing; then counted once."""
    ins = list(ins)
    for _ in range(num_carry + 1):
        outs = _taint(body, ins, None)
        carry = [a or b for a, b in zip(ins[num_consts : num_consts + num_carry], outs[:num_carry], strict=True)]
        if carry == ins[num_consts : num_consts + num_carry]:
            break
        ins[num_consts : num_consts + num_carry] = carry
    return _taint(body, ins, count) if count is not None else outs


def amax_fed_float8_casts(jaxpr: Any) -> CastCount:
    """Float8 casts in `jaxpr` (a Jaxpr or ClosedJaxpr) and how many depend on an amax reduction."""
    count = CastCount()
    j = jaxpr.jaxpr if hasattr(jaxpr, "consts") else jaxpr
    _taint(j, [False] * len(j.invars), count)
    return count
