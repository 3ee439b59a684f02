"""Per-device memory of a fine-tune, before anything is loaded: the dry run's memory plan.

Parameter-like parts are counted exactly: the planner builds the same abstract trees the trainer
builds (frozen base with NF4 leaves, adapters or full parameters, AdamW moments) with
`jax.eval_shape`, places them with the trainer's own sharding rules on an abstract mesh of the
planned size, and sums each leaf's per-device shard. Offloaded parts are reported as host bytes.

Activations are an estimate from the model's shapes (what the backward pass keeps per token and
layer; see `_layer_activation_bytes`), the remat policy, and the output logits. The compiled
step's own `memory_analysis()` on CPU is the check in tests; fsdp_qlora's published GPU peaks are
the check in `experiments/finetune_70b_qlora.py`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AbstractMesh

from marin_lab.models.llama import SELECTIVE_POLICIES, LlamaConfig, activation_widths, init_params
from marin_lab.peft.lora import LoraConfig
from marin_lab.training.base_model import QUANTIZED_NAMES, QuantConfig, quantize_params
from marin_lab.training.finetune_state import (
    StepPlan,
    frozen_base,
    frozen_shardings,
    init_trainable,
    optimizer_shardings,
    trainable_shardings,
)
from marin_lab.training.optimizer import OptimizerConfig

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Bytes per device, by part: steady state (the train step) and while the base loads.

    `device`/`host`: the step's peak in device memory and what lives in host memory instead.
    `load_device`/`load_host`: the load's peak (`base_stream`): the frozen base in place plus the
    one tensor in flight. Host figures are for one process driving all planned devices (the
    two-GPU machine), beyond the runtime's own baseline.
    """

    device: dict[str, int]
    host: dict[str, int]
    num_devices: int
    load_device: dict[str, int] = dataclasses.field(default_factory=dict)
    load_host: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def device_total(self) -> int:
        return sum(self.device.values())

    @property
    def load_device_total(self) -> int:
        return sum(self.load_device.values())

    @property
    def load_host_total(self) -> int:
        return sum(self.load_host.values())

    @property
    def host_total(self) -> int:
        """Steady-state host bytes of the process (every planned device's offloaded parts)."""
        return sum(self.host.values()) * self.num_devices

    @property
    def device_peak(self) -> int:
        return max(self.device_total, self.load_device_total)

    def fits(self, device_memory_gib: float) -> bool:
        return self.device_peak <= device_memory_gib * GIB

    def table(self, device_memory_gib: float | None = None) -> str:
        lines = [f"memory plan per device ({self.num_devices} devices), steady state (train step):"]
        for part, n in self.device.items():
            lines.append(f"  {part:40s} {n / GIB:9.2f} GiB")
        lines.append(f"  {'total (device)':40s} {self.device_total / GIB:9.2f} GiB")
        for part, n in self.host.items():
            lines.append(f"  host: {part:34s} {n / GIB:9.2f} GiB")
        if self.load_device or self.load_host:
            lines.append("while the base loads (streamed tensor by tensor):")
            for part, n in self.load_device.items():
                lines.append(f"  {part:40s} {n / GIB:9.2f} GiB")
            lines.append(f"  {'total (device, load)':40s} {self.load_device_total / GIB:9.2f} GiB")
            for part, n in self.load_host.items():
                lines.append(f"  host: {part:34s} {n / GIB:9.2f} GiB")
            lines.append(
                f"  {'total (host, load, process)':40s} {self.load_host_total / GIB:9.2f} GiB"
                f"   (steady state: {self.host_total / GIB:.2f} GiB)"
            )
        if device_memory_gib:
            for what, n in (("steady state", self.device_total), ("load", self.load_device_total)):
                verdict = "fits" if n <= device_memory_gib * GIB else "DOES NOT FIT"
                lines.append(f"  {what}: {verdict} in {device_memory_gib:g} GiB per device")
        return "\n".join(lines)


@functools.lru_cache(maxsize=16)
def _abstract_params(model: LlamaConfig, frozen_dtype: str, quant: QuantConfig | None) -> Any:
    """The base's abstract parameters (NF4 leaves when `quant`); cached, as advice re-plans often."""
    params = jax.eval_shape(lambda: init_params(model, jax.random.key(0), jnp.dtype(frozen_dtype)))
    if quant is not None:
        params = jax.eval_shape(lambda p: quantize_params(p, quant), params)
    return params


def _bytes_per_device(tree: Any, shardings: Any) -> tuple[int, int]:
    """(device bytes, host bytes) of one device's shards of `tree` placed by `shardings`."""
    leaves = jax.tree_util.tree_leaves(tree)
    shards = jax.tree_util.tree_leaves(shardings, is_leaf=lambda s: hasattr(s, "shard_shape"))
    device = host = 0
    for leaf, sh in zip(leaves, shards, strict=True):
        n = 1
        for dim in sh.shard_shape(tuple(leaf.shape)):
            n *= dim
        size = n * jnp.dtype(leaf.dtype).itemsize
        if sh.memory_kind == "pinned_host":
            host += size
        else:
            device += size
    return device, host


def _layer_activation_bytes(
    model: LlamaConfig, seq_len: int, c: int, lora: LoraConfig | None, flash_attention: bool
) -> int:
    """Bytes one decoder block keeps for its backward pass, per sequence (no remat).

    Per token: the norms' inputs (fp32 statistics) and outputs, q/k/v and their rotated copies,
    the attention output, both residual adds, the SwiGLU gate/up/activation/product and the down
    projection; per head and token the fp32 scores and the probabilities. With LoRA dropout, each
    adapter also keeps its dropped-out input and its mask, and every adapter its rank-r product.
    """
    d, f, hd = model.hidden_dim, model.intermediate_dim, model.resolved_head_dim
    q, kv = model.num_heads * hd, model.num_kv_heads * hd
    per_token = (
        2 * d * (4 + c)  # two RMSNorms: fp32 input copy + normed output
        + (q + 2 * kv) * c  # q, k, v
        + (q + kv) * c  # rotated q, k
        + q * c
        + 2 * d * c  # attention output, o-proj output, residual
        + 4 * f * c
        + d * c
    )  # gate, up, silu, product; down-proj output
    if flash_attention:  # cuDNN's fused attention keeps one fp32 logsumexp per head and token
        per_token += model.num_heads * 4
    else:
        per_token += model.num_heads * seq_len * (4 + c)  # scores (fp32) and probabilities
    if lora is not None:
        targets = lora.targets()
        inputs = {"wq": d, "wk": d, "wv": d, "wo": q, "w_gate": d, "w_up": d, "w_down": f}
        if lora.dropout > 0:
            per_token += sum(inputs[t] for t in targets) * (c + 1)
        per_token += len(targets) * lora.rank * c
    return per_token * seq_len


def plan_memory(
    model: LlamaConfig,
    *,
    mode: str,
    num_devices: int,
    batch_size: int,
    seq_len: int,
    lora: LoraConfig = LoraConfig(),
    quant: QuantConfig = QuantConfig(),
    compute_dtype: str = "bfloat16",
    trainable_dtype: str = "float32",
    frozen_dtype: str = "bfloat16",
    gradient_checkpointing: bool | str = False,
    offload_optimizer_state: bool = False,
    offload_base: bool = False,
    param_sharding: str = "fsdp",
    attention_impl: str | None = None,
    source_itemsize: int = 2,
) -> MemoryPlan:
    """Per-device bytes of a fine-tune on `num_devices` devices (all on the fsdp axis).

    `source_itemsize`: bytes per weight of the checkpoint the base is loaded from (2: bf16).
    """
    mesh = AbstractMesh((1, num_devices, 1), ("data", "fsdp", "model"))
    plan = StepPlan(mode, model, lora, compute_dtype, gradient_checkpointing, offload_optimizer_state, 0)
    c = jnp.dtype(compute_dtype).itemsize
    params = _abstract_params(model, frozen_dtype, quant if mode == "qlora" else None)
    frozen = (
        jax.eval_shape(lambda p: frozen_base(p, mode, frozen_dtype, offload_base), params) if mode != "full" else None
    )
    trainable = jax.eval_shape(lambda p: init_trainable(plan, p, jax.random.key(0), jnp.dtype(trainable_dtype)), params)
    optimizer = OptimizerConfig(weight_decay=0.0).build()
    opt = jax.eval_shape(optimizer.init, trainable)
    # The *_shardings functions build NamedShardings, which take an AbstractMesh as well as a Mesh;
    # finetune_state annotates their `mesh` as Mesh.
    train_sh = trainable_shardings(trainable, mode, mesh, param_sharding)  # type: ignore[arg-type]
    opt_sh = optimizer_shardings(opt, train_sh, trainable, mesh, offload_optimizer_state)  # type: ignore[arg-type]

    device: dict[str, int] = {}
    host: dict[str, int] = {}
    if frozen is not None:
        device["frozen weights"], host["frozen weights"] = _bytes_per_device(
            frozen,
            frozen_shardings(frozen, mesh, param_sharding),  # type: ignore[arg-type]  # as above
        )
    trainable_bytes = _bytes_per_device(trainable, train_sh)[0]
    device["adapters" if mode != "full" else "weights (trained)"] = trainable_bytes
    device["gradients"] = trainable_bytes
    device["optimizer state"], host["optimizer state"] = _bytes_per_device(opt, opt_sh)
    if host["optimizer state"]:
        # The step brings the offloaded moments to the device for the update, all at once: on an
        # H200 (7B QLoRA) the compiled step's temporaries grew by 1.11 GiB of the moments' 1.19 and
        # the peak fell by 0.08 GiB (docs/benchmarks.md, "Fine-tuning and QLoRA memory").
        device["optimizer state in flight (update)"] = host["optimizer state"]

    # Transient weight copies: FSDP gathers one layer of the base; NF4 dequantizes one matrix at a
    # time; full fine-tuning casts the fp32 masters to the compute dtype before the forward pass.
    shapes = model.param_shapes()
    if mode == "full":
        if jnp.dtype(trainable_dtype) != jnp.dtype(compute_dtype):
            device["compute-dtype weight copy"] = model.num_params() * c // num_devices
    else:
        layer = (
            sum(
                x.size * jnp.dtype(x.dtype).itemsize
                for n in QUANTIZED_NAMES
                for x in jax.tree_util.tree_leaves(params["layers"][n])
            )
            // model.num_layers
        )
        if num_devices > 1 or offload_base:
            device["gathered layer (transient)"] = layer
        if lora.adapts_embed:  # apply_lora forms E + (alpha/r) A @ B in fp32 each step
            device["adapted embedding (transient)"] = model.resolved_vocab_size * model.hidden_dim * 4
        if mode == "qlora":
            device["dequantized matrix (transient)"] = (
                max(shapes[f"layers/{n}"][1] * shapes[f"layers/{n}"][2] for n in QUANTIZED_NAMES) * c
            )

    per_device_batch = max(batch_size // num_devices, 1)
    layer_act = (
        _layer_activation_bytes(
            model, seq_len, c, lora if mode != "full" else None, attention_impl in ("cudnn", "splash")
        )
        * per_device_batch
    )
    block_input = seq_len * model.hidden_dim * c * per_device_batch
    if gradient_checkpointing in (True, "full"):
        saved = model.num_layers * block_input
    elif gradient_checkpointing == "offload_dots":
        saved = model.num_layers * block_input  # matmul outputs go to host memory
        host["saved activations"] = model.num_layers * _dots_bytes(model, seq_len, c) * per_device_batch
    elif gradient_checkpointing == "save_dots":
        saved = model.num_layers * (block_input + _dots_bytes(model, seq_len, c) * per_device_batch)
    elif gradient_checkpointing == "every_other":  # half the blocks (the odd last one too) keep only their input
        rematerialized = (model.num_layers + 1) // 2
        saved = rematerialized * block_input + (model.num_layers - rematerialized) * layer_act
    elif gradient_checkpointing in SELECTIVE_POLICIES:
        kept, offloaded = SELECTIVE_POLICIES[str(gradient_checkpointing)]
        widths = activation_widths(model)
        per_layer = seq_len * c * per_device_batch
        saved = model.num_layers * (block_input + sum(widths[n] for n in kept) * per_layer)
        host["saved activations"] = model.num_layers * sum(widths[n] for n in offloaded) * per_layer
    else:
        saved = model.num_layers * layer_act
    # Plus one block's worth while its backward runs (recomputed under remat, kept otherwise).
    device["activations"] = saved + layer_act
    device["logits and loss"] = per_device_batch * seq_len * model.resolved_vocab_size * (c + 4 + 4)
    host = {k: v for k, v in host.items() if v}
    load_device, load_host = _load_peaks(
        model, mode, device, host, num_devices, quant, offload_base, source_itemsize, frozen_dtype
    )
    return MemoryPlan(device=device, host=host, num_devices=num_devices, load_device=load_device, load_host=load_host)


def _load_peaks(
    model: LlamaConfig,
    mode: str,
    device: dict[str, int],
    host: dict[str, int],
    num_devices: int,
    quant: QuantConfig,
    offload_base: bool,
    source_itemsize: int,
    frozen_dtype: str,
) -> tuple[dict[str, int], dict[str, int]]:
    """(device, host) bytes at the load's peak: the frozen base in place plus one tensor in flight.

    Device: every device holds its shard of the frozen base; the first device also quantizes one
    matrix at a time (the stored tensor, its fp32 copy and two fp32 intermediates of blockwise
    scaling, then the packed result) and every device receives one layer slice. Host: the
    offloaded base (all devices' shards) plus the largest tensor read (stored bytes) and one
    converted or transposed copy of it. `full` mode reads the whole base at once (not streamed).
    """
    shapes = model.param_shapes()
    frozen_device = device.get("frozen weights", 0)
    if mode == "full":
        whole = model.num_params() * 4
        return (
            {"weights (fp32, whole base)": device.get("weights (trained)", 0)},
            {"base in host memory (fp32)": whole, "read copy": model.num_params() * source_itemsize},
        )
    matrices = [shapes[f"layers/{n}"][1] * shapes[f"layers/{n}"][2] for n in QUANTIZED_NAMES]
    largest_matrix = max(matrices)
    top = [shapes["embed"][0] * shapes["embed"][1]]
    largest = max(largest_matrix, *top)
    load_device = {"frozen weights (shards)": frozen_device}
    if mode == "qlora":
        load_device["quantizing one matrix (first device)"] = (
            largest_matrix * (source_itemsize + 3 * 4) + largest_matrix // 2
        )
    else:
        load_device["one layer slice in flight"] = largest_matrix * jnp.dtype(frozen_dtype).itemsize // num_devices
    load_host = {}
    if host.get("frozen weights"):
        load_host["offloaded base (all devices)"] = host["frozen weights"] * num_devices
    load_host["one tensor read + converted copy"] = largest * (
        source_itemsize + max(source_itemsize, 4 if mode == "qlora" else 2)
    )
    return load_device, load_host


def _dots_bytes(model: LlamaConfig, seq_len: int, c: int) -> int:
    hd = model.resolved_head_dim
    q, kv = model.num_heads * hd, model.num_kv_heads * hd
    return seq_len * c * (q + 2 * kv + model.hidden_dim + 2 * model.intermediate_dim + model.hidden_dim)


ADVICE = (
    ("offload_base", True, "offload_base=True (frozen projections in host memory)"),
    ("offload_optimizer_state", True, "offload_optimizer_state=True"),
    ("gradient_checkpointing", True, "gradient_checkpointing=True (recompute activations)"),
    ("batch_size", 0.5, "halve batch_size"),
    ("seq_len", 0.5, "halve seq_len"),
)
"""Settings that lower device memory, tried in this order when a plan does not fit."""


def fit_advice(settings: dict[str, Any], model: LlamaConfig, device_memory_gib: float) -> list[str]:
    """One line per setting whose change alone (from `settings`, plan_memory's arguments) lowers the
    peak, with the planned peak after it; those that then fit first."""
    base = plan_memory(model, **settings).device_peak
    lines = []
    for field, value, label in ADVICE:
        current = settings.get(field)
        if isinstance(value, bool):
            if current not in (False, None):
                continue
            changed = {**settings, field: value}
        else:
            new = int(current * value) if current else 0
            if new < (settings["num_devices"] if field == "batch_size" else 2):
                continue
            changed = {**settings, field: new}
        peak = plan_memory(model, **changed).device_peak
        if peak < base:
            lines.append(
                (
                    peak > device_memory_gib * GIB,
                    peak,
                    f"{label}: peak {peak / GIB:.2f} GiB" + (" (fits)" if peak <= device_memory_gib * GIB else ""),
                )
            )
    return [line for _, _, line in sorted(lines)]
