"""The pieces of a fine-tune: the frozen base, the trainable tree, their shardings and the step.

Three modes share one train step:

- `full`: every parameter is trainable (fp32 masters, AdamW moments); nothing is frozen.
- `lora`: the base is frozen in `frozen_dtype` (bf16); LoRA adapters are trained.
- `qlora`: as lora, with the seven projections of the base in NF4 (double-quantized).

Only the trainable tree gets gradients and optimizer state, so an adapter checkpoint is the
trainable tree plus its moments. The frozen base is an argument of the compiled step, never
donated or updated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from marin_lab.models.llama import (
    LlamaConfig,
    Params,
    flatten_params,
    forward,
    lm_loss,
    token_log_likelihoods,
    unflatten_params,
)
from marin_lab.peft.lora import LoraConfig, apply_lora, init_lora
from marin_lab.quant import QuantizationError
from marin_lab.quant.nf4 import NF4Tensor
from marin_lab.quant.sharding import nf4_shardings
from marin_lab.training.base_model import QUANTIZED_NAMES
from marin_lab.training.errors import TrainingError
from marin_lab.training.mesh import batch_axes, batch_sharding, param_spec
from marin_lab.training.offload import HOST, Gathered, OnHost

MODES = ("full", "lora", "qlora")


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """Everything the compiled step depends on besides array values (hashable: programs are cached)."""

    mode: str
    model: LlamaConfig
    lora: LoraConfig
    compute_dtype: str
    gradient_checkpointing: bool | str
    offload_optimizer_state: bool
    seed: int
    attention_impl: str | None = None


def _is_weight(x: Any) -> bool:
    return isinstance(x, (NF4Tensor, OnHost))


def frozen_base(params: Params, mode: str, frozen_dtype: str, offload: bool) -> Params | None:
    """The frozen tree of a lora/qlora run: floating leaves in `frozen_dtype`, NF4 kept, maybe on host."""
    if mode == "full":
        return None
    dtype = jnp.dtype(frozen_dtype)
    cast = jax.tree_util.tree_map(
        lambda p: p if _is_weight(p) else jnp.asarray(p).astype(dtype), params, is_leaf=_is_weight
    )
    if offload:
        cast = {**cast, "layers": {k: OnHost(v) if k in QUANTIZED_NAMES else v for k, v in cast["layers"].items()}}
    return cast


def _named(mesh: Mesh, spec: P, memory_kind: str | None = None) -> NamedSharding:
    return NamedSharding(mesh, spec, memory_kind=memory_kind)


def frozen_shardings(frozen: Params, mesh: Mesh, rule: str) -> Params:
    """Shardings of the frozen tree: plain leaves by the mesh rule, NF4 leaves by whole blocks."""
    flat = flatten_params(frozen)
    out = {}
    for name, leaf in flat.items():
        on_host = isinstance(leaf, OnHost)
        inner = leaf.inner if on_host else leaf
        kind = HOST if on_host else None
        sh: Any  # an NF4Tensor of shardings, or one NamedSharding
        if isinstance(inner, NF4Tensor):
            try:
                sh = nf4_shardings(
                    inner, mesh, axis=None if rule == "replicated" else "fsdp", name=name, memory_kind=kind
                )
            except QuantizationError as err:
                raise TrainingError(str(err)) from err
        else:
            sh = _named(mesh, param_spec(name, tuple(inner.shape), mesh, rule), kind)
        out[name] = OnHost(sh) if on_host else sh
    return unflatten_params(out)


def _divides(dim: int, mesh: Mesh, axis: str) -> str | None:
    return axis if mesh.shape[axis] > 1 and dim % mesh.shape[axis] == 0 else None


def trainable_shardings(trainable: Any, mode: str, mesh: Mesh, rule: str) -> Params:
    """full and saved modules: the parameters' rule. Adapters: A [L, in, r] split along `in`,
    B [L, r, out] along `out`."""
    flat = flatten_params(trainable)
    out = {}
    for name, leaf in flat.items():
        shape = tuple(leaf.shape)
        if name in ("embed/a", "embed/b"):  # embedding adapter: A [vocab, r] split along vocab, B whole
            out[name] = _named(
                mesh, P(_divides(shape[0], mesh, "fsdp") if name == "embed/a" and rule != "replicated" else None, None)
            )
        elif mode == "full" or not name.startswith("layers/"):
            out[name] = _named(mesh, param_spec(name, shape, mesh, rule))
        elif rule == "replicated":
            out[name] = _named(mesh, P())
        elif name.endswith("/a"):
            out[name] = _named(mesh, P(None, _divides(shape[1], mesh, "fsdp"), None))
        else:
            out[name] = _named(mesh, P(None, None, _divides(shape[2], mesh, "fsdp")))
    return unflatten_params(out)


def optimizer_shardings(abstract_opt: Any, trainable_sh: Params, trainable: Any, mesh: Mesh, offload: bool) -> Any:
    """Each moment follows its parameter (matched by path suffix and shape); counters replicated."""
    flat_sh, flat_p = flatten_params(trainable_sh), flatten_params(trainable)
    kind = HOST if offload else None

    def for_leaf(path: tuple, leaf: Any) -> NamedSharding:
        names = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]
        for i in range(len(names)):
            candidate = "/".join(names[i:])
            if candidate in flat_sh and tuple(leaf.shape) == tuple(flat_p[candidate].shape):
                return _named(mesh, flat_sh[candidate].spec, kind)
        return _named(mesh, P(), kind)

    return jax.tree_util.tree_map_with_path(for_leaf, abstract_opt)


def init_trainable(plan: StepPlan, base_params: Params | None, key: jax.Array, dtype: Any) -> Params:
    """full: the base parameters themselves (in `dtype`); lora/qlora: fresh adapters (and saved modules)."""
    if plan.mode == "full":
        return jax.tree_util.tree_map(lambda p: jnp.asarray(p).astype(dtype), base_params)
    return init_lora(plan.lora, plan.model, key, dtype, base=base_params)


def model_params(plan: StepPlan, trainable: Params, frozen: Params | None, key: jax.Array | None) -> Params:
    """The parameters the model runs with: the trainable tree, or the base wrapped with adapters."""
    if plan.mode == "full":
        return trainable
    assert frozen is not None, "lora and qlora runs always hold a frozen base"
    return apply_lora(frozen, trainable, plan.lora, key)


def gathered_base(frozen: Params | None, mesh: Mesh | None) -> Params | None:
    """The frozen projections wrapped so that FSDP gathers their stored (packed) form where used.

    On a mesh with fsdp > 1 each projection is gathered whole onto every device inside the
    layer scan (uint8 for NF4), then dequantized; an offloaded one is fetched from host first.
    """
    if frozen is None:
        return None
    gather = NamedSharding(mesh, P()) if mesh is not None and mesh.shape["fsdp"] > 1 else None
    layers = {k: Gathered(v, gather) if k in QUANTIZED_NAMES else v for k, v in frozen["layers"].items()}
    return {**frozen, "layers": layers}


def activation_sharding(mesh: Mesh | None) -> NamedSharding | None:
    """The residual stream [batch, seq, d] split by batch only (as train_lm's step pins it)."""
    return None if mesh is None else NamedSharding(mesh, P(batch_axes(mesh), None, None))


def make_loss_fn(plan: StepPlan, mesh: Mesh | None = None) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """loss(trainable, frozen, tokens, mask, key). With `mesh`, activations stay split by batch and
    the frozen weights are gathered to them (FSDP), never the activations to the weights."""
    compute_dtype = jnp.dtype(plan.compute_dtype)

    def loss_fn(
        trainable: Params, frozen: Params | None, tokens: jax.Array, mask: jax.Array, key: jax.Array | None
    ) -> tuple[jax.Array, jax.Array]:
        params = model_params(plan, trainable, gathered_base(frozen, mesh), key)
        return lm_loss(
            params,
            tokens[:, :-1],
            tokens[:, 1:],
            mask[:, 1:],
            plan.model,
            compute_dtype=compute_dtype,
            gradient_checkpointing=plan.gradient_checkpointing,
            attention_impl=plan.attention_impl,
            activation_sharding=activation_sharding(mesh),
        )

    return loss_fn


def make_train_step(
    plan: StepPlan,
    optimizer: optax.GradientTransformation,
    lr_schedule: Callable[[jax.Array], jax.Array],
    mesh: Mesh | None = None,
) -> Callable:
    """step(state, frozen, tokens, mask) -> (state, metrics); state = {trainable, opt_state, step}."""
    grad_fn = jax.value_and_grad(make_loss_fn(plan, mesh), has_aux=True)

    def step(state: dict[str, Any], frozen: Params | None, tokens: jax.Array, mask: jax.Array):
        key = jax.random.fold_in(jax.random.key(plan.seed), state["step"])
        trainable = state["trainable"]
        (loss, ce), grads = grad_fn(trainable, frozen, tokens, mask, key)
        opt_state = state["opt_state"]
        if plan.offload_optimizer_state:
            opt_state = jax.device_put(opt_state, jax.memory.Space.Device)
        updates, opt_state = optimizer.update(grads, opt_state, trainable)
        lr = lr_schedule(state["step"])
        trainable = jax.tree_util.tree_map(lambda p, u: (p - lr * u).astype(p.dtype), trainable, updates)
        metrics = {
            "loss": loss,
            "cross_entropy": ce,
            "grad_norm": optax.global_norm(grads),
            "learning_rate": lr,
            "loss_tokens": mask[:, 1:].sum(),
        }
        return {"trainable": trainable, "opt_state": opt_state, "step": state["step"] + 1}, metrics

    return step


def compile_step(
    plan: StepPlan,
    optimizer: optax.GradientTransformation,
    lr_schedule: Callable,
    mesh: Mesh,
    state_sh: Any,
    frozen_sh: Any,
) -> Callable:
    batch = batch_sharding(mesh)
    return jax.jit(
        make_train_step(plan, optimizer, lr_schedule, mesh),
        in_shardings=(state_sh, frozen_sh, batch, batch),
        out_shardings=(state_sh, _named(mesh, P())),
        donate_argnums=0,
    )


def build_step(
    plan: StepPlan,
    optimizer: optax.GradientTransformation,
    lr_schedule: Callable,
    mesh: Mesh,
    rule: str,
    frozen_abs: Any,
    trainable_abs: Any,
) -> tuple[dict[str, Any], Any, Callable]:
    """(state shardings, frozen shardings, the jitted step) for abstract frozen/trainable trees: finetune_lm
    runs it on its devices, `marin-lab compile` lowers it for a TPU topology."""
    frozen_sh = frozen_shardings(frozen_abs, mesh, rule) if frozen_abs is not None else None
    train_sh = trainable_shardings(trainable_abs, plan.mode, mesh, rule)
    opt_sh = optimizer_shardings(
        jax.eval_shape(optimizer.init, trainable_abs), train_sh, trainable_abs, mesh, plan.offload_optimizer_state
    )
    state_sh = {"trainable": train_sh, "opt_state": opt_sh, "step": _named(mesh, P())}
    return state_sh, frozen_sh, compile_step(plan, optimizer, lr_schedule, mesh, state_sh, frozen_sh)


def make_eval_fn(plan: StepPlan, mesh: Mesh | None = None) -> Callable:
    """(trainable, frozen, tokens, mask) -> (sum of masked NLL, masked token count), no dropout."""

    def evaluate(trainable: Params, frozen: Params | None, tokens: jax.Array, mask: jax.Array):
        params = model_params(plan, trainable, gathered_base(frozen, mesh), None)
        logits = forward(
            params,
            tokens[:, :-1],
            plan.model,
            compute_dtype=jnp.dtype(plan.compute_dtype),
            attention_impl=plan.attention_impl,
        )
        logp, _ = token_log_likelihoods(logits, tokens[:, 1:])
        m = mask[:, 1:].astype(jnp.float32)
        return -(logp * m).sum(), m.sum()

    return jax.jit(evaluate)
