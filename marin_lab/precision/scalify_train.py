"""The `scalify` precision policy in the train step: scaled forward and backward, float8 casts, fp16 masters.

What the policy does to one step:

1. The weights enter as scaled tensors: a float32 master gets a power-of-two scale from its RMS
   (one per layer for the stacked `[L, ...]` weights); a float16 master (`master_weights=
   "float16_scaled"`) already is one, data and scale as stored, and enters with no reduction.
2. `jax.value_and_grad` of the unchanged loss runs under the interpreter (`scalify.py`), so the
   activations and the gradients flow as scaled tensors; the decoder's layer scan gets a dynamic
   rescale point per layer on the residual stream (forward) and on its gradient (backward).
3. The seven weight projections multiply through `f8_linear`: a plain `astype(float8)` of each
   operand (e4m3 forward; the incoming gradient e5m2 backward) and an fp32-accumulated dot. Under
   the interpreter that cast is a cast of the *scaled data*: the scale came by propagation, so no
   amax is taken before any GEMM (`audit.py` checks the compiled step for one).
4. The gradients leave as fp32 arrays for Adam; with float16 masters the updated weight is stored
   again as float16 data with a power-of-two scale from its RMS (per layer for stacked weights).

The per-layer powers of two (log2) of the residual stream and of its gradient are metrics
(`scalify/layerNN/act_scale_log2`, `.../grad_scale_log2`); a layer whose stream is not finite
(float16 overflow) stops training with one line naming it (`overflow_message`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from marin_lab.precision.scaled import F32, ScaledArray
from marin_lab.precision.scalify import Stats, per_layer_scale, scalify, tensor_scale, to_values
from marin_lab.precision.scalify_rules import is_scaled

E4M3 = jnp.float8_e4m3fn
E5M2 = jnp.float8_e5m2
MASTER_FORMATS = ("float32", "float16_scaled")


def _dot2d(a: jax.Array, b: jax.Array) -> jax.Array:
    """a [..., K] @ b [K, N] as one 2-D dot in fp32 (the shape XLA's FP8 GEMM rewrite takes)."""
    out = jax.lax.dot_general(a.reshape(-1, a.shape[-1]), b, (((1,), (0,)), ((), ())), preferred_element_type=F32)
    return out.reshape(*a.shape[:-1], b.shape[-1])


@jax.custom_vjp
def f8_linear(x: jax.Array, w: jax.Array) -> jax.Array:
    """x [..., in] @ w [in, out] with float8 casts of both operands: meant to run under `scalify`,
    where the casts apply to scaled data (on plain values they would cast unscaled numbers)."""
    return _dot2d(x.astype(E4M3), w.astype(E4M3)).astype(x.dtype)


def _f8_fwd(x: jax.Array, w: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    # The residuals are the inputs themselves: the backward pass casts them again, so the jaxpr the
    # interpreter sees holds only casts of scaled values (no float8 residual of unknown scale).
    return f8_linear(x, w), (x, w)


def _f8_bwd(res: tuple[jax.Array, jax.Array], g: jax.Array) -> tuple[jax.Array, jax.Array]:
    x, w = res
    g8 = g.astype(E5M2)
    dx = _dot2d(g8, w.T.astype(E4M3)).astype(x.dtype)
    dw = _dot2d(x.reshape(-1, x.shape[-1]).T.astype(E4M3), g8.reshape(-1, g.shape[-1])).astype(w.dtype)
    return dx, dw


f8_linear.defvjp(_f8_fwd, _f8_bwd)


@dataclasses.dataclass(frozen=True)
class ScalifyWeight:
    """A weight the model's `linear()` multiplies through `f8_linear`."""

    w: jax.Array

    def linear(self, x: jax.Array) -> jax.Array:
        return f8_linear(x, self.w)


jax.tree_util.register_dataclass(ScalifyWeight, data_fields=["w"], meta_fields=[])


def _scale_leaf(path: tuple, leaf: Any) -> Any:
    if is_scaled(leaf):
        return leaf
    stacked = getattr(path[0], "key", None) == "layers" and leaf.ndim >= 2
    return per_layer_scale(leaf) if stacked else tensor_scale(leaf)


def scaled_params(params: Any) -> Any:
    """The parameters as scaled tensors (float32 masters measured by RMS, float16 masters as stored)."""
    return jax.tree_util.tree_map_with_path(_scale_leaf, params, is_leaf=is_scaled)


def master_params(params: Any) -> Any:
    """float32 parameters stored as float16 data with power-of-two scales (per layer when stacked)."""
    scaled = scaled_params(params)
    return jax.tree_util.tree_map(lambda s: ScaledArray(s.data.astype(jnp.float16), s.scale), scaled, is_leaf=is_scaled)


def param_values(params: Any) -> Any:
    """Plain fp32 parameters (float16 masters decoded; float32 ones unchanged)."""
    return to_values(params, F32)


def apply_updates(params: Any, updates: Any, lr: jax.Array) -> Any:
    """params - lr * updates: fp32 masters in place; float16 masters decoded, updated, re-encoded."""

    def one(p: Any, u: jax.Array) -> Any:
        if not is_scaled(p):
            return (p - lr * u).astype(p.dtype)
        new = to_values(p, F32) - lr * u
        scaled = per_layer_scale(new) if p.scale.ndim == 1 else tensor_scale(new)
        return ScaledArray(scaled.data.astype(p.dtype), scaled.scale)

    return jax.tree_util.tree_map(one, params, updates, is_leaf=is_scaled)


def zero_stats(num_layers: int) -> dict[str, jax.Array]:
    """The shape of the policy's per-step statistics (also the microbatch accumulator's start)."""
    return {
        "act_scale_log2": jnp.zeros((num_layers,), F32),
        "grad_scale_log2": jnp.zeros((num_layers,), F32),
        "nonfinite_act": jnp.zeros((num_layers,), F32),
        "nonfinite_grad": jnp.zeros((num_layers,), F32),
    }


def _layer_stats(stats: Stats, num_layers: int) -> dict[str, jax.Array]:
    out = zero_stats(num_layers)
    for reverse, key in ((False, "act"), (True, "grad")):
        # The layer scan is the first forward scan of that length and the last backward one (a
        # chunked loss's scans, if any, run after the layers forward and before them backward).
        scans = [s for s in stats.scans if s.reverse == reverse and s.log2_scale.shape == (num_layers,)]
        scan = (scans[-1] if reverse else scans[0]) if scans else None
        if scan is not None:
            out[f"{key}_scale_log2"] = scan.log2_scale
            out[f"nonfinite_{key}"] = 1.0 - scan.finite.astype(F32)
    return out


def value_and_grad(loss_fn: Callable[..., tuple[jax.Array, jax.Array]], num_layers: int) -> Callable:
    """The train step's `jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)` under scalify.

    Returns ((loss, ce), (fp32 gradients, {"scalify": per-layer statistics})).
    """

    def run(params: Any, aux: Any, tokens: jax.Array) -> tuple[tuple, tuple]:
        grad = jax.value_and_grad(lambda p: loss_fn(p, aux, tokens), has_aux=True)
        ((loss, ce), grads), stats = scalify(grad)(scaled_params(params))
        loss, ce = to_values((loss, ce), F32)
        aux_out = {"fp8": None, "stats": None, "rescale": None, "scalify": _layer_stats(stats, num_layers)}
        return (loss, ce), (to_values(grads, F32), aux_out)

    return run


def merge_stats(acc: dict[str, jax.Array], new: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Two microbatches' statistics: the latest scales, the non-finite flags of either."""
    return {
        **new,
        "nonfinite_act": jnp.maximum(acc["nonfinite_act"], new["nonfinite_act"]),
        "nonfinite_grad": jnp.maximum(acc["nonfinite_grad"], new["nonfinite_grad"]),
    }


def metrics(stats: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """scalify/layerNN/{act,grad}_scale_log2 and scalify/nonfinite (layers whose stream overflowed)."""
    out: dict[str, jax.Array] = {}
    for i in range(stats["act_scale_log2"].shape[0]):
        out[f"scalify/layer{i:02d}/act_scale_log2"] = stats["act_scale_log2"][i]
        out[f"scalify/layer{i:02d}/grad_scale_log2"] = stats["grad_scale_log2"][i]
        out[f"scalify/layer{i:02d}/nonfinite_act"] = stats["nonfinite_act"][i]
        out[f"scalify/layer{i:02d}/nonfinite_grad"] = stats["nonfinite_grad"][i]
    out["scalify/nonfinite"] = jnp.sum(stats["nonfinite_act"]) + jnp.sum(stats["nonfinite_grad"])
    return out


def overflow_message(values: dict[str, float], step: int) -> str | None:
    """One line naming the first layer whose scaled stream overflowed at `step`, or None."""
    if not values.get("scalify/nonfinite"):
        return None
    layers = sorted({k.split("/")[1] for k in values if k.startswith("scalify/layer")})
    for where, key in (("residual stream", "act"), ("residual stream's gradient", "grad")):
        order = layers if key == "act" else layers[::-1]  # the backward pass meets the last layer first
        for layer in order:
            if values.get(f"scalify/{layer}/nonfinite_{key}"):
                before = values.get(f"scalify/{layer}/{key}_scale_log2")
                scale = "" if before is None or not math.isfinite(before) else f" (scale 2^{before:g})"
                return (
                    f"precision 'scalify': the {where} of {layer} is not finite at step {step}{scale}: a "
                    "float16 value or its scale overflowed; use compute_dtype 'bfloat16' (float32's "
                    "range) or lower optimizer.learning_rate"
                )
    return None
