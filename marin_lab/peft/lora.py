"""LoRA (Hu et al., 2021): a frozen weight W plus a trainable low-rank update (alpha / r) * A @ B.

The adapters live in their own pytree, apart from the frozen base, so the trainer differentiates
and optimises only them, and an adapter checkpoint is just that pytree:

    adapters = {"layers": {"wq": {"a": [L, in, r], "b": [L, r, out]}, "wk": {...}, ...}}
    (plus, with `modules_to_save`, whole trained parameters beside "layers": {"embed": [V, d]})

`apply_lora(base, adapters, config)` wraps each targeted base weight (a plain array or an
`NF4Tensor`) in a `LoraWeight`, whose `linear(x)` is `x @ W + (alpha / r) * dropout(x) @ A @ B`,
so the model's `linear()` choke point runs it without knowing. A ~ Kaiming-uniform (as PyTorch
and PEFT initialise it: U(+-1/sqrt(in))), B = 0: at initialisation the adapted model computes
exactly what the base does. Dropout needs randomness: `apply_lora` takes a key and gives each
targeted weight one key per layer (a leaf of the wrapper, so `scan` slices it like the weights).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from marin_lab.errors import MarinLabError
from marin_lab.models.llama import LlamaConfig, Params, linear
from marin_lab.versioning import field_hints

# Hugging Face module names (what users and PEFT configs write) -> our parameter names.
PROJECTIONS = {
    "q_proj": "wq",
    "k_proj": "wk",
    "v_proj": "wv",
    "o_proj": "wo",
    "gate_proj": "w_gate",
    "up_proj": "w_up",
    "down_proj": "w_down",
}
ALL_PROJECTIONS = tuple(PROJECTIONS)
# Whole parameters a LoRA run may train besides the adapters (peft's `modules_to_save`), by
# Hugging Face name or ours -> ours. With tied embeddings, "embed" is the LM head too.
EMBEDDING = ("embed_tokens", "embed")  # target_modules names of the (input, and if tied output) embedding
SAVABLE = {
    "embed_tokens": "embed",
    "embed": "embed",
    "lm_head": "lm_head",
    "norm": "final_norm",
    "final_norm": "final_norm",
}


class LoraError(MarinLabError, ValueError):
    """A LoRA configuration that cannot apply to the model; the message names the field."""


@field_hints
@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """Which projections get adapters, and their shape. Defaults are fsdp_qlora's."""

    rank: int = 64
    """r: inner dimension of A [in, r] and B [r, out]."""
    alpha: float = 16.0
    """The update is scaled by alpha / rank."""
    dropout: float = 0.1
    """Dropout on the adapter's input during training (never on the base path)."""
    target_modules: tuple[str, ...] = ALL_PROJECTIONS
    """Projections to adapt, by Hugging Face name (q_proj, ..., down_proj) or ours (wq, ..., w_down).
    QLoRA's finding: adapting all linear layers matters more than the rank. "embed_tokens" (or
    "embed") also adapts the embedding, as peft's LoRA Embedding: E + (alpha/r) A @ B with A [vocab, r]
    zero and B [r, d] normal at init; with tied embeddings this adapts the LM head too."""
    modules_to_save: tuple[str, ...] = ()
    """Whole parameters trained in full alongside the adapters, as in peft: embed_tokens/embed,
    lm_head, norm/final_norm. They join the trainable tree (and its optimizer state), so they count
    in the trainable bytes; on a small-vocabulary-heavy model the embeddings are most of them."""

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    @property
    def adapts_embed(self) -> bool:
        return any(name in EMBEDDING for name in self.target_modules)

    def targets(self) -> tuple[str, ...]:
        """Our parameter names of the targeted projections, in a fixed order (the embedding apart)."""
        ours = set(PROJECTIONS.values())
        out = []
        for name in self.target_modules:
            if name in EMBEDDING:
                continue
            mapped = PROJECTIONS.get(name, name)
            if mapped not in ours:
                raise LoraError(
                    f"lora.target_modules: {name!r} matches no projection of the model; use some of "
                    f"{list(PROJECTIONS)} (or our names {sorted(ours)}) or embed_tokens"
                )
            out.append(mapped)
        if not out and not self.adapts_embed:
            raise LoraError("lora.target_modules is empty; name at least one projection")
        return tuple(sorted(set(out)))

    def saved(self, model: LlamaConfig) -> tuple[str, ...]:
        """Our names of the `modules_to_save` parameters, checked against `model`."""
        out = []
        for name in self.modules_to_save:
            ours = SAVABLE.get(name)
            if ours is None:
                raise LoraError(f"lora.modules_to_save: {name!r} is not one of {list(SAVABLE)}")
            if ours == "lm_head" and model.tie_embeddings:
                raise LoraError(
                    "lora.modules_to_save: 'lm_head' is tied to the embeddings in this model; "
                    "save 'embed_tokens' (it is the LM head too)"
                )
            out.append(ours)
        if "embed" in out and self.adapts_embed:
            raise LoraError(
                "lora: the embedding is both in target_modules (a LoRA adapter) and in "
                "modules_to_save (trained in full); choose one"
            )
        return tuple(sorted(set(out)))

    def validate(self, model: LlamaConfig) -> None:
        """Raise LoraError naming the field when the adapters cannot fit `model`."""
        self.saved(model)
        if self.rank < 1:
            raise LoraError(f"lora.rank={self.rank} must be a positive integer")
        if not 0.0 <= self.dropout < 1.0:
            raise LoraError(f"lora.dropout={self.dropout} must be in [0, 1)")
        shapes = model.param_shapes()
        for name in self.targets():
            _, d_in, d_out = shapes[f"layers/{name}"]
            if self.rank > min(d_in, d_out):
                raise LoraError(
                    f"lora.rank={self.rank} is larger than layers/{name}'s smaller dimension "
                    f"({d_in}x{d_out}); a rank above min(in, out) adds parameters but no capacity. "
                    f"Use lora.rank <= {min(d_in, d_out)}"
                )


@dataclasses.dataclass(frozen=True)
class LoraWeight:
    """A frozen base weight with a low-rank adapter; `linear(x)` is the adapted matmul."""

    base: Any
    a: jax.Array
    b: jax.Array
    key: jax.Array | None
    scale: float
    """Static: alpha / rank."""
    dropout: float
    """Static: dropout rate on the adapter input (applied only when `key` is set)."""

    def linear(self, x: jax.Array) -> jax.Array:
        base = self.base if hasattr(self.base, "linear") else self.base.astype(x.dtype)
        y = linear(x, base)
        h = x
        if self.key is not None and self.dropout > 0.0:
            keep = jax.random.bernoulli(self.key, 1.0 - self.dropout, x.shape)
            h = jnp.where(keep, x / (1.0 - self.dropout), jnp.zeros_like(x))
        update = (h @ self.a.astype(x.dtype)) @ self.b.astype(x.dtype)
        return y + (self.scale * update).astype(y.dtype)


jax.tree_util.register_dataclass(LoraWeight, data_fields=["base", "a", "b", "key"], meta_fields=["scale", "dropout"])


def adapter_shapes(config: LoraConfig, model: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Flat name -> shape of every adapter array ("layers/wq/a": (L, in, r), ...; saved modules too)."""
    config.validate(model)
    shapes = model.param_shapes()
    out = {name: shapes[name] for name in config.saved(model)}
    if config.adapts_embed:
        vocab, d = shapes["embed"]
        out["embed/a"], out["embed/b"] = (vocab, config.rank), (config.rank, d)
    for name in config.targets():
        n_layers, d_in, d_out = shapes[f"layers/{name}"]
        out[f"layers/{name}/a"] = (n_layers, d_in, config.rank)
        out[f"layers/{name}/b"] = (n_layers, config.rank, d_out)
    return out


def init_lora(
    config: LoraConfig, model: LlamaConfig, key: jax.Array, dtype: Any = jnp.float32, base: Params | None = None
) -> Params:
    """Fresh adapters: A ~ U(-1/sqrt(in), 1/sqrt(in)) (Kaiming-uniform, a=sqrt(5)), B = 0.

    `modules_to_save` parameters start as copies of `base`'s (needed then), in `dtype`.
    """
    saved = config.saved(model)
    adapters: Params = {"layers": {}}
    if saved:
        if base is None:
            raise LoraError(f"lora.modules_to_save={config.modules_to_save} starts from the base's weights: pass base=")
        for name in saved:
            adapters[name] = jnp.asarray(base[name]).astype(dtype)
    if config.adapts_embed:  # peft's embedding init: A = 0, B ~ N(0, 1)
        shapes = adapter_shapes(config, model)
        adapters["embed"] = {
            "a": jnp.zeros(shapes["embed/a"], dtype),
            "b": jax.random.normal(jax.random.fold_in(key, 1 << 20), shapes["embed/b"]).astype(dtype),
        }
    shapes = {k: v for k, v in adapter_shapes(config, model).items() if k.startswith("layers/")}
    keys = jax.random.split(key, len(shapes))
    for k, (name, shape) in zip(keys, sorted(shapes.items()), strict=True):
        _, proj, part = name.split("/")
        node = adapters["layers"].setdefault(proj, {})
        if part == "a":
            bound = 1.0 / math.sqrt(shape[1])
            node["a"] = jax.random.uniform(k, shape, jnp.float32, -bound, bound).astype(dtype)
        else:
            node["b"] = jnp.zeros(shape, dtype)
    return adapters


def apply_lora(base: Params, adapters: Params, config: LoraConfig, key: jax.Array | None = None) -> Params:
    """`base` with each adapted projection replaced by a LoraWeight (dropout keys from `key`)."""
    layers = dict(base["layers"])
    names = sorted(adapters["layers"])
    keys = jax.random.split(key, len(names)) if key is not None and config.dropout > 0 else None
    for i, name in enumerate(names):
        if name not in layers:
            raise LoraError(f"adapters name layers/{name}, which the base model does not have")
        ad = adapters["layers"][name]
        n_layers = ad["a"].shape[0]
        layer_keys = jax.random.split(keys[i], n_layers) if keys is not None else None
        layers[name] = LoraWeight(
            base=layers[name], a=ad["a"], b=ad["b"], key=layer_keys, scale=config.scale, dropout=config.dropout
        )
    saved = {name: value for name, value in adapters.items() if name != "layers"}
    if config.adapts_embed:  # the adapted table, formed once per call: the model gathers and (tied) projects it
        saved["embed"] = _dense(base["embed"]) + _embed_delta(adapters["embed"], config)
    return {**base, **saved, "layers": layers}


def _embed_delta(ad: Params, config: LoraConfig) -> jax.Array:
    return config.scale * (ad["a"].astype(jnp.float32) @ ad["b"].astype(jnp.float32))


def _dense(w: Any) -> jax.Array:
    return w.dequantize(jnp.float32) if hasattr(w, "dequantize") else jnp.asarray(w, jnp.float32)


def merge_lora(base: Params, adapters: Params, config: LoraConfig, dtype: Any = jnp.float32) -> Params:
    """Plain parameters with W + (alpha/r) A @ B folded in (quantized bases are dequantized first).

    Every other parameter is cast to `dtype` too, so the result is an ordinary checkpoint that
    the evaluator and the Hugging Face export read without knowing about adapters.
    """
    merged = jax.tree_util.tree_map(lambda p: _dense(p).astype(dtype), base, is_leaf=lambda p: hasattr(p, "dequantize"))
    for name, ad in adapters["layers"].items():
        delta = config.scale * jnp.einsum("lir,lro->lio", ad["a"].astype(jnp.float32), ad["b"].astype(jnp.float32))
        merged["layers"][name] = (_dense(base["layers"][name]) + delta).astype(dtype)
    for name, value in adapters.items():
        if name == "embed" and config.adapts_embed:
            merged["embed"] = (_dense(base["embed"]) + _embed_delta(value, config)).astype(dtype)
        elif name != "layers":  # modules_to_save: the trained copy replaces the base's
            merged[name] = jnp.asarray(value).astype(dtype)
    return merged


def unmerge_lora(merged: Params, adapters: Params, config: LoraConfig) -> Params:
    """The base back from merged parameters (up to float rounding): W = merged - (alpha/r) A @ B.

    modules_to_save parameters are not recoverable this way (the merge replaced them): they stay as merged.
    """
    out = jax.tree_util.tree_map(lambda p: p, merged)
    for name, ad in adapters["layers"].items():
        w = merged["layers"][name]
        delta = config.scale * jnp.einsum("lir,lro->lio", ad["a"].astype(jnp.float32), ad["b"].astype(jnp.float32))
        out["layers"][name] = (w.astype(jnp.float32) - delta).astype(w.dtype)
    if config.adapts_embed:
        w = merged["embed"]
        out["embed"] = (w.astype(jnp.float32) - _embed_delta(adapters["embed"], config)).astype(w.dtype)
    return out


def count_params(tree: Params) -> int:
    return sum(int(x.size) for x in jax.tree_util.tree_leaves(tree))
