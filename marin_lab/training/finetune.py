"""`finetune_lm`: fine-tune a base model fully, with LoRA, or with QLoRA. Reads top to bottom.

check -> load the base -> build the frozen tree and the trainable tree (sharded) -> resume (the
`Trainer`'s: the checkpoint process 0 lists, on every host) -> score the validation split before ->
the `Trainer`'s loop (training/trainer.py: steps, metrics, checkpoints) -> score after -> adapters,
merged checkpoint, the Trainer's HF export.

The data are token caches; an instruction cache (`tokenize_instructions`) carries a loss mask, so
the loss counts response tokens only, before and after. Outputs under `output_path`:

    checkpoints/step-NNNNNN/   trainable tree + optimizer state + step (adapters only for lora/qlora)
    merged/checkpoints/...     params with the adapters folded in: an ordinary checkpoint that
                               `evaluate_lm` reads
    hf/                        the merged model in Hugging Face format (export_hf)
    metrics.jsonl, eval.json, finetune_summary.json
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from marin_lab.execution.record.artifacts import reproducibility
from marin_lab.io import fs as mfs
from marin_lab.models.llama import REMAT_POLICIES, LlamaConfig, init_params
from marin_lab.peft.lora import LoraConfig, LoraError, merge_lora
from marin_lab.store.layout import METRICS_FILE
from marin_lab.training import checkpoint as ckpt
from marin_lab.training import distributed
from marin_lab.training.base_model import QuantConfig, load_base, quantize_params
from marin_lab.training.base_stream import BaseSource, load_frozen, load_saved, open_base
from marin_lab.training.checkpoint import CheckpointConfig
from marin_lab.training.data import DataConfig, MixtureLoader
from marin_lab.training.errors import TrainingError
from marin_lab.training.finetune_state import (
    MODES,
    StepPlan,
    build_step,
    frozen_base,
    init_trainable,
    make_eval_fn,
)
from marin_lab.training.hf_export import param_leaves
from marin_lab.training.memory_plan import fit_advice, plan_memory
from marin_lab.training.mesh import MeshConfig, MeshError, batch_divisor, batch_sharding
from marin_lab.training.metrics import WALL_CLOCK_FIELDS, WandbConfig
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.training.token_cache import TokenCache, TokenCacheError
from marin_lab.training.trainer import LoopConfig, Trainer, programs
from marin_lab.versioning import field_hints

logger = logging.getLogger(__name__)


@field_hints
@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """A fine-tuning run (the `finetune_lm` step's config)."""

    output_path: str
    """Where checkpoints, merged weights, hf/, metrics and eval.json go."""
    data: DataConfig
    """Token caches to fine-tune on (instruction caches carry a response-only loss mask)."""
    base: str
    """The frozen starting point: a train_lm or quantize_base output, a checkpoint, or a HF folder."""
    mode: str = "qlora"
    """'full' (all weights trained), 'lora' (bf16 base + adapters) or 'qlora' (NF4 base + adapters)."""
    model: LlamaConfig | None = None
    """Expected model shape, checked against the base; None takes the base's."""
    lora: LoraConfig = LoraConfig()
    """Adapter rank, alpha, dropout and targets (lora and qlora)."""
    quant: QuantConfig = QuantConfig()
    """NF4 block size and double quantization (qlora, when the base is not quantized already)."""
    optimizer: OptimizerConfig = OptimizerConfig(learning_rate=2e-4, weight_decay=0.0, warmup=0.03, schedule="constant")
    """AdamW and its schedule (fsdp_qlora: constant 2e-4 after warmup, no weight decay)."""
    num_train_steps: int = 100
    """Global step at which fine-tuning stops."""
    batch_size: int = 8
    """Sequences per step."""
    seq_len: int = 512
    """Tokens per sequence (conversations are packed end to end)."""
    seed: int = 0
    """Adapter initialisation and dropout seed."""
    mesh: MeshConfig = MeshConfig()
    """Device mesh and sharding rule (fsdp shards quantized weights by whole blocks)."""
    compute_dtype: str = "bfloat16"
    """Matmul dtype."""
    trainable_dtype: str = "float32"
    """Storage dtype of trained weights (and of the optimizer state)."""
    frozen_dtype: str = "bfloat16"
    """Storage dtype of the frozen base's floating weights (lora, and qlora's embeddings/norms)."""
    gradient_checkpointing: bool | str = False
    """Remat: False, True/'full', or a policy of models.llama.REMAT_POLICIES ('save_dots', 'save_mlp_gate',
    'offload_mlp', 'every_other', ...: docs/training.md, "Rematerialization")."""
    offload_optimizer_state: bool = False
    """Keep the optimizer state in host memory (pinned_host) between steps."""
    offload_base: bool = False
    """Keep the frozen projections in host memory, fetched to the device one layer at a time."""
    attention_impl: str | None = None
    """None (einsum, any backend), 'xla' or 'cudnn' (fused attention on NVIDIA GPUs)."""
    checkpoint: CheckpointConfig = CheckpointConfig()
    """Checkpoint policies (checkpoints hold the trainable tree and its optimizer state)."""
    eval_max_sequences: int | None = 256
    """Validation windows scored before and after fine-tuning; None scores all."""
    log_every: int = 1
    """Write a metrics line every this many steps."""
    wandb: WandbConfig = WandbConfig()
    """W&B logging."""
    save_merged: bool = True
    """Write merged/ (adapters folded into the base) at the end."""
    export_hf: bool = True
    """Write the merged model to hf/ in Hugging Face format at the end."""
    stop_after_steps: int | None = None
    """Stop after this many steps of this run (preemption drills and tests)."""
    plan_devices: int = 1
    """Devices the dry run's memory plan assumes (all on the fsdp axis)."""
    plan_device_memory_gib: float | None = None
    """Memory per device the plan is checked against (e.g. 24 for an RTX 3090/4090)."""

    @property
    def trains_adapters(self) -> bool:
        return self.mode in ("lora", "qlora")

    def plan_settings(self) -> dict[str, Any]:
        """plan_memory's arguments for this run (all but the model)."""
        return dict(
            mode=_plain(self.mode),
            num_devices=self.plan_devices,
            batch_size=_plain(self.batch_size),
            seq_len=_plain(self.seq_len),
            lora=_plain(self.lora),
            quant=_plain(self.quant),
            compute_dtype=_plain(self.compute_dtype),
            trainable_dtype=_plain(self.trainable_dtype),
            frozen_dtype=_plain(self.frozen_dtype),
            gradient_checkpointing=self.gradient_checkpointing,
            offload_optimizer_state=self.offload_optimizer_state,
            offload_base=self.offload_base,
            param_sharding=self.mesh.param_sharding,
            attention_impl=self.attention_impl,
        )

    def _plan_model(self) -> LlamaConfig:
        model = _plain(self.model)
        if model is None:
            raise ValueError("set `model` to the base's shape for a memory plan (the dry run does not read the base)")
        return model

    def memory_plan(self) -> Any:
        """The per-device MemoryPlan of this run (needs `model`: a dry run does not read the base)."""
        return plan_memory(self._plan_model(), **self.plan_settings())

    def fit_advice(self) -> list[str]:
        """What to change when the plan does not fit `plan_device_memory_gib` (empty when it fits)."""
        if not self.plan_device_memory_gib or self.memory_plan().fits(self.plan_device_memory_gib):
            return []
        return fit_advice(self.plan_settings(), self._plan_model(), self.plan_device_memory_gib)

    def plan_estimate(self) -> dict[str, Any]:
        """The dry run's line: per-device memory by part (GiB), steady state and load, and whether it fits."""
        plan = self.memory_plan()
        out: dict[str, Any] = {
            "mode": _plain(self.mode),
            "devices": self.plan_devices,
            "device_gib": round(plan.device_total / 2**30, 2),
            "load_device_gib": round(plan.load_device_total / 2**30, 2),
            "load_host_gib": round(plan.load_host_total / 2**30, 2),
        }
        out.update({k.split(" (")[0].replace(" ", "_") + "_gib": round(v / 2**30, 2) for k, v in plan.device.items()})
        out.update({"host_" + k.replace(" ", "_") + "_gib": round(v / 2**30, 2) for k, v in plan.host.items()})
        if self.plan_device_memory_gib:
            out["fits"] = plan.fits(self.plan_device_memory_gib)
            if not out["fits"]:
                out["change"] = self.fit_advice()
        return out


def check_fits(config: FinetuneConfig) -> None:
    """Refuse a run whose memory plan (steady state or load) exceeds `plan_device_memory_gib`."""
    plan = config.memory_plan()
    limit = config.plan_device_memory_gib
    if limit and not plan.fits(limit):
        which = "the train step" if plan.device_total >= plan.load_device_total else "loading the base"
        advice = config.fit_advice()
        raise TrainingError(
            f"memory plan: {which} needs {plan.device_peak / 2**30:.2f} GiB per device, more than "
            f"plan_device_memory_gib={limit:g}; change "
            + ("; or ".join(advice) if advice else "the model, the mesh or the device")
        )


def _plain(value: Any) -> Any:
    """The value inside a `versioned(...)` wrapper (dry runs see unresolved configs), or the value."""
    return value.value if type(value).__name__ == "VersionedValue" else value


def _open_base(config: FinetuneConfig) -> BaseSource:
    """The base located and checked (config, headers, metadata), no weight read yet."""
    try:
        return open_base(config.base, config.model)
    except ckpt.CheckpointError as err:
        raise TrainingError(f"base: {err}") from err


def validate_config(config: FinetuneConfig, model: LlamaConfig) -> None:
    """Everything that can be checked before compiling; raises TrainingError naming the field."""
    check_settings(config, model)
    for name, path in config.data.caches.items():
        try:
            cache = TokenCache(path)
        except TokenCacheError as err:
            raise TrainingError(f"data.caches[{name!r}]: {err}") from err
        if cache.vocab_size > model.resolved_vocab_size:
            raise TrainingError(
                f"data.caches[{name!r}] has vocab_size {cache.vocab_size} but the base's "
                f"model.vocab_size is {model.vocab_size}; tokenize with the base's tokenizer"
            )


def check_settings(config: FinetuneConfig, model: LlamaConfig) -> None:
    """The checks that read no data (also what `marin-lab compile` checks before any data exists)."""
    if config.mode not in MODES:
        raise TrainingError(f"mode={config.mode!r} is not one of {MODES}")
    try:
        model.validate()
        config.optimizer.validate()
        config.wandb.resolved_mode()
        if config.trains_adapters:
            config.lora.validate(model)
    except (ValueError, LoraError) as err:
        raise TrainingError(str(err)) from err
    if config.mode == "qlora":
        config.quant.validate(model)
    if config.gradient_checkpointing not in (True, False, *REMAT_POLICIES):
        raise TrainingError(
            f"gradient_checkpointing={config.gradient_checkpointing!r}: expected a bool or one of {REMAT_POLICIES}"
        )
    if config.offload_base and not config.trains_adapters:
        raise TrainingError("offload_base needs mode 'lora' or 'qlora' (in 'full' mode nothing is frozen)")
    if not 2 <= config.seq_len <= model.max_seq_len:
        raise TrainingError(f"seq_len={config.seq_len} must be in [2, model.max_seq_len={model.max_seq_len}]")
    if config.num_train_steps < 1:
        raise TrainingError(f"num_train_steps={config.num_train_steps} must be positive")


def step_plan(config: FinetuneConfig, model: LlamaConfig) -> StepPlan:
    """What the compiled step depends on (shared with `marin-lab compile`)."""
    return StepPlan(
        config.mode,
        model,
        config.lora,
        config.compute_dtype,
        config.gradient_checkpointing,
        config.offload_optimizer_state,
        config.seed,
        config.attention_impl,
    )


@programs
def _programs(
    plan: StepPlan,
    optimizer_config: OptimizerConfig,
    num_train_steps: int,
    mesh_config: MeshConfig,
    rule: str,
    frozen_struct: Any,
    trainable_struct: Any,
) -> tuple:
    """(state shardings, frozen shardings, opt init, step, eval) for one plan (compiled once per
    process: `trainer.programs`)."""
    mesh = mesh_config.build()
    optimizer = optimizer_config.build()
    state_sh, frozen_sh, step = build_step(
        plan,
        optimizer,
        optimizer_config.lr_schedule(num_train_steps),
        mesh,
        rule,
        frozen_struct.value,
        trainable_struct.value,
    )
    opt_init = jax.jit(optimizer.init, in_shardings=(state_sh["trainable"],), out_shardings=state_sh["opt_state"])
    return state_sh, frozen_sh, opt_init, step, make_eval_fn(plan, mesh)


class _Struct:
    """A hashable stand-in for an abstract pytree (its structure, shapes and dtypes)."""

    def __init__(self, value: Any):
        value = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), value)
        self.value = value
        leaves, treedef = jax.tree_util.tree_flatten(value)
        self._key = (treedef, tuple((tuple(x.shape), str(x.dtype)) for x in leaves))

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Struct) and self._key == other._key


def _global(host: np.ndarray, sharding: Any) -> jax.Array:
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def evaluate_masked(eval_fn: Any, trainable: Any, frozen: Any, config: FinetuneConfig) -> dict[str, float]:
    """Mean masked NLL over evenly spaced validation windows of each cache: {name: loss}."""
    out = {}
    for name in sorted(config.data.caches):
        split = TokenCache(config.data.caches[name]).split(config.data.validation_split, config.seq_len)
        n = (
            split.num_sequences
            if config.eval_max_sequences is None
            else min(split.num_sequences, config.eval_max_sequences)
        )
        if n == 0:
            continue
        idx = np.unique(np.linspace(0, split.num_sequences - 1, n).astype(np.int64))
        tokens, masks = split.sequences(idx), split.loss_masks(idx)
        nll, count = 0.0, 0.0
        for lo in range(0, len(idx), config.batch_size):
            a, b = eval_fn(
                trainable,
                frozen,
                jnp.asarray(tokens[lo : lo + config.batch_size]),
                jnp.asarray(masks[lo : lo + config.batch_size]),
            )
            nll, count = nll + float(a), count + float(b)
        if count:
            out[name] = nll / count
    return out


@reproducibility(
    non_artifacts=("wandb/*", *ckpt.RUN_LOG_FILES),
    volatile_fields={
        METRICS_FILE: ("time", "tokens_per_s", *WALL_CLOCK_FIELDS),
        "finetune_summary.json": ("tokens_per_s",),
        **ckpt.VOLATILE_FIELDS,
    },
)
def finetune_lm(config: FinetuneConfig) -> dict[str, Any]:
    """Fine-tune `config.base` on `config.data`; returns the run summary."""
    trainer = Trainer(loop_config(config), config, logger=logger)  # joins the step's JAX cluster first
    source = _open_base(config)
    model = source.model
    validate_config(config, model)
    quantized = source.quantization
    if quantized is not None and config.mode != "qlora":
        raise TrainingError(f"base {config.base} is NF4-quantized; it can only be fine-tuned with mode='qlora'")
    mesh_config = distributed.mesh_for_hardware(config.mesh)
    try:
        mesh = mesh_config.build()
    except MeshError as err:
        raise TrainingError(str(err)) from err
    if config.batch_size % batch_divisor(mesh):
        raise TrainingError(
            f"batch_size={config.batch_size} must be divisible by mesh replica*data*fsdp={batch_divisor(mesh)}"
        )
    if config.plan_device_memory_gib:  # refuse now what would run out of memory later
        check_fits(dataclasses.replace(config, model=model, plan_devices=mesh.shape["fsdp"]))
    try:
        loader = MixtureLoader(config.data, config.seq_len, config.batch_size)
    except (TokenCacheError, ValueError) as err:
        raise TrainingError(str(err)) from err

    plan = step_plan(config, model)
    trainable_dtype = jnp.dtype(config.trainable_dtype)
    quant = (
        QuantConfig(block_size=quantized["block_size"], double_quant=quantized["double_quant"])
        if quantized
        else config.quant
    )
    params_abs = jax.eval_shape(lambda: init_params(model, jax.random.key(0)))
    if config.mode == "qlora":
        params_abs = jax.eval_shape(lambda p: quantize_params(p, quant), params_abs)
    frozen_abs = (
        None
        if config.mode == "full"
        else jax.eval_shape(lambda p: frozen_base(p, config.mode, config.frozen_dtype, config.offload_base), params_abs)
    )
    trainable_abs = jax.eval_shape(lambda p: init_trainable(plan, p, jax.random.key(0), trainable_dtype), params_abs)
    state_sh, frozen_sh, opt_init, step_fn, eval_fn = _programs(
        plan,
        config.optimizer,
        config.num_train_steps,
        mesh_config,
        mesh_config.param_sharding,
        _Struct(frozen_abs),
        _Struct(trainable_abs),
    )
    if config.mode == "full":  # every weight is trained: the whole base becomes the trainable tree
        _, base_params, _ = load_base(config.base, config.model)
        frozen = None
    else:  # the frozen base streams into its shardings; only modules_to_save are read whole
        started = time.perf_counter()
        assert frozen_abs is not None  # set for every mode but full, above
        frozen = load_frozen(source, frozen_abs, frozen_sh, quant)
        base_params = load_saved(source, config.lora.saved(model))
        logger.info(
            "finetune_lm: base %s (%s) placed in %.1f s", config.base, source.kind, time.perf_counter() - started
        )

    start = trainer.initial_state(functools.partial(_fresh_state, config, plan, base_params, state_sh, opt_init))
    del base_params
    state, how, start_step = start.state, start.how, start.step
    eval_before = _eval_before(config, eval_fn, state["trainable"], frozen, start_step)
    logger.info(
        "finetune_lm %s (%s): %s at step %d of %d; %s trainable parameters",
        config.output_path,
        config.mode,
        how,
        start_step,
        config.num_train_steps,
        f"{sum(x.size for x in jax.tree_util.tree_leaves(state['trainable'])):,}",
    )

    batch_sh = batch_sharding(mesh)
    meta = {
        "model": dataclasses.asdict(model),
        "mode": config.mode,
        "base": config.base,
        "lora": dataclasses.asdict(config.lora) if config.trains_adapters else None,
        **_chat_metadata(config.data),
    }

    def batch(step: int) -> tuple[Any, jax.Array, jax.Array]:  # the frozen weights ride with each batch
        tokens, masks = loader.batch(step, loss_mask=True)
        return frozen, _global(tokens, batch_sh), _global(masks.astype(np.int32), batch_sh)

    result = trainer.train(
        state,
        step_fn,
        batch,
        checkpoint_metadata=lambda step: {**meta, "step": step},
    )
    final_step = result.final_step
    finished = final_step == config.num_train_steps
    eval_after = evaluate_masked(eval_fn, result.state["trainable"], frozen, config) if finished else {}
    merged_path = hf_path = None
    if finished and (config.save_merged or config.export_hf):
        merged = _merged_params(config, result.state["trainable"], frozen)
        if config.save_merged:
            merged_path = mfs.join(config.output_path, "merged")
            ckpt.save_checkpoint(
                ckpt.step_dir(mfs.join(merged_path, "checkpoints"), final_step),
                {"params": merged},
                {**meta, "step": final_step},
            )
        if config.export_hf:
            hf_path = trainer.export_hf(model, param_leaves(merged), chat_template=meta.get("chat", {}).get("template"))
    if finished:
        mfs.write_json(mfs.join(config.output_path, "eval.json"), {"before": eval_before, "after": eval_after})
    summary = trainer.finish(
        result,
        {
            "mode": config.mode,
            "final_step": final_step,
            "num_train_steps": config.num_train_steps,
            "start": how,
            "final_loss": result.last.get("loss"),
            "eval_loss_before": eval_before,
            "eval_loss_after": eval_after,
            "tokens_per_s": result.tokens_per_s,
            "trainable_params": int(sum(x.size for x in jax.tree_util.tree_leaves(result.state["trainable"]))),
            "bytes": state_bytes(result.state, frozen),
            "checkpoint": result.checkpoint,
            "merged_path": merged_path,
            "hf_path": hf_path,
            "metrics_path": result.metrics.url,
        },
    )
    logger.info(
        "finetune_lm %s: step %d, eval loss %s -> %s",
        config.output_path,
        summary["final_step"],
        eval_before,
        summary["eval_loss_after"],
    )
    return summary


def _fresh_state(
    config: FinetuneConfig, plan: StepPlan, base_params: Any, state_sh: dict[str, Any], opt_init: Any
) -> dict[str, Any]:
    """Step 0: new adapters (or the base itself, full mode) in their shardings, and their optimizer state."""
    trainable = jax.device_put(
        init_trainable(plan, base_params, jax.random.key(config.seed), jnp.dtype(config.trainable_dtype)),
        state_sh["trainable"],
    )
    return {
        "trainable": trainable,
        "opt_state": opt_init(trainable),
        "step": jax.device_put(jnp.zeros((), jnp.int32), state_sh["step"]),
    }


def loop_config(config: FinetuneConfig) -> LoopConfig:
    """The Trainer's part of a finetune_lm config."""
    return LoopConfig(
        name="finetune_lm",
        output_path=config.output_path,
        num_train_steps=config.num_train_steps,
        tokens_per_step=config.batch_size * config.seq_len,
        checkpoint=config.checkpoint,
        wandb=config.wandb,
        summary_file="finetune_summary.json",
        log_every=config.log_every,
        stop_after_steps=config.stop_after_steps,
        tokenizer_cache=config.data.caches[sorted(config.data.caches)[0]] if config.data.caches else None,
    )


def _chat_metadata(data: DataConfig) -> dict[str, Any]:
    """{"chat": template, bos/eos ids, cache name} of the first instruction cache (its ledger holds the
    chat template it was rendered with), so generation formats prompts as the fine-tune saw them; {} if none."""
    for name in sorted(data.caches):
        ledger = TokenCache(data.caches[name]).ledger
        if isinstance(ledger.get("template"), dict):
            return {
                "chat": {
                    "template": ledger["template"],
                    "bos_id": ledger.get("bos_id"),
                    "eos_id": ledger.get("eos_id"),
                    "cache": name,
                }
            }
    return {}


def _eval_before(
    config: FinetuneConfig, eval_fn: Any, trainable: Any, frozen: Any, start_step: int
) -> dict[str, float]:
    """The un-fine-tuned model's validation loss (recorded by the first run, reused on resume)."""
    url = mfs.join(config.output_path, "eval_before.json")
    if start_step and mfs.exists(url):
        return mfs.read_json(url)
    if start_step:
        return {}
    scores = evaluate_masked(eval_fn, trainable, frozen, config)
    mfs.write_json(url, scores)
    return scores


def _merged_params(config: FinetuneConfig, trainable: Any, frozen: Any) -> Any:
    if config.mode == "full":
        return jax.device_get(trainable)
    unwrapped = jax.tree_util.tree_map(
        lambda w: w.inner if hasattr(w, "inner") else w, frozen, is_leaf=lambda w: hasattr(w, "inner")
    )
    return jax.device_get(jax.jit(lambda f, t: merge_lora(f, t, config.lora))(unwrapped, trainable))


def state_bytes(state: dict[str, Any], frozen: Any) -> dict[str, int]:
    """Bytes of each part, counted from the pytrees (global sizes, not per device)."""

    def count(tree: Any) -> int:
        return int(sum(x.size * jnp.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(tree)))

    return {
        "frozen": count(frozen) if frozen is not None else 0,
        "trainable": count(state["trainable"]),
        "optimizer": count(state["opt_state"]),
    }
