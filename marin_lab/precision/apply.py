"""What a precision policy does to one train step: wrap the weights, read back state and statistics.

The trainer differentiates its loss with respect to the parameters *and* an auxiliary tree from
`step_inputs`:

    {"fp8":     amax histories, stacked like the weights ({"layers": {"wq": [L, 3, H]}, ...}) or None,
     "stats":   zero placeholders, [L, NUM_STATS] per float8 projection,
     "rescale": a zero scalar when the logits' gradient is rescaled, else None,
     "scalify": per-layer statistics placeholders with the scalify policy (scalify_train.zero_stats)}

`wrap_params` turns the targeted weights into wrappers the model's `linear()` runs (float8,
MXFP8, or a cast) and returns the logits hook; `step_outputs` turns the auxiliary tree's
cotangent into the new histories, scalar metrics and the gradient scale to divide out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from marin_lab.precision.fp8 import AMAX_SLICE, NUM_STATS, Fp8Meta, Fp8Weight
from marin_lab.precision.mx import MxWeight
from marin_lab.precision.policy import PrecisionConfig
from marin_lab.precision.rescale import rescale_grad
from marin_lab.precision.scaled import F32
from marin_lab.precision.scalify_train import ScalifyWeight, merge_stats, zero_stats
from marin_lab.precision.scalify_train import metrics as scalify_metrics

Tree = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class CastWeight:
    """A weight multiplied in a fixed dtype whatever the activations' dtype (matmul 'fp32'/'bf16')."""

    w: jax.Array
    dtype: str

    def linear(self, x: jax.Array) -> jax.Array:
        dt = jnp.dtype(self.dtype)
        return jnp.matmul(x.astype(dt), self.w.astype(dt), preferred_element_type=F32).astype(x.dtype)


jax.tree_util.register_dataclass(CastWeight, data_fields=["w"], meta_fields=["dtype"])


def _projections(params: Tree) -> list[str]:
    """The stacked per-layer weight matrices ([L, in, out]) under params["layers"]."""
    return sorted(n for n, v in params["layers"].items() if not hasattr(v, "linear") and v.ndim == 3)


def init_state(config: PrecisionConfig, params: Tree) -> Tree | None:
    """Zero amax histories for fp8_delayed ({"layers": {name: [L, 3, H]}, "lm_head": [3, H]}); else None."""
    if not config.stateful:
        return None
    h = config.amax_history_len
    state: Tree = {"layers": {n: jnp.zeros((params["layers"][n].shape[0], 3, h), F32) for n in _projections(params)}}
    if config.fp8_lm_head:
        state["lm_head"] = jnp.zeros((3, h), F32)
    return state


def step_inputs(config: PrecisionConfig, fp8_state: Tree | None, params: Tree) -> Tree:
    """The auxiliary tree the loss is differentiated against (see the module docstring)."""
    stats: dict[str, Any] | None = None
    if config.fp8:
        stats = {"layers": {n: jnp.zeros((params["layers"][n].shape[0], NUM_STATS), F32) for n in _projections(params)}}
        if config.fp8_lm_head:
            stats["lm_head"] = jnp.zeros((NUM_STATS,), F32)
    rescale = jnp.zeros((), F32) if config.rescale_logits_grad else None
    out = {"fp8": fp8_state, "stats": stats, "rescale": rescale}
    if config.scalify:
        out["scalify"] = zero_stats(params["layers"]["wq"].shape[0])
    return out


def wrap_params(
    config: PrecisionConfig, params: Tree, aux: Tree
) -> tuple[Tree, Callable[[jax.Array], jax.Array] | None]:
    """(params with the targeted weights wrapped for `linear()`, the logits hook or None)."""
    layers = dict(params["layers"])
    out = dict(params)
    if config.fp8:
        hist = aux["fp8"]
        for n in _projections(params):
            meta = Fp8Meta(None if hist is None else hist["layers"][n], aux["stats"]["layers"][n])
            layers[n] = Fp8Weight(params["layers"][n], meta)
        if config.fp8_lm_head:
            meta = Fp8Meta(None if hist is None else hist["lm_head"], aux["stats"]["lm_head"])
            out["lm_head"] = Fp8Weight(params["lm_head"], meta)
    elif config.scalify:
        layers = {n: ScalifyWeight(v) if n in _projections(params) else v for n, v in layers.items()}
        if config.fp8_lm_head:
            out["lm_head"] = ScalifyWeight(params["lm_head"])
    elif config.matmul == "mxfp8":
        layers = {n: MxWeight(v) if n in _projections(params) else v for n, v in layers.items()}
    elif config.matmul in ("fp32", "bf16"):
        dt = "float32" if config.matmul == "fp32" else "bfloat16"
        layers = {n: CastWeight(v, dt) if n in _projections(params) else v for n, v in layers.items()}
    out["layers"] = layers
    hook = None
    if config.rescale_logits_grad:
        probe = aux["rescale"]

        def hook(logits: jax.Array) -> jax.Array:
            return rescale_grad(logits, probe)

    return out, hook


def merge_microbatches(acc: Tree, new: Tree) -> Tree:
    """Combine the auxiliary cotangents of two microbatches of one step.

    Histories: the elementwise max (the shifted part is equal; the front gets the step's amax).
    Statistics: max for the amaxes, sums for the counts. The rescale factor is per microbatch and
    is divided out before accumulation, so it is not kept.
    """

    def stats(a: jax.Array, b: jax.Array) -> jax.Array:
        amax = jnp.maximum(a[..., AMAX_SLICE], b[..., AMAX_SLICE])
        return jnp.concatenate([amax, a[..., AMAX_SLICE.stop :] + b[..., AMAX_SLICE.stop :]], axis=-1)

    out = {
        "fp8": None if acc["fp8"] is None else jax.tree_util.tree_map(jnp.maximum, acc["fp8"], new["fp8"]),
        "stats": None if acc["stats"] is None else jax.tree_util.tree_map(stats, acc["stats"], new["stats"]),
        "rescale": None,
    }
    if "scalify" in acc:
        out["scalify"] = merge_stats(acc["scalify"], new["scalify"])
    return out


def step_outputs(config: PrecisionConfig, aux_grads: Tree) -> tuple[Tree | None, dict[str, jax.Array]]:
    """(new amax histories, float8 metrics) from the auxiliary tree's cotangent."""
    metrics: dict[str, jax.Array] = {}
    stats = aux_grads.get("stats")
    if stats:
        metrics = fp8_metrics(stats)
    if aux_grads.get("scalify") is not None:
        metrics = scalify_metrics(aux_grads["scalify"])
    return (aux_grads["fp8"] if config.stateful else None), metrics


def fp8_metrics(stats: Tree) -> dict[str, jax.Array]:
    """Scalar metrics from per-projection statistics.

    Per layer (over its projections): `fp8/layerNN/amax_{x,w,g}` and the fractions of values
    `saturated` (clipped to the format's largest value) and `flushed` (non-zero, quantized to 0);
    the same fractions over the whole model as `fp8/saturated` and `fp8/flushed`.
    """
    per_proj = [stats["layers"][n] for n in sorted(stats["layers"])]  # each [L, NUM_STATS]
    stacked = jnp.stack(per_proj)  # [P, L, NUM_STATS]
    by_layer = {f"layer{i:02d}": stacked[:, i] for i in range(stacked.shape[1])}
    if "lm_head" in stats:
        by_layer["lm_head"] = stats["lm_head"][None]
    out: dict[str, jax.Array] = {}
    sat_total = ftz_total = count_total = jnp.zeros((), F32)
    for name, s in by_layer.items():  # s: [projections, NUM_STATS]
        amax = jnp.max(s[:, 0:3], axis=0)
        sat, ftz, count = jnp.sum(s[:, 3:6]), jnp.sum(s[:, 6:9]), jnp.sum(s[:, 9:12])
        out[f"fp8/{name}/amax_x"], out[f"fp8/{name}/amax_w"], out[f"fp8/{name}/amax_g"] = amax[0], amax[1], amax[2]
        out[f"fp8/{name}/saturated"] = sat / count
        out[f"fp8/{name}/flushed"] = ftz / count
        sat_total, ftz_total, count_total = sat_total + sat, ftz_total + ftz, count_total + count
    out["fp8/saturated"] = sat_total / count_total
    out["fp8/flushed"] = ftz_total / count_total
    return out
