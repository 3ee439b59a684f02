"""The train state and the one jit-compiled train step (with in-step gradient accumulation)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from marin_lab.models.llama import LOSS_CHUNK_SIZE, LlamaConfig, Params, flatten_params, init_params, lm_loss
from marin_lab.precision import apply as precision
from marin_lab.precision import scalify_train
from marin_lab.precision.policy import PrecisionConfig
from marin_lab.precision.scaled import ScaledArray
from marin_lab.training.mesh import batch_axes, batch_sharding, param_spec

GRADIENT_REDUCE_SCOPE = "gradient_all_reduce"
"""The named scope (HLO op_name metadata) of the data-parallel path's one gradient all-reduce:
how `marin-lab compile` tells it from other cross-slice transfers (hlo_collectives)."""

# {"params": Params, "opt_state": optax state, "step": int32 scalar}, and with fp8_delayed
# "fp8": the amax histories (marin_lab.precision.apply), checkpointed with the rest.
TrainState = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class StepSettings:
    """What the compiled step needs besides the model shape (derived from TrainLmConfig)."""

    compute_dtype: str = "bfloat16"
    param_dtype: str = "float32"
    gradient_checkpointing: bool | str = False
    attention_impl: str | None = None
    z_loss_weight: float = 0.0
    microbatches: int = 1
    precision: PrecisionConfig = PrecisionConfig()
    loss_chunk_size: int | None = LOSS_CHUNK_SIZE


def _replicated(shardings: Params) -> bool:
    return all(s.is_fully_replicated for s in jax.tree_util.tree_leaves(shardings))


def param_shardings(config: LlamaConfig, mesh: Mesh, rule: str) -> Params:
    shapes = config.param_shapes()
    flat = {n: NamedSharding(mesh, param_spec(n, s, mesh, rule)) for n, s in shapes.items()}
    nested: Params = {}
    for name, value in flat.items():
        node = nested
        *parents, leaf = name.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return nested


def state_shardings(
    config: LlamaConfig,
    optimizer: optax.GradientTransformation,
    mesh: Mesh,
    rule: str,
    param_dtype: Any,
    precision_config: PrecisionConfig | None = None,
) -> TrainState:
    """Shardings of the whole state: optimizer moments follow their parameter's sharding."""
    p_shard = param_shardings(config, mesh, rule)
    abstract = jax.eval_shape(lambda: _fresh_state(config, optimizer, jax.random.key(0), param_dtype, precision_config))
    flat_param_shard = flatten_params(p_shard)
    replicated = NamedSharding(mesh, P())
    if precision_config is not None and precision_config.master_weights != "float32":
        # A float16 master: its data is laid out as the parameter, its (per-layer) scale is tiny.
        # (A tree of shardings in ScaledArray's shape, not of arrays: the cast says so to the checker.)
        p_shard = jax.tree_util.tree_map(lambda s: ScaledArray(s, cast(jax.Array, replicated)), p_shard)

    def for_leaf(path: tuple, leaf: Any) -> NamedSharding:
        # An optimizer leaf whose path ends with a parameter's path and shape is a moment of it.
        names = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]
        if names and names[-1] == "data":  # a scaled moment's data (marin_lab.precision.adam)
            names = names[:-1]
        for i in range(len(names)):
            candidate = "/".join(names[i:])
            if candidate in flat_param_shard and getattr(leaf, "ndim", 0) > 0:
                return flat_param_shard[candidate]
        return replicated

    opt_shard = jax.tree_util.tree_map_with_path(for_leaf, abstract["opt_state"])
    out = {"params": p_shard, "opt_state": opt_shard, "step": replicated}
    if "fp8" in abstract:  # amax histories are tiny: every device holds them whole
        out["fp8"] = jax.tree_util.tree_map(lambda _: replicated, abstract["fp8"])
    return out


def _fresh_state(
    config: LlamaConfig,
    optimizer: optax.GradientTransformation,
    key: jax.Array,
    param_dtype: Any,
    precision_config: PrecisionConfig | None = None,
) -> TrainState:
    params = init_params(config, key, dtype=param_dtype)
    state = {"params": params, "opt_state": optimizer.init(params), "step": jnp.zeros((), jnp.int32)}
    if precision_config is not None and precision_config.master_weights != "float32":
        state["params"] = scalify_train.master_params(params)
    fp8 = precision.init_state(precision_config or PrecisionConfig(), params)
    if fp8 is not None:
        state["fp8"] = fp8
    return state


def abstract_state(
    config: LlamaConfig,
    optimizer: optax.GradientTransformation,
    shardings: TrainState,
    param_dtype: Any,
    precision_config: PrecisionConfig | None = None,
) -> TrainState:
    """The state as ShapeDtypeStructs carrying their shardings: what the step compiles against,
    with nothing allocated (an 8B state is never materialised to compile its step)."""
    shapes = jax.eval_shape(lambda: _fresh_state(config, optimizer, jax.random.key(0), param_dtype, precision_config))
    return jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), shapes, shardings)


def make_init_fn(
    config: LlamaConfig,
    optimizer: optax.GradientTransformation,
    shardings: TrainState,
    param_dtype: Any,
    precision_config: PrecisionConfig | None = None,
) -> Callable[[jax.Array], TrainState]:
    """key -> a fresh state created directly in its sharded layout (no full copy on one device)."""
    return jax.jit(
        lambda key: _fresh_state(config, optimizer, key, param_dtype, precision_config), out_shardings=shardings
    )


def batch_checksum(tokens: jax.Array) -> jax.Array:
    """A uint32 digest of the global batch the step trained on (every token id and its position).

    Integer sums wrap modulo 2**32 in any order, so the value is the same on any mesh and any
    number of hosts: metrics.jsonl records which batches a run consumed, and a run resumed on
    other hardware can be checked to continue with exactly the batches of an unbroken run."""
    weights = (jnp.arange(tokens.size, dtype=jnp.uint32) * jnp.uint32(2654435761) + jnp.uint32(1)).reshape(tokens.shape)
    return jnp.sum(tokens.astype(jnp.uint32) * weights, dtype=jnp.uint32)


def split_microbatches(tokens: jax.Array, microbatches: int, ways: int) -> jax.Array:
    """[B, T] -> [microbatches, B / microbatches, T] where microbatch k is the k-th block of rows of
    each of the batch's `ways` contiguous shards, so every device accumulates its own rows."""
    # Microbatch k as rows k*B/m ... instead lays each microbatch on part of the batch axes, `replica`
    # first: with two slices microbatch 0 lived on slice 0, and each microbatch's tokens, embeddings,
    # residual gradients and loss gathers crossed the data-centre network (docs/training.md).
    b, t = tokens.shape
    per_shard = b // (ways * microbatches)
    return tokens.reshape(ways, microbatches, per_shard, t).swapaxes(0, 1).reshape(microbatches, b // microbatches, t)


def make_train_step(
    model: LlamaConfig,
    optimizer: optax.GradientTransformation,
    lr_schedule: Callable[[jax.Array], jax.Array],
    settings: StepSettings,
    mesh: Mesh,
    shardings: TrainState,
) -> Callable[[TrainState, jax.Array], tuple[TrainState, dict[str, jax.Array]]]:
    """step(state, tokens [B, seq_len + 1] int32) -> (new state, metrics), compiled once."""
    compute_dtype = jnp.dtype(settings.compute_dtype)
    m = settings.microbatches
    policy = settings.precision
    # The batch is split over replica x data x fsdp (mesh.BATCH_AXES); parameters only inside a
    # slice, so with several slices the gradients' reduction is the one collective over `replica`.
    batch_split = batch_axes(mesh)
    activations = NamedSharding(mesh, P(batch_split, None, None))

    # A data-parallel mesh (every parameter whole on every device) reduces the gradients itself:
    # each device computes its batch shard's gradients, and one all-reduce of them all, flattened
    # into a single buffer, averages them. The compiler's own partitioning instead all-reduces each
    # parameter where its gradient appears, inside the backward loop over layers: about 40
    # collectives a step for the nano model, each a synchronisation of every device, and on CPU hosts
    # (gloo over TCP) each ~1 ms of latency whatever its size. docs/training.md has the measurements.
    flat_reduce = _replicated(shardings["params"]) and not policy.changes_step and mesh.size > 1

    # Inside the data-parallel path's shard_map the tokens are already the device's own rows.
    ways = 1 if flat_reduce else math.prod(mesh.shape[a] for a in batch_split)
    microbatch_sharding = NamedSharding(mesh, P(None, batch_split, None))

    def loss_fn(params: Params, aux: Any, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        hook = None
        if policy.changes_step:
            params, hook = precision.wrap_params(policy, params, aux)
        return lm_loss(
            params,
            inputs,
            targets,
            jnp.ones(targets.shape, jnp.float32),
            model,
            compute_dtype=compute_dtype,
            gradient_checkpointing=settings.gradient_checkpointing,
            attention_impl=settings.attention_impl,
            z_loss_weight=settings.z_loss_weight,
            logits_hook=hook,
            activation_sharding=None if flat_reduce else activations,
            loss_chunk_size=settings.loss_chunk_size,
        )

    # The auxiliary input's "gradient" is the precision policy's per-step output (new amax
    # histories, float8 statistics, the logits' gradient scale): see marin_lab.precision.apply.
    # Under the scalify policy the same loss is differentiated by scale-propagating interpretation.
    value_and_grad = (
        scalify_train.value_and_grad(loss_fn, model.num_layers)
        if policy.scalify
        else jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)
    )

    def grad_fn(params: Params, aux: Any, tokens: jax.Array) -> tuple[tuple, Params, Any]:
        (loss, ce), (grads, aux_grads) = value_and_grad(params, aux, tokens)
        if policy.rescale_logits_grad:  # every gradient carries the rescale point's power of two
            scale = aux_grads["rescale"]
            grads = jax.tree_util.tree_map(lambda g: (g.astype(jnp.float32) / scale).astype(g.dtype), grads)
        return (loss, ce), grads, aux_grads

    def accumulated(params: Params, aux: Any, tokens: jax.Array) -> tuple[tuple, Params, Any]:
        if m == 1:
            return grad_fn(params, aux, tokens)
        # Accumulate in fp32 over microbatches inside the one compiled step.
        micro = split_microbatches(tokens, m, ways)
        if ways > 1:
            micro = jax.lax.with_sharding_constraint(micro, microbatch_sharding)
        zeros = jax.tree_util.tree_map(
            lambda p: jnp.zeros(p.shape, jnp.float32), params, is_leaf=lambda p: isinstance(p, ScaledArray)
        )
        aux_zeros = None if aux is None else {**jax.tree_util.tree_map(jnp.zeros_like, aux), "rescale": None}

        def body(carry, mb):
            g_acc, a_acc, l_acc, c_acc = carry
            (mb_loss, c), g, a = grad_fn(params, aux, mb)
            with jax.named_scope("accumulate"):
                g_acc = jax.tree_util.tree_map(lambda a, b: a + b.astype(jnp.float32), g_acc, g)
                l_acc, c_acc = l_acc + mb_loss, c_acc + c
            if a_acc is not None:
                a_acc = precision.merge_microbatches(a_acc, a)
            return (g_acc, a_acc, l_acc, c_acc), None

        (grads, aux_grads, loss, ce), _ = jax.lax.scan(body, (zeros, aux_zeros, 0.0, 0.0), micro)
        grads = jax.tree_util.tree_map(lambda g: g / m, grads)
        return (loss / m, ce / m), grads, aux_grads

    def data_parallel(params: Params, tokens: jax.Array) -> tuple[tuple, Params]:
        """Per device: its shard's mean loss and gradients, then one all-reduce of them all."""
        (loss, ce), grads, _ = accumulated(params, None, tokens)
        with jax.named_scope(GRADIENT_REDUCE_SCOPE):
            flat, unflatten = ravel_pytree(grads)
            loss, ce, flat = jax.lax.pmean((loss, ce, flat), batch_split)
        return (loss, ce), unflatten(flat)

    if flat_reduce:
        # check_vma=False: the gradients inside are the device's own (unreduced) ones; with the
        # check, JAX would insert a psum per parameter, which is what this path exists to avoid.
        data_parallel = jax.shard_map(
            data_parallel, mesh=mesh, in_specs=(P(), P(batch_split)), out_specs=((P(), P()), P()), check_vma=False
        )

    def step(state: TrainState, tokens: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
        # The named scopes reach the HLO's op_name metadata: `marin-lab compile` names what a
        # cross-slice transfer carries by it (these scalars are reduced over the whole batch).
        with jax.named_scope("batch_checksum"):
            checksum = batch_checksum(tokens)
        params = state["params"]
        aux = precision.step_inputs(policy, state.get("fp8"), params) if policy.changes_step else None
        if flat_reduce:
            (loss, ce), grads = data_parallel(params, tokens)
            aux_grads = None
        else:
            (loss, ce), grads, aux_grads = accumulated(params, aux, tokens)
        with jax.named_scope("grad_norm"):
            grad_norm = optax.global_norm(grads)
        with jax.named_scope("optimizer"):
            updates, opt_state = optimizer.update(grads, state["opt_state"], scalify_train.param_values(params))
        lr = lr_schedule(state["step"])
        params = scalify_train.apply_updates(params, updates, lr)
        new_state = {"params": params, "opt_state": opt_state, "step": state["step"] + 1}
        metrics = {
            "loss": loss,
            "cross_entropy": ce,
            "grad_norm": grad_norm,
            "learning_rate": lr,
            "batch_checksum": checksum,
        }
        if aux is not None:
            assert aux_grads is not None  # a policy with step inputs never takes the flat-reduce path
            fp8_state, fp8_metrics = precision.step_outputs(policy, aux_grads)
            if fp8_state is not None:
                new_state["fp8"] = fp8_state
            metrics.update(fp8_metrics)
        return new_state, metrics

    return jax.jit(
        step,
        in_shardings=(shardings, batch_sharding(mesh)),
        out_shardings=(shardings, NamedSharding(mesh, P())),
        donate_argnums=0,
    )


def build_step(
    model: LlamaConfig,
    optimizer: optax.GradientTransformation,
    lr_schedule: Callable[[jax.Array], jax.Array],
    settings: StepSettings,
    mesh: Mesh,
    rule: str,
) -> tuple[TrainState, Callable]:
    """(state shardings, the jitted train step) on `mesh`: train_lm runs it on its devices,
    `marin-lab compile` lowers it for a TPU topology (marin_lab.cluster.tpu_compile)."""
    param_dtype = jnp.dtype(settings.param_dtype)
    shardings = state_shardings(model, optimizer, mesh, rule, param_dtype, settings.precision)
    return shardings, make_train_step(model, optimizer, lr_schedule, settings, mesh, shardings)
