"""`marin-lab compile`: a training step's exact train step, compiled for its TPU topology, without TPUs.

The step is built by the trainer's own builders (`train_step.build_step` for `train_lm`,
`finetune_state.build_step` for `finetune_lm`) from the step's config: same model, mesh, shardings,
precision, remat, attention and batch. Its state is abstract (ShapeDtypeStructs carrying their
NamedShardings on a mesh of libtpu's abstract devices), so nothing is allocated, and the real TPU
compiler (libtpu through `jax.experimental.topologies`) compiles it. What the report states:

- memory per chip: the compiler's `memory_analysis()` (arguments, temporaries, outputs, the aliased
  donated state counted once) against the compiler's own HBM limit. A fit is only ever claimed
  when the compiler produced a program; RESOURCE_EXHAUSTED means "does not fit", with the bytes the
  compiler names.
- FLOPs: from the model (6N + attention, `LlamaConfig.flops_per_token`), never from
  `cost_analysis()`, which counts each scan body once (about 1/8 of an 8B step). The hardware also
  recomputes what the remat policy dropped (`block_recompute_flops`: what the backward pass needs
  and the policy did not keep, from what it kept).
- remat comparison (`compare_remat`, `choose_remat`): the step compiled once per policy; the one
  with the highest roofline MFU that fits with HEADROOM_BYTES free per chip is chosen.
- time: a roofline, max(hardware FLOPs at the chip's peak, ICI bytes at ICI bandwidth, DCN bytes
  at DCN bandwidth): an optimistic bound (perfect overlap, MXUs at peak), from which tokens/s and
  MFU follow. The compiler's `optimal_seconds` is shown too when positive, with the same caveat as
  its FLOPs (negative without a device).
- collectives: `hlo_collectives.parse_collectives` on the optimized HLO, per step, ICI vs DCN.
- across slices: the `replica` axis splits only the batch, so the one transfer a multislice step
  needs is the gradients' all-reduce (an all-reduce of backward-pass values: `transpose(jvp(...))`
  in its op_name, or the data-parallel path's named scope). Every other DCN transfer is listed
  (`cross_slice_other`): its kind, HLO collective, shape, bytes, runs per step, the op_names of
  what it carries and its seconds per step at the chip's DCN bandwidth.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental.compilation_cache import compilation_cache

from marin_lab.cluster.hlo_collectives import Collective, CollectiveOp, aggregate, collective_ops, summarize
from marin_lab.cluster.tpu_topology import GiB, Topology
from marin_lab.models.attention import AttentionConfigError, check_attention
from marin_lab.models.llama import LlamaConfig, activation_widths, check_remat, init_params, policy_names
from marin_lab.training.base_model import quantize_params
from marin_lab.training.config import TrainLmConfig, check_batch, step_settings
from marin_lab.training.errors import TrainingError
from marin_lab.training.finetune import FinetuneConfig, check_settings, step_plan
from marin_lab.training.finetune_state import build_step as build_finetune_step
from marin_lab.training.finetune_state import frozen_base, init_trainable
from marin_lab.training.mesh import MeshError, batch_divisor, batch_sharding
from marin_lab.training.train_step import GRADIENT_REDUCE_SCOPE, abstract_state, build_step

_OOM = re.compile(r"RESOURCE_EXHAUSTED|Ran out of memory|exceeds available HBM", re.IGNORECASE)
_SIZE = r"([0-9.]+)\s*([KMGT])i?B?"
_USED = [
    re.compile(r"Used " + _SIZE + r" of " + _SIZE, re.IGNORECASE),
    re.compile(r"required for [^(]*\(" + _SIZE + r"\) exceeds available HBM \(" + _SIZE + r"\)", re.IGNORECASE),
]
_UNIT = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclasses.dataclass
class StepReport:
    """One training step compiled for one topology (`as_dict` is the JSON `steps[]` entry)."""

    step: str
    function: str
    topology: str
    slices: int
    chips: int
    mesh: dict[str, int]
    fits: bool
    hbm_bytes_per_chip: int | None
    """Arguments + outputs + temporaries - aliased (donated) bytes; from the OOM error when it does not fit."""
    hbm_capacity_bytes: int
    hbm: dict[str, int]
    """argument, output, alias, temp, generated_code (bytes per chip; empty when it does not fit)."""
    flops_per_step: float
    """Model FLOPs per step (6N + attention), the numerator of MFU."""
    hardware_flops_per_step: float
    """flops_per_step plus what remat recomputes."""
    tokens_per_step: int
    chip_peak_flops: float
    est_step_s: float | None
    est_tokens_per_s: float | None
    est_mfu: float | None
    bound: str | None
    """What the roofline is limited by: 'compute', 'ici' or 'dcn'."""
    compiler_optimal_s: float | None
    compile_s: float
    compile_cpu_s: float
    """CPU seconds of the compile (all threads): comparable across machine loads, unlike compile_s."""
    collectives: list[Collective]
    remat: str
    attention: str
    error: str | None = None
    """The compiler's message when it does not fit."""
    dcn_ops: list[CollectiveOp] = dataclasses.field(default_factory=list, repr=False)
    """Every cross-slice transfer instruction, with how often it runs (not in the JSON)."""
    host_offload_bytes: int = 0
    """Activation bytes per chip the remat policy sends to host memory each step (and reads back)."""
    chosen: bool = False
    """In a remat comparison (`compare_remat`): the policy `choose_remat` picked for this step."""
    dcn_bytes_per_s: float | None = None
    """The chip's share of the data-centre network's bandwidth (None: not published)."""

    @property
    def cross_slice_other(self) -> list[CollectiveOp]:
        """The cross-slice transfers that are not the gradients' all-reduce, most bytes per step first."""
        others = [op for op in self.dcn_ops if not carries_gradients(op)]
        return sorted(others, key=lambda op: -op.bytes * op.runs_per_step)

    def dcn_seconds(self, nbytes: float) -> float | None:
        """Seconds `nbytes` per chip take at the chip's DCN bandwidth (None: not published)."""
        return nbytes / self.dcn_bytes_per_s if self.dcn_bytes_per_s else None

    def dcn_transfers(self) -> dict[str, Any]:
        """The JSON `dcn_transfers`: the gradients' all-reduces summed, every other transfer named."""
        gradients = [op for op in self.dcn_ops if carries_gradients(op)]
        grad_bytes = sum(op.bytes * op.runs_per_step for op in gradients)
        return {
            "gradient_all_reduce": {
                "count": sum(op.runs_per_step for op in gradients),
                "bytes": grad_bytes,
                "seconds_per_step": self.dcn_seconds(grad_bytes),
            },
            "other": [
                {
                    "kind": op.kind,
                    "collective": op.collective,
                    "shape": op.shape,
                    "bytes": op.bytes,
                    "runs_per_step": op.runs_per_step,
                    "bytes_per_step": op.bytes * op.runs_per_step,
                    "seconds_per_step": self.dcn_seconds(op.bytes * op.runs_per_step),
                    "sources": list(op.sources),
                }
                for op in self.cross_slice_other
            ],
        }

    @property
    def host_bytes_per_s_needed(self) -> float | None:
        """Host-link bandwidth per chip that hides the offload under the step (out and back), or None."""
        if not self.host_offload_bytes or not self.est_step_s:
            return None
        return 2 * self.host_offload_bytes / self.est_step_s

    @property
    def headroom_bytes(self) -> int | None:
        return None if self.hbm_bytes_per_chip is None else self.hbm_capacity_bytes - self.hbm_bytes_per_chip

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        del out["dcn_ops"]
        out["collectives"] = [c.as_dict() for c in self.collectives]
        out["headroom_bytes"] = self.headroom_bytes
        out["host_bytes_per_s_needed"] = self.host_bytes_per_s_needed
        out["network_bytes"] = summarize(self.collectives)
        if self.slices > 1 and self.fits:
            out["dcn_transfers"] = self.dcn_transfers()
        return out

    def not_fit_line(self) -> str:
        used = "more than" if self.hbm_bytes_per_chip is None else f"{self.hbm_bytes_per_chip / GiB:.2f} GiB of"
        return (
            f"step {self.step!r} does not fit {self.topology}: it needs {used} {self.hbm_capacity_bytes / GiB:.2f} "
            f"GiB of HBM per chip; usually helps: gradient_checkpointing=True (full remat), more microbatches, a "
            f"smaller batch_size per chip, attention_impl='splash', or more chips (mesh.fsdp)"
        )


def _plain(value: Any) -> Any:
    return value.value if type(value).__name__ == "VersionedValue" else value


def plain_config(config: Any) -> Any:
    """The config with any `versioned(...)` wrapper on its fields removed (a step's config as written)."""
    changes = {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config)}
    return dataclasses.replace(config, **changes)


FUSED_ATTENTION = ("xla", "cudnn", "splash")
"""Attention implementations that are one op: their recompute is the whole attention forward."""


def block_recompute_flops(
    model: LlamaConfig, remat: bool | str, seq_len: int, attention_impl: str | None = None
) -> float:
    """FLOPs per token the backward pass of one rematerialized block spends recomputing its forward.

    The backward pass needs q, k, v and the attention probabilities (attention's gradient), the
    attention output (wo's weight gradient), the residual after attention (the MLP norm's gradient
    and, normed, the gate/up weight gradients) and the gate and up projections (SwiGLU's gradient
    and w_down's weight gradient). What the policy does not keep is recomputed from what it keeps and
    the block's input, and only that: the w_down matmul, whose output no gradient needs, is not
    recomputed (JAX's remat drops it). tests/unit/training/test_remat.py checks these sums against the dots of
    the differentiated program.
    """
    if not remat:
        return 0.0
    d, f, hd = model.hidden_dim, model.intermediate_dim, model.resolved_head_dim
    q, kv = model.num_heads * hd, model.num_kv_heads * hd
    half_attention = 2.0 * model.num_heads * hd * seq_len  # scores, or probabilities x values
    # node -> (FLOPs per token, the nodes it is computed from); "x" is the block input, always kept.
    graph: dict[str, tuple[float, tuple[str, ...]]] = {
        "attn_q": (2.0 * d * q, ("x",)),
        "attn_k": (2.0 * d * kv, ("x",)),
        "attn_v": (2.0 * d * kv, ("x",)),
        "probs": (half_attention, ("attn_q", "attn_k")),
        "attn_out": (half_attention, ("probs", "attn_v")),
        "mlp_in": (2.0 * q * d, ("attn_out",)),
        "mlp_gate": (2.0 * d * f, ("mlp_in",)),
        "mlp_up": (2.0 * d * f, ("mlp_in",)),
    }
    needed = ["attn_q", "attn_k", "attn_v", "probs", "attn_out", "mlp_in", "mlp_gate", "mlp_up"]
    if attention_impl in FUSED_ATTENTION:  # one op: out and its statistics come together, never saved
        graph["probs"] = (0.0, ("attn_q", "attn_k", "attn_v"))
        graph["attn_out"] = (2 * half_attention, ("attn_q", "attn_k", "attn_v"))
        needed = [n for n in needed if n != "probs"]
    saved, offloaded = policy_names("full" if remat in (True, "every_other") else remat)
    kept = {"x", *saved, *offloaded}
    if attention_impl in FUSED_ATTENTION and "attn_out" in kept:
        kept.discard("attn_out")  # the kernel's backward also needs its statistics, recomputed with it
    done: set[str] = set()

    def cost(node: str) -> float:
        if node in kept or node in done:
            return 0.0
        done.add(node)
        flops, inputs = graph[node]
        return flops + sum(cost(i) for i in inputs)

    return sum(cost(n) for n in needed)


def remat_extra_flops(
    model: LlamaConfig, remat: bool | str, tokens: int, seq_len: int, attention_impl: str | None = None
) -> float:
    """FLOPs the backward pass spends recomputing what the remat policy did not keep, per step
    (every_other: only every other block is rematerialized; an odd last one is too)."""
    layers = model.num_layers
    if remat == "every_other":
        layers = (model.num_layers + 1) // 2
    return block_recompute_flops(model, remat, seq_len, attention_impl) * layers * tokens


def host_offload_bytes(model: LlamaConfig, remat: bool | str, tokens_per_chip: int, itemsize: int) -> int:
    """Bytes per chip the policy moves to host memory in the forward pass (and back in the backward)."""
    widths = activation_widths(model)
    _, offloaded = policy_names(remat) if isinstance(remat, str) else ((), ())
    return sum(widths[n] for n in offloaded) * model.num_layers * tokens_per_chip * itemsize


def _mesh(step: str, mesh_config: Any, topology: Topology) -> Any:
    if mesh_config.slices not in (1, topology.slices):
        raise TrainingError(
            f"step {step!r}: field mesh.slices={mesh_config.slices} but topology {topology.name} has "
            f"{topology.slices} slice(s); set mesh.slices to the slice count (MeshConfig.on_slices)"
        )
    try:
        return mesh_config.build(topology.devices())
    except MeshError as err:
        raise TrainingError(
            f"step {step!r}: field mesh: {str(err).removeprefix('mesh: ')} (topology {topology.name} "
            f"has {topology.chips} chips)"
        ) from err


def _check_attention(step: str, impl: str | None, model: LlamaConfig, seq_len: int) -> None:
    try:
        check_attention(
            impl, seq_len=seq_len, num_heads=model.num_heads, num_kv_heads=model.num_kv_heads, platform="tpu"
        )
    except AttentionConfigError as err:
        raise TrainingError(f"step {step!r}: field {err}") from err


def _pretraining(step: str, config: TrainLmConfig, topology: Topology) -> tuple[Any, tuple, Any, dict]:
    try:
        config.model.validate()
        config.optimizer.validate()
        config.precision.validate(config.model.param_shapes())
        check_remat(config.gradient_checkpointing)
    except ValueError as err:
        raise TrainingError(f"step {step!r}: {err}") from err
    _check_attention(step, config.attention_impl, config.model, config.seq_len)
    mesh = _mesh(step, config.mesh, topology)
    try:
        check_batch(config, mesh)
    except TrainingError as err:
        raise TrainingError(f"step {step!r}: field batch_size: {err} (mesh {dict(mesh.shape)})") from err
    settings = step_settings(config)
    optimizer = config.optimizer.build(moments=settings.precision.optimizer_state)
    shardings, step_fn = build_step(
        config.model,
        optimizer,
        config.optimizer.lr_schedule(config.num_train_steps),
        settings,
        mesh,
        config.mesh.param_sharding,
    )
    state = abstract_state(config.model, optimizer, shardings, jnp.dtype(settings.param_dtype), settings.precision)
    tokens = jax.ShapeDtypeStruct((config.batch_size, config.seq_len + 1), jnp.int32, sharding=batch_sharding(mesh))
    return step_fn, (state, tokens), config.model, dict(mesh.shape)


def _finetuning(step: str, config: FinetuneConfig, topology: Topology) -> tuple[Any, tuple, Any, dict]:
    model = config.model
    if model is None:
        raise TrainingError(
            f"step {step!r}: field model is None; set it to the base's shape to compile the step "
            "(compiling never reads the base)"
        )
    try:
        check_settings(config, model)
    except TrainingError as err:
        raise TrainingError(f"step {step!r}: {err}") from err
    _check_attention(step, config.attention_impl, model, config.seq_len)
    mesh = _mesh(step, config.mesh, topology)
    if config.batch_size % batch_divisor(mesh):
        raise TrainingError(
            f"step {step!r}: field batch_size={config.batch_size} is not divisible by mesh "
            f"data*fsdp={batch_divisor(mesh)} (mesh {dict(mesh.shape)})"
        )
    plan = step_plan(config, model)
    optimizer = config.optimizer.build()

    def shapes() -> tuple[Any, Any]:
        base = init_params(model, jax.random.key(0), dtype=jnp.float32)
        if config.mode == "qlora":
            base = quantize_params(base, config.quant)
        trainable = init_trainable(plan, base, jax.random.key(0), jnp.dtype(config.trainable_dtype))
        return frozen_base(base, config.mode, config.frozen_dtype, config.offload_base), trainable

    frozen_abs, trainable_abs = jax.eval_shape(shapes)
    state_sh, frozen_sh, step_fn = build_finetune_step(
        plan,
        optimizer,
        config.optimizer.lr_schedule(config.num_train_steps),
        mesh,
        config.mesh.param_sharding,
        frozen_abs,
        trainable_abs,
    )

    def with_sharding(tree: Any, shardings: Any) -> Any:
        return jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)

    state = {
        "trainable": trainable_abs,
        "opt_state": jax.eval_shape(optimizer.init, trainable_abs),
        "step": jax.ShapeDtypeStruct((), jnp.int32),
    }
    state = with_sharding(state, state_sh)
    frozen = with_sharding(frozen_abs, frozen_sh) if frozen_abs is not None else None
    batch = jax.ShapeDtypeStruct((config.batch_size, config.seq_len + 1), jnp.int32, sharding=batch_sharding(mesh))
    return step_fn, (state, frozen, batch, batch), model, dict(mesh.shape)


def _oom_bytes(message: str) -> tuple[int | None, int | None]:
    for pattern in _USED:
        m = pattern.search(message)
        if m:
            used = float(m.group(1)) * _UNIT[m.group(2).upper()]
            limit = float(m.group(3)) * _UNIT[m.group(4).upper()]
            return int(used), int(limit)
    return None, None


def _compile_for_topology(step_fn: Any, args: tuple) -> Any:
    """Compiles without the persistent compilation cache: a program compiled for a topology (no TPU
    client here) cannot be read back from it (JAX warns "PjRtCompiler must be constructed with a
    Client"), so it is neither read nor written. JAX decides once per process whether the cache is
    used, so that decision is reset on the way in and out, not only the flag turned."""
    cached = jax.config.jax_enable_compilation_cache  # type: ignore[attr-defined]  # a flag JAX defines at run time
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        return step_fn.lower(*args).compile()
    finally:
        jax.config.update("jax_enable_compilation_cache", cached)
        compilation_cache.reset_cache()


def compile_training_step(
    step: str, function: str, config: Any, topology: Topology, remat: bool | str | None = None
) -> StepReport:
    """Compile one train_lm / finetune_lm step's train step for `topology` and report on it.

    remat: a gradient_checkpointing setting to compile instead of the step's own (`compare_remat`).
    """
    config = plain_config(config)
    if remat is not None:
        try:
            check_remat(remat)
        except ValueError as err:
            raise TrainingError(f"step {step!r}: {err}") from None
        config = dataclasses.replace(config, gradient_checkpointing=remat)
    if isinstance(config, TrainLmConfig):
        step_fn, args, model, mesh_shape = _pretraining(step, config, topology)
        remat, seq_len = config.gradient_checkpointing, config.seq_len
    elif isinstance(config, FinetuneConfig):
        step_fn, args, model, mesh_shape = _finetuning(step, config, topology)
        remat, seq_len = config.gradient_checkpointing, config.seq_len
    else:
        raise TrainingError(f"step {step!r}: {type(config).__name__} is not a training config this command compiles")
    tokens = config.batch_size * seq_len
    model_flops = model.flops_per_token(seq_len) * tokens
    attention_impl = getattr(config, "attention_impl", None)
    hardware_flops = model_flops + remat_extra_flops(model, remat, tokens, seq_len, attention_impl)
    itemsize = jnp.dtype(getattr(config, "compute_dtype", "bfloat16")).itemsize
    offload = host_offload_bytes(model, remat, tokens // topology.chips, itemsize)
    chip = topology.chip
    started, cpu_started = time.perf_counter(), time.process_time()
    hbm: dict[str, int] = {}
    error = None
    collectives: list[Collective] = []
    dcn_ops: list[CollectiveOp] = []
    optimal = None
    try:
        compiled = _compile_for_topology(step_fn, args)
    except Exception as err:  # the compiler's own verdict: only RESOURCE_EXHAUSTED means "does not fit"
        message = str(err)
        if not _OOM.search(message):
            raise TrainingError(
                f"step {step!r}: the TPU compiler failed for {topology.name}: {message.strip().splitlines()[0]}"
            ) from err
        compile_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
        used, limit = _oom_bytes(message)
        fits, total, capacity = False, used, limit or chip.hbm_bytes
        error = message.strip().splitlines()[0][:500]
    else:
        compile_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
        memory = compiled.memory_analysis()
        hbm = {
            k: int(getattr(memory, f"{k}_size_in_bytes", 0) or 0)
            for k in ("argument", "output", "alias", "temp", "generated_code")
        }
        total = hbm["argument"] + hbm["output"] - hbm["alias"] + hbm["temp"]
        fits, capacity = True, chip.hbm_bytes
        ops = collective_ops(compiled.as_text())
        collectives = aggregate(ops)
        dcn_ops = [op for op in ops if op.scope == "dcn"]
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        seconds = float((cost or {}).get("optimal_seconds", -1.0))
        optimal = seconds if seconds > 0 else None
    est = _roofline(hardware_flops, collectives, topology) if fits else None
    step_s, bound = est if est else (None, None)
    return StepReport(
        step=step,
        function=function,
        topology=topology.name,
        slices=topology.slices,
        chips=topology.chips,
        mesh=mesh_shape,
        fits=fits,
        hbm_bytes_per_chip=total,
        hbm_capacity_bytes=capacity,
        hbm=hbm,
        flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        tokens_per_step=tokens,
        chip_peak_flops=chip.peak_flops,
        est_step_s=step_s,
        est_tokens_per_s=tokens / step_s if step_s else None,
        est_mfu=model_flops / (step_s * topology.chips * chip.peak_flops) if step_s else None,
        bound=bound,
        compiler_optimal_s=optimal,
        compile_s=round(compile_s, 2),
        compile_cpu_s=round(cpu_s, 2),
        collectives=collectives,
        remat=_remat_name(remat),
        attention=str(attention_impl or "einsum"),
        error=error,
        dcn_ops=dcn_ops,
        host_offload_bytes=offload,
        dcn_bytes_per_s=chip.dcn_bytes_per_s,
    )


def carries_gradients(op: CollectiveOp) -> bool:
    """Whether a cross-slice transfer is the gradients' all-reduce: an all-reduce of backward-pass
    values (across `replica`, which splits only the batch, a sum over the batch is a gradient's; the
    compiler may combine the loss's scalars into it), or the data-parallel path's one flat
    all-reduce (train_step.GRADIENT_REDUCE_SCOPE)."""
    backward = ("transpose(", f"/{GRADIENT_REDUCE_SCOPE}/")
    return op.kind == "all-reduce" and any(mark in s for s in op.sources for mark in backward)


def _remat_name(remat: bool | str) -> str:
    return "full" if remat is True else "none" if remat is False else str(remat)


HEADROOM_BYTES = 2 * GiB
"""What `choose_remat` leaves free per chip: allocator fragmentation and runtime buffers the
compiler's count does not see."""


def compare_remat(
    step: str, function: str, config: Any, topology: Topology, policies: Sequence[bool | str]
) -> list[StepReport]:
    """The step compiled once per remat policy, the chosen one (`choose_remat`) marked."""
    reports = [compile_training_step(step, function, config, topology, remat=p) for p in policies]
    best = choose_remat(reports)
    if best is not None:
        best.chosen = True
    return reports


def choose_remat(reports: Sequence[StepReport], headroom: int = HEADROOM_BYTES) -> StepReport | None:
    """The fastest policy (highest roofline MFU; then the least HBM) that fits with `headroom`
    bytes free per chip. Policies that offload to host memory are never chosen: no TPU publishes
    its host-link bandwidth, so the roofline cannot bound their transfers (each report says what
    bandwidth would hide them)."""
    eligible = [
        r
        for r in reports
        if r.fits
        and r.headroom_bytes is not None
        and r.headroom_bytes >= headroom
        and not r.host_offload_bytes
        and r.est_mfu is not None
    ]
    if not eligible:
        return None
    return max(eligible, key=lambda r: (round(r.est_mfu or 0.0, 6), -(r.hbm_bytes_per_chip or 0)))


def _roofline(hardware_flops: float, collectives: list[Collective], topology: Topology) -> tuple[float, str]:
    chip = topology.chip
    net = summarize(collectives)
    times = {"compute": hardware_flops / (topology.chips * chip.peak_flops), "ici": net["ici"] / chip.ici_bytes_per_s}
    if chip.dcn_bytes_per_s and net["dcn"]:
        times["dcn"] = net["dcn"] / chip.dcn_bytes_per_s
    bound = max(times, key=lambda k: times[k])
    return times[bound], bound


__all__ = [
    "HEADROOM_BYTES",
    "StepReport",
    "block_recompute_flops",
    "carries_gradients",
    "choose_remat",
    "compare_remat",
    "compile_training_step",
    "host_offload_bytes",
    "plain_config",
    "remat_extra_flops",
]
