"""A Llama-family decoder in plain JAX: a params pytree of arrays and pure functions.

Layer weights are stacked along a leading `layers` axis and applied with `jax.lax.scan`, so the
compiled program (and compile time) does not grow with depth. Weights are stored `[in, out]`
(activations multiply from the left); the Hugging Face export transposes them. RoPE uses the
"rotate half" layout that Hugging Face's Llama uses, so exported q/k weights need no permutation.

Parameter names (they are also the sharding-rule keys and the checkpoint keys):

    embed        [vocab, d]
    layers/attn_norm [L, d]      layers/wq [L, d, heads*hd]   layers/wk, wv [L, d, kv*hd]
    layers/wo    [L, heads*hd, d]  layers/mlp_norm [L, d]
    layers/w_gate, w_up [L, d, ffn]  layers/w_down [L, ffn, d]
    final_norm   [d]
    lm_head      [d, vocab]      (absent when embeddings are tied)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from marin_lab.models.attention import attention, check_attention
from marin_lab.models.loss import chunked_log_likelihoods, log_likelihoods
from marin_lab.versioning import field_hints

Params = dict[str, Any]
_VOCAB_UNSET = (
    "model.vocab_size is None: set it to the tokenizer's vocabulary size "
    "(default_train does that from the tokenized data; or dataclasses.replace)"
)


@field_hints
@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Shape of a Llama-family decoder."""

    vocab_size: int | None = 32000
    """Number of token ids the embedding holds; None: not chosen yet (the recipes' default_train
    takes it from the tokenizer, as Marin's model presets do)."""
    hidden_dim: int = 512
    """Model width d."""
    intermediate_dim: int = 1536
    """SwiGLU hidden width."""
    num_layers: int = 8
    """Number of decoder blocks."""
    num_heads: int = 8
    """Query heads."""
    num_kv_heads: int = 8
    """Key/value heads (grouped-query attention when fewer than num_heads)."""
    head_dim: int | None = None
    """Per-head width; None means hidden_dim // num_heads."""
    max_seq_len: int = 2048
    """Longest sequence the model is trained or evaluated on."""
    rope_theta: float = 10000.0
    """RoPE base frequency."""
    norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    tie_embeddings: bool = False
    """Share the input embedding with the output projection."""
    initializer_std: float = 0.02
    """Standard deviation of the normal initialiser (output projections are scaled by depth)."""

    @property
    def resolved_vocab_size(self) -> int:
        """vocab_size, or ValueError while it is not chosen yet."""
        if self.vocab_size is None:
            raise ValueError(_VOCAB_UNSET)
        return self.vocab_size

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_dim // self.num_heads

    def validate(self) -> None:
        """Raise ValueError naming the field when the shape is inconsistent."""
        if self.head_dim is None and self.hidden_dim % self.num_heads:
            raise ValueError(
                f"model.hidden_dim={self.hidden_dim} is not divisible by model.num_heads="
                f"{self.num_heads}; set model.head_dim explicitly or change one of them"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"model.num_heads={self.num_heads} is not a multiple of model.num_kv_heads="
                f"{self.num_kv_heads}; grouped-query attention needs whole groups"
            )
        if self.resolved_head_dim % 2:
            raise ValueError(f"model head_dim={self.resolved_head_dim} must be even for RoPE")
        if self.vocab_size is None:
            raise ValueError(_VOCAB_UNSET)
        for name in ("vocab_size", "hidden_dim", "intermediate_dim", "num_layers", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model.{name}={getattr(self, name)} must be positive")

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Flat name -> shape of every parameter (names as in the module docstring)."""
        d, f, n_l, vocab = self.hidden_dim, self.intermediate_dim, self.num_layers, self.resolved_vocab_size
        hd = self.resolved_head_dim
        q, kv = self.num_heads * hd, self.num_kv_heads * hd
        shapes = {
            "embed": (vocab, d),
            "layers/attn_norm": (n_l, d),
            "layers/wq": (n_l, d, q),
            "layers/wk": (n_l, d, kv),
            "layers/wv": (n_l, d, kv),
            "layers/wo": (n_l, q, d),
            "layers/mlp_norm": (n_l, d),
            "layers/w_gate": (n_l, d, f),
            "layers/w_up": (n_l, d, f),
            "layers/w_down": (n_l, f, d),
            "final_norm": (d,),
        }
        if not self.tie_embeddings:
            shapes["lm_head"] = (d, vocab)
        return shapes

    def num_params(self, include_embedding: bool = True) -> int:
        total = sum(math.prod(s) for s in self.param_shapes().values())
        if not include_embedding:
            total -= self.resolved_vocab_size * self.hidden_dim
        return total

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6 x (matmul params) + causal attention (PaLM appendix B)."""
        # The embedding lookup is a gather, not a matmul; the output projection is a matmul
        # whether or not it is tied.
        matmul_params = self.num_params(include_embedding=False)
        if self.tie_embeddings:
            matmul_params += self.resolved_vocab_size * self.hidden_dim
        attention = 12 * self.num_layers * self.num_heads * self.resolved_head_dim * seq_len
        return 6.0 * matmul_params + attention


def _nest(flat: dict[str, jax.Array]) -> Params:
    out: Params = {}
    for name, value in flat.items():
        node = out
        *parents, leaf = name.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def flatten_params(params: Params, prefix: str = "") -> dict[str, Any]:
    """Nested params -> {"layers/wq": array, ...} (sorted names, stable across runs)."""
    flat: dict[str, Any] = {}
    for key in sorted(params):
        value = params[key]
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_params(value, prefix=f"{name}/"))
        else:
            flat[name] = value
    return flat


def unflatten_params(flat: dict[str, Any]) -> Params:
    return _nest(flat)


def init_params(config: LlamaConfig, key: jax.Array, dtype: Any = jnp.float32) -> Params:
    """Normal(0, std) weights, ones for norms; output projections scaled by 1/sqrt(2 * layers)."""
    config.validate()
    shapes = config.param_shapes()
    keys = jax.random.split(key, len(shapes))
    out_scale = 1.0 / math.sqrt(2.0 * config.num_layers)
    flat = {}
    for k, (name, shape) in zip(keys, sorted(shapes.items()), strict=True):
        if name.endswith("norm"):
            flat[name] = jnp.ones(shape, dtype)
            continue
        std = config.initializer_std * (out_scale if name in ("layers/wo", "layers/w_down") else 1.0)
        flat[name] = (std * jax.random.normal(k, shape, jnp.float32)).astype(dtype)
    return _nest(flat)


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    # Statistics in fp32 whatever the compute dtype: bf16 variance loses too many bits.
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (normed * weight.astype(jnp.float32)).astype(x.dtype)


def rope_tables(seq_len: int, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    angles = jnp.arange(seq_len, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    angles = jnp.concatenate([angles, angles], axis=-1)  # [T, hd], "rotate half" layout
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x: [B, T, heads, hd]."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    x32 = x.astype(jnp.float32)
    out = x32 * cos[None, :, None, :] + rotated.astype(jnp.float32) * sin[None, :, None, :]
    return out.astype(x.dtype)


def linear(x: jax.Array, w: Any) -> jax.Array:
    """The one place a weight multiplies activations: x [..., in] times w [in, out].

    Every projection of the model goes through here, so a different number format or a wrapped
    weight (quantized base, low-rank adapter, float8 scaling) changes this function or brings its
    own `linear(x)` method, never the model code. A plain array is a plain matmul.
    """
    if hasattr(w, "linear"):
        return w.linear(x)
    return x @ w


def _cast_param(p: Any, dtype: Any) -> Any:
    # Weight wrappers decide their own compute dtype (a quantized base must stay packed).
    if hasattr(p, "linear") or not jnp.issubdtype(p.dtype, jnp.floating):
        return p
    return p.astype(dtype)


def _is_weight_wrapper(p: Any) -> bool:
    return hasattr(p, "linear")


def _block(
    config: LlamaConfig,
    attention_impl: str | None,
    x: jax.Array,
    layer: Params,
    cos: jax.Array,
    sin: jax.Array,
    sharding: Any = None,
) -> jax.Array:
    # The checkpoint_name tags (ACTIVATION_NAMES) are what the selective remat policies save or
    # offload; without such a policy they change nothing.
    b, t, _ = x.shape
    hd = config.resolved_head_dim
    h = rms_norm(x, layer["attn_norm"], config.norm_eps)
    q = checkpoint_name(linear(h, layer["wq"]), "attn_q").reshape(b, t, config.num_heads, hd)
    k = checkpoint_name(linear(h, layer["wk"]), "attn_k").reshape(b, t, config.num_kv_heads, hd)
    v = checkpoint_name(linear(h, layer["wv"]), "attn_v").reshape(b, t, config.num_kv_heads, hd)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    attn = attention(q, k, v, attention_impl, sharding).reshape(b, t, config.num_heads * hd)
    x = checkpoint_name(x + linear(checkpoint_name(attn, "attn_out"), layer["wo"]), "mlp_in")
    h = rms_norm(x, layer["mlp_norm"], config.norm_eps)
    gate = checkpoint_name(linear(h, layer["w_gate"]), "mlp_gate")
    up = checkpoint_name(linear(h, layer["w_up"]), "mlp_up")
    x = x + linear(jax.nn.silu(gate) * up, layer["w_down"])
    return x


ACTIVATION_NAMES = ("attn_q", "attn_k", "attn_v", "attn_out", "mlp_in", "mlp_gate", "mlp_up")
"""The activations a block names for the selective policies: the q/k/v projections (before RoPE),
the attention output (the input of wo), the residual stream after attention (the MLP's input,
before its norm) and the MLP's gate and up projections (before SiLU and the product)."""

SELECTIVE_POLICIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "save_attn_mlp_in": (("attn_out", "mlp_in"), ()),
    "save_qkv_mlp_in": (("attn_q", "attn_k", "attn_v", "mlp_in"), ()),
    "save_mlp_gate": (("mlp_gate",), ()),
    "save_mlp_in_gate": (("mlp_in", "mlp_gate"), ()),
    "save_mlp": (("mlp_in", "mlp_gate", "mlp_up"), ()),
    "offload_mlp": ((), ("mlp_in", "mlp_gate", "mlp_up")),
}
"""Selective policies: name -> (activations kept in device memory, activations offloaded to host
memory); everything else inside a block is recomputed on the backward pass."""


def activation_widths(config: LlamaConfig) -> dict[str, int]:
    """Elements per token of each named activation (ACTIVATION_NAMES)."""
    q, kv = config.num_heads * config.resolved_head_dim, config.num_kv_heads * config.resolved_head_dim
    d, f = config.hidden_dim, config.intermediate_dim
    return {"attn_q": q, "attn_k": kv, "attn_v": kv, "attn_out": q, "mlp_in": d, "mlp_gate": f, "mlp_up": f}


def policy_names(name: bool | str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(activations kept in device memory, activations in host memory) of a policy, as named
    activations: save_dots/offload_dots keep every weight matmul's output (the wo output makes
    mlp_in an addition away)."""
    if name == "save_dots":
        return ("attn_q", "attn_k", "attn_v", "mlp_in", "mlp_gate", "mlp_up"), ()
    if name == "offload_dots":
        return (), ("attn_q", "attn_k", "attn_v", "mlp_in", "mlp_gate", "mlp_up")
    if isinstance(name, str) and name in SELECTIVE_POLICIES:
        return SELECTIVE_POLICIES[name]
    return (), ()


REMAT_POLICIES = ("full", "save_dots", "offload_dots", *SELECTIVE_POLICIES, "every_other")
"""Names `gradient_checkpointing` accepts besides True (= "full") and False."""


def check_remat(name: Any) -> None:
    """ValueError naming the field when `name` is not a gradient-checkpointing setting."""
    if not (name is True or name is False or name in REMAT_POLICIES):
        raise ValueError(f"gradient_checkpointing={name!r}: expected True, False or one of {REMAT_POLICIES}")


def remat_policy(name: bool | str) -> Any:
    """The `jax.checkpoint` policy of a gradient-checkpointing setting.

    full: keep only each block's input, recompute everything inside it (least memory).
    save_dots: also keep the outputs of weight matmuls (recompute only cheap elementwise ops).
    offload_dots: keep them in host memory (pinned_host) instead of device memory.
    save_attn_mlp_in, save_qkv_mlp_in, save_mlp_gate, save_mlp_in_gate, save_mlp:
    keep the named activations of
    SELECTIVE_POLICIES (ACTIVATION_NAMES) in device memory; offload_mlp: keep the MLP's in host memory.
    every_other: full remat on every other block, none on the others (`hidden_states` scans pairs;
    this returns full remat's policy, the one its rematerialized blocks use).
    """
    if name is True or name in ("full", "every_other"):
        return None
    if name == "save_dots":
        return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    if name == "offload_dots":
        return jax.checkpoint_policies.offload_dot_with_no_batch_dims("device", "pinned_host")
    if isinstance(name, str) and name in SELECTIVE_POLICIES:
        saved, offloaded = SELECTIVE_POLICIES[name]
        if not offloaded:
            return jax.checkpoint_policies.save_only_these_names(*saved)
        return jax.checkpoint_policies.save_and_offload_only_these_names(
            names_which_can_be_saved=list(saved),
            names_which_can_be_offloaded=list(offloaded),
            offload_src="device",
            offload_dst="pinned_host",
        )
    raise ValueError(f"gradient_checkpointing={name!r} is not True, False or one of {REMAT_POLICIES}")


def _constrain_batch(a: jax.Array, sharding: Any) -> jax.Array:
    """`a` constrained to `sharding` when its batch dimension divides over the sharding's batch axes
    (a microbatch may not: then XLA chooses, as it does without a constraint)."""
    if sharding is None:
        return a
    axes = sharding.spec[0]
    ways = math.prod(sharding.mesh.shape[name] for name in (axes if isinstance(axes, tuple) else (axes,)))
    return jax.lax.with_sharding_constraint(a, sharding) if a.shape[0] % ways == 0 else a


def hidden_states(
    params: Params,
    tokens: jax.Array,
    config: LlamaConfig,
    *,
    compute_dtype: Any = jnp.float32,
    gradient_checkpointing: bool | str = False,
    attention_impl: str | None = None,
    activation_sharding: Any = None,
) -> tuple[Params, jax.Array]:
    """(the params cast to compute_dtype, the final-normed hidden states [B, T, D]).

    Arguments as for `forward`, which applies the output projection to these.
    """
    check_attention(
        attention_impl, seq_len=tokens.shape[1], num_heads=config.num_heads, num_kv_heads=config.num_kv_heads
    )
    cast = jax.tree_util.tree_map(lambda p: _cast_param(p, compute_dtype), params, is_leaf=_is_weight_wrapper)
    seq_len = tokens.shape[1]
    cos, sin = rope_tables(seq_len, config.resolved_head_dim, config.rope_theta)

    def pin(a: jax.Array) -> jax.Array:
        return _constrain_batch(a, activation_sharding)

    x = pin(jnp.take(cast["embed"], tokens, axis=0))

    def body(carry: jax.Array, layer: Params) -> tuple[jax.Array, None]:
        return pin(_block(config, attention_impl, carry, layer, cos, sin, activation_sharding)), None

    if gradient_checkpointing == "every_other":
        x = _every_other(body, x, cast["layers"], config.num_layers)
    else:
        if gradient_checkpointing:
            # Keep only each block's input (and what the policy saves); recompute the rest backward.
            body = jax.checkpoint(body, prevent_cse=False, policy=remat_policy(gradient_checkpointing))
        x, _ = jax.lax.scan(body, x, cast["layers"])
    return cast, pin(rms_norm(x, cast["final_norm"], config.norm_eps))


def _every_other(body: Callable, x: jax.Array, layers: Params, num_layers: int) -> jax.Array:
    """Blocks scanned in pairs: the first of each pair fully rematerialized, the second not (its
    activations are kept); an odd last block is rematerialized after the scan."""
    remat = jax.checkpoint(body, prevent_cse=False)
    pairs = num_layers // 2

    def pair(carry: jax.Array, two: Params) -> tuple[jax.Array, None]:
        first = jax.tree_util.tree_map(lambda a: a[0], two)
        second = jax.tree_util.tree_map(lambda a: a[1], two)
        return body(remat(carry, first)[0], second)[0], None

    if pairs:
        stacked = jax.tree_util.tree_map(lambda a: a[: 2 * pairs].reshape(pairs, 2, *a.shape[1:]), layers)
        x, _ = jax.lax.scan(pair, x, stacked)
    if num_layers % 2:
        x = remat(x, jax.tree_util.tree_map(lambda a: a[-1], layers))[0]
    return x


def output_logits(cast: Params, x: jax.Array, config: LlamaConfig) -> jax.Array:
    """Logits [..., vocab] of hidden states x [..., D] (cast: params from `hidden_states`)."""
    if config.tie_embeddings:
        return x @ cast["embed"].T
    return linear(x, cast["lm_head"])


def forward(
    params: Params,
    tokens: jax.Array,
    config: LlamaConfig,
    *,
    compute_dtype: Any = jnp.float32,
    gradient_checkpointing: bool | str = False,
    attention_impl: str | None = None,
    activation_sharding: Any = None,
) -> jax.Array:
    """Logits [B, T, vocab] (in compute_dtype) for int tokens [B, T].

    Params stay in their storage dtype (fp32) and are cast to `compute_dtype` here, which is
    what "mixed precision" means: the optimizer updates fp32 masters, matmuls run in bf16.
    attention_impl: None (einsum, any backend), "xla" or "cudnn" (jax.nn.dot_product_attention),
    "splash" (the Pallas TPU kernel; interpreted elsewhere): marin_lab.models.attention.
    activation_sharding: where the residual stream [B, T, D] lives (split by batch, whole along T
    and D). Pinning it makes XLA gather each FSDP-split weight for its matmul (and reduce-scatter
    its gradient) instead of splitting the activations along D and all-reducing them, which on a
    [B, T, vocab] logits tensor is the largest collective of the step.
    """
    cast, x = hidden_states(
        params,
        tokens,
        config,
        compute_dtype=compute_dtype,
        gradient_checkpointing=gradient_checkpointing,
        attention_impl=attention_impl,
        activation_sharding=activation_sharding,
    )
    return output_logits(cast, x, config)


def token_log_likelihoods(logits: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-position log p(target) and logsumexp, both fp32 [B, T]."""
    return log_likelihoods(logits, targets)


LOSS_CHUNK_SIZE = 512
"""Default sequence positions per cross-entropy chunk (marin_lab.models.loss)."""


def lm_loss(
    params: Params,
    inputs: jax.Array,
    targets: jax.Array,
    mask: jax.Array,
    config: LlamaConfig,
    *,
    compute_dtype: Any = jnp.float32,
    gradient_checkpointing: bool | str = False,
    attention_impl: str | None = None,
    z_loss_weight: float = 0.0,
    logits_hook: Callable[[jax.Array], jax.Array] | None = None,
    activation_sharding: Any = None,
    loss_chunk_size: int | None = LOSS_CHUNK_SIZE,
) -> tuple[jax.Array, jax.Array]:
    """(total loss, cross-entropy) averaged over positions where mask is 1.

    logits_hook: applied to the fp32 logits before the loss (the precision policy puts a
    gradient-rescale point there: the logits' gradient is still fp32 at that point).
    loss_chunk_size: sequences longer than this many positions get their logits computed this many
    positions at a time, forward and backward (marin_lab.models.loss); None: all at once. A logits
    hook (it needs the whole gradient) or a wrapped output projection (float8 keeps one amax per
    tensor) takes the whole-logits path.
    """
    cast, x = hidden_states(
        params,
        inputs,
        config,
        compute_dtype=compute_dtype,
        gradient_checkpointing=gradient_checkpointing,
        attention_impl=attention_impl,
        activation_sharding=activation_sharding,
    )
    head = cast["embed"] if config.tie_embeddings else cast["lm_head"]
    if (
        loss_chunk_size is not None
        and inputs.shape[1] > loss_chunk_size
        and logits_hook is None
        and not _is_weight_wrapper(head)
    ):
        logp, lse = chunked_log_likelihoods(
            x,
            lambda h: output_logits(cast, h, config),
            targets,
            loss_chunk_size,
            constrain=lambda a: _constrain_batch(a, activation_sharding),
        )
    else:
        logits = output_logits(cast, x, config)
        if logits_hook is not None:
            logits = logits_hook(logits.astype(jnp.float32))
        logp, lse = log_likelihoods(logits, targets)
    mask = mask.astype(jnp.float32)
    denom = jnp.maximum(mask.sum(), 1.0)
    ce = -(logp * mask).sum() / denom
    loss = ce
    if z_loss_weight:
        # z-loss keeps the softmax normaliser near 1 so bf16 logits do not drift (PaLM).
        loss = loss + z_loss_weight * ((lse**2) * mask).sum() / denom
    return loss, ce
