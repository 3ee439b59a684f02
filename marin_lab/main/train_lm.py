"""`train_lm`: the training step function. Reads top to bottom: check, build, resume, train, export.

It keeps what is particular to pretraining (the sharded state's init, the compiled step, the data
mixture, the metrics line, the summary's fields); the `Trainer` (training/trainer.py) owns the rest:
joining the hosts, resume, the program cache, the loop, hooks and checkpoints, the HF export tail
and writing the summary.

Resume: if `{output_path}/checkpoints` holds a complete checkpoint, training continues from the
newest one process 0 lists (every host restores that one); the data order is a function of the
step number, so the continued run is bit-identical to one that never stopped (same hardware,
software and device count).

Evaluation during training (validation loss and bits per byte, lm-eval tasks) is two hooks that
marin_lab.evaluation.during_training builds from the config; `train_lm` registers them on its
Trainer itself. As Levanter's `levanter.main.train_lm`, this module sits above both the loop
(training/) and the scorers (evaluation/, which imports training/ and never the other way).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import platform
import time
from typing import Any

import jax

# Numerics depend on this flag; fix it before any JAX operation runs in this process.
jax.config.update("jax_enable_x64", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from marin_lab.evaluation.during_training import training_hooks  # noqa: E402
from marin_lab.execution.record.artifacts import reproducibility  # noqa: E402
from marin_lab.models.attention import AttentionConfigError, check_attention  # noqa: E402
from marin_lab.models.llama import check_remat  # noqa: E402
from marin_lab.precision import masters  # noqa: E402
from marin_lab.precision.scalify_train import overflow_message as scalify_overflow  # noqa: E402
from marin_lab.store.layout import METRICS_FILE  # noqa: E402
from marin_lab.training import checkpoint as ckpt  # noqa: E402
from marin_lab.training import distributed  # noqa: E402
from marin_lab.training.config import TrainLmConfig, check_batch, step_settings  # noqa: E402
from marin_lab.training.data import MixtureLoader, held_out, validation_windows  # noqa: E402
from marin_lab.training.errors import TrainingError  # noqa: E402
from marin_lab.training.mesh import MeshError, batch_sharding  # noqa: E402
from marin_lab.training.metrics import WALL_CLOCK_FIELDS, device_peak_flops, mfu  # noqa: E402
from marin_lab.training.token_cache import TokenCache, TokenCacheError  # noqa: E402
from marin_lab.training.train_step import StepSettings, build_step, make_init_fn  # noqa: E402
from marin_lab.training.trainer import LoopConfig, Start, Trainer, programs  # noqa: E402

logger = logging.getLogger(__name__)


def validate_config(config: TrainLmConfig) -> None:
    """Everything that can be checked before compiling: raises TrainingError naming the field."""
    if not config.output_path:
        raise TrainingError("output_path is empty; give the step's output folder (this_output_path() in a recipe)")
    try:
        config.model.validate()
        config.optimizer.validate()
        config.precision.validate(config.model.param_shapes())
        config.precision.check_backend()
        config.wandb.resolved_mode()
    except ValueError as err:
        raise TrainingError(str(err)) from err
    try:
        check_remat(config.gradient_checkpointing)
    except ValueError as err:
        raise TrainingError(str(err)) from err
    try:
        check_attention(
            config.attention_impl,
            seq_len=config.seq_len,
            num_heads=config.model.num_heads,
            num_kv_heads=config.model.num_kv_heads,
            platform=jax.default_backend(),
        )
    except AttentionConfigError as err:
        raise TrainingError(str(err)) from err
    if config.loss_chunk_size is not None and config.loss_chunk_size < 1:
        raise TrainingError(f"loss_chunk_size={config.loss_chunk_size} must be positive (or None: no chunks)")
    if config.seq_len > config.model.max_seq_len:
        raise TrainingError(
            f"seq_len={config.seq_len} is larger than model.max_seq_len={config.model.max_seq_len}; "
            "lower seq_len or use a model with a longer context"
        )
    if config.seq_len < 2:
        raise TrainingError(f"seq_len={config.seq_len} must be at least 2")
    if config.num_train_steps < 1:
        raise TrainingError(f"num_train_steps={config.num_train_steps} must be positive")
    if config.microbatches < 1 or config.batch_size % config.microbatches:
        raise TrainingError(f"batch_size={config.batch_size} is not divisible by microbatches={config.microbatches}")
    if config.compute_dtype not in ("bfloat16", "float32", "float16"):
        raise TrainingError(f"compute_dtype={config.compute_dtype!r} must be bfloat16, float16 or float32")
    split = config.data.validation_split
    for name, path in config.data.caches.items():
        try:
            cache = TokenCache(path)
        except TokenCacheError as err:
            raise TrainingError(f"data.caches[{name!r}]: {err}") from err
        if cache.vocab_size > config.model.resolved_vocab_size:
            raise TrainingError(
                f"data.caches[{name!r}] has vocab_size {cache.vocab_size} but model.vocab_size is "
                f"{config.model.vocab_size}; use a model whose vocabulary covers the tokenizer"
            )
        # As Marin does, a training cache whose validation split came out empty (a small corpus,
        # a small validation_fraction) is trained on without validation, with a warning.
        if config.steps_per_eval and split in cache.splits and validation_windows(cache, split, config.seq_len) == 0:
            logger.warning(
                "train_lm %s: data.caches[%r] has no %s window of %d tokens (%s); training without "
                "validation on it: raise validation_fraction in its tokenize step (or lower seq_len) to "
                "evaluate it",
                config.output_path,
                name,
                split,
                config.seq_len + 1,
                held_out(cache) or "validation_fraction not recorded",
            )
    for name, path in config.eval_caches.items() if config.steps_per_eval else ():
        try:
            cache = TokenCache(path)
            windows = cache.split(split, config.seq_len).num_sequences
        except TokenCacheError as err:
            raise TrainingError(f"validation set {name!r}: {err}") from err
        if windows == 0:
            note = held_out(cache)
            raise TrainingError(
                f"validation set {name!r} ({path}) has no {split} window of {config.seq_len + 1} tokens"
                f"{f' ({note})' if note else ''}; lower seq_len, raise validation_fraction in its tokenize "
                "step, or drop it from the validation sets"
            )


def _environment(mesh: Any) -> dict[str, Any]:
    devices = jax.devices()
    return {
        "mesh": dict(mesh.shape),
        "jax": jax.__version__,
        "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else _jaxlib_version(),
        "backend": jax.default_backend(),
        "device_count": len(devices),
        "device_kind": devices[0].device_kind,
        "process_count": jax.process_count(),
        "local_device_count": jax.local_device_count(),
        "python": platform.python_version(),
    }


def _jaxlib_version() -> str:
    import jaxlib

    return jaxlib.__version__


def _initialized_from(config: TrainLmConfig, initialize_from: str, template: Any) -> Start:
    """The state of `initialize_from`'s checkpoint in `template`'s shardings (a run with no
    checkpoint of its own starts there), with the data position that run had reached."""
    path = ckpt.resolve_checkpoint(initialize_from)
    meta = ckpt.read_metadata(path)
    _check_model_metadata(config, meta, path)
    state = ckpt.load_checkpoint(path, template)
    if config.reset_optimizer_state:
        state = {**state, "opt_state": template["opt_state"]}
    base = {"step": int(meta["step"]), "offsets": meta.get("data_consumed", {})}
    return Start(state, f"initialized from {path}", path, {"data_base": base, "hardware": meta.get("hardware", [])})


@programs
def _programs(
    model: Any, optimizer_config: Any, num_train_steps: int, settings: StepSettings, mesh_config: Any
) -> tuple[Any, Any, Any]:
    """(state shardings, init fn, train step) for one set of frozen configs (compiled once per
    process: `trainer.programs`)."""
    mesh = mesh_config.build()
    optimizer = optimizer_config.build(moments=settings.precision.optimizer_state)
    shardings, step_fn = build_step(
        model, optimizer, optimizer_config.lr_schedule(num_train_steps), settings, mesh, mesh_config.param_sharding
    )
    init_fn = make_init_fn(model, optimizer, shardings, jnp.dtype(settings.param_dtype), settings.precision)
    return shardings, init_fn, step_fn


def _check_start_checkpoint(config: TrainLmConfig, own: str | None) -> None:
    """Refuse a checkpoint of another model shape before anything is compiled (`own`: the run's
    agreed latest checkpoint)."""
    path = own or (ckpt.resolve_checkpoint(config.initialize_from) if config.initialize_from else None)
    if path:
        _check_model_metadata(config, ckpt.read_metadata(path), path)


def _check_model_metadata(config: TrainLmConfig, meta: dict[str, Any], path: str) -> None:
    saved = meta.get("model")
    if saved is not None and saved != dataclasses.asdict(config.model):
        diff = {k: (saved.get(k), v) for k, v in dataclasses.asdict(config.model).items() if saved.get(k) != v}
        raise TrainingError(
            f"checkpoint {path} was written by a different model shape: model fields "
            f"{', '.join(f'{k}: {a!r} (checkpoint) vs {b!r} (config)' for k, (a, b) in diff.items())}; "
            "use a matching `model` config or another output_path"
        )


# What of a train_lm step's output is a run log (for `marin-lab reproduce`).
# The parameters are compared bit for bit through train_summary.json's param_checksum; see
# checkpoint.RUN_LOG_FILES for why orbax's array store is not.
NON_ARTIFACTS = ("wandb/*", *ckpt.RUN_LOG_FILES)
# Wall-clock facts and locations: the rest of each line and of the summary must match.
VOLATILE_FIELDS = {
    METRICS_FILE: ("time", "tokens_per_s", "mfu", *WALL_CLOCK_FIELDS),
    "train_summary.json": ("tokens_per_s", "mfu", "environment", "wandb", "eval.time"),
    **ckpt.VOLATILE_FIELDS,
}


@reproducibility(non_artifacts=NON_ARTIFACTS, volatile_fields=VOLATILE_FIELDS)
def train_lm(config: TrainLmConfig) -> dict[str, Any]:
    """Train (or resume training) a Llama-family LM, evaluating during training as the config asks;
    returns the run summary.

    On a multi-host step every host runs this (one process each, joined through `jax.distributed`
    from the environment the slice runner sets); process 0 writes metrics, W&B, export and summary.
    """
    trainer = Trainer(loop_config(config), config, logger=logger)  # joins the step's JAX cluster first
    validate_config(config)
    hooks = training_hooks(config)  # a bad eval task fails here, before anything compiles
    mesh_config = distributed.mesh_for_hardware(config.mesh)
    try:
        distributed.check_slices(mesh_config.slices)
        mesh = mesh_config.build()
    except MeshError as err:
        raise TrainingError(str(err)) from err
    check_batch(config, mesh)
    env = _environment(mesh)
    try:  # too-short caches and unknown mixture names fail here, before anything compiles
        MixtureLoader(config.data, config.seq_len, config.batch_size)
    except (TokenCacheError, ValueError) as err:
        raise TrainingError(str(err)) from err

    check_model = functools.partial(_check_model_metadata, config)
    try:
        _check_start_checkpoint(config, trainer.resume_checkpoint())
        _shardings, init_fn, step_fn = _programs(
            config.model, config.optimizer, config.num_train_steps, step_settings(config), mesh_config
        )
        key = jax.random.key(config.seed)
        # Resuming needs only the state's shapes and shardings: eval_shape, not a compiled init.
        start = trainer.initial_state(lambda: init_fn(key), check_model, abstract=lambda: jax.eval_shape(init_fn, key))
        if start.checkpoint is None and config.initialize_from:
            start = _initialized_from(config, config.initialize_from, start.state)
    except ckpt.CheckpointError as err:
        raise TrainingError(str(err)) from err
    state, how = start.state, start.how
    data_base = start.metadata.get("data_base", {"step": 0, "offsets": {}})
    start_step = start.step
    # One entry per attempt (and phase): which hardware trained from which step.
    hardware = [*start.metadata.get("hardware", []), {"from_step": start_step, **env}]
    loader = MixtureLoader(
        config.data,
        config.seq_len,
        config.batch_size,
        base_step=int(data_base["step"]),
        base_offsets=data_base.get("offsets"),
    )
    logger.info(
        "train_lm %s: %s at step %d of %d; %d params; %d devices (%s)",
        config.output_path,
        how,
        start_step,
        config.num_train_steps,
        config.model.num_params(),
        env["device_count"],
        env["device_kind"],
    )
    flops_per_token = config.model.flops_per_token(config.seq_len)
    peak = device_peak_flops(env["device_kind"], config.peak_flops_per_device)
    sharding = batch_sharding(mesh)

    def metrics_line(step: int, values: dict[str, float], tps: float) -> dict[str, Any]:
        return {
            "step": step,
            "loss": values["loss"],
            "cross_entropy": values["cross_entropy"],
            "learning_rate": values["learning_rate"],
            "grad_norm": values["grad_norm"],
            "batch_checksum": int(values["batch_checksum"]),
            "tokens_per_s": tps,
            "mfu": mfu(flops_per_token, tps, env["device_count"], peak),
            "time": time.time(),
            **{k: v for k, v in values.items() if k.startswith(("fp8/", "scalify/"))},
        }

    def checkpoint_metadata(step: int) -> dict[str, Any]:
        return {
            "model": dataclasses.asdict(config.model),
            "data_base": data_base,
            "data_consumed": loader.consumed_before(step),
            "environment": env,
            "hardware": hardware,
            "seed": config.seed,
        }

    trainer.add_hooks(hooks)
    result = trainer.train(
        state,
        step_fn,
        lambda step: (_host_batch(loader, step, sharding),),
        metrics_line=metrics_line,
        checkpoint_metadata=checkpoint_metadata,
        check_step=scalify_overflow,
    )  # names the layer, before the loss says only NaN
    final_step, final_checkpoint = result.final_step, result.checkpoint
    hf_path = None
    if config.export_hf and final_step == config.num_train_steps and jax.process_index() == 0:
        if final_checkpoint is None:  # the Trainer saves the last step; say so if that ever fails
            raise TrainingError(
                f"{config.output_path}: export_hf found no complete checkpoint of step "
                f"{final_step} to export from; rerun the step to write it"
            )
        # From the final (sharded) checkpoint, one parameter at a time: nothing is gathered.
        read = functools.partial(ckpt.load_subtree, final_checkpoint, "params", this_process_only=True)
        hf_path = trainer.export_hf(
            config.model,
            masters.export_leaves(read, result.state["params"], config.precision.export_dtype),
            dtype=config.precision.export_dtype,
        )
    tps = result.tokens_per_s
    summary = trainer.finish(
        result,
        {
            "final_step": final_step,
            "num_train_steps": config.num_train_steps,
            "start": how,
            "final_loss": result.last.get("loss"),
            "steps_this_run": final_step - result.start_step,
            "tokens_per_s": tps,
            "mfu": mfu(flops_per_token, tps, env["device_count"], peak) if tps is not None else None,
            "params": config.model.num_params(),
            "checkpoint": final_checkpoint,
            "hf_path": hf_path,
            "metrics_path": result.metrics.url,
            "environment": env,
            "hardware": hardware,
            "eval": result.hook_lines.get("eval"),
            "tasks": result.hook_lines.get("tasks"),
            "param_checksum": _param_checksum(result.state["params"], final_checkpoint),
            "wandb": result.metrics.wandb_info(),
        },
    )
    if jax.process_index() == 0:
        loss, tps = summary["final_loss"], summary["tokens_per_s"]
        logger.info(
            "train_lm %s: step %d/%d, loss %s, %s tokens/s",
            config.output_path,
            summary["final_step"],
            config.num_train_steps,
            f"{loss:.4g}" if isinstance(loss, float) else loss,
            f"{tps:.0f}" if isinstance(tps, float) else tps,
        )
    return summary


def loop_config(config: TrainLmConfig) -> LoopConfig:
    """The Trainer's part of a train_lm config."""
    return LoopConfig(
        name="train_lm",
        output_path=config.output_path,
        num_train_steps=config.num_train_steps,
        tokens_per_step=config.tokens_per_step,
        checkpoint=config.checkpoint,
        wandb=config.wandb,
        summary_file="train_summary.json",
        log_every=config.log_every,
        stop_after_steps=config.stop_after_steps,
        tokenizer_cache=config.data.caches[sorted(config.data.caches)[0]] if config.data.caches else None,
        nonfinite_advice="Lower optimizer.learning_rate, enable z_loss_weight or clipping, or inspect "
        "the data of that step",
    )


def _host_batch(loader: MixtureLoader, step: int, sharding: Any) -> jax.Array:
    """The global batch of `step` as one array; this process reads only the rows its devices hold.

    (device_put of a host array would need every device addressable, which fails on multi-host
    slices; and reading the whole global batch on every host would multiply data reads by hosts.)
    """
    shape = (loader.batch_size, loader.seq_len + 1)
    index_map = sharding.addressable_devices_indices_map(shape)
    rows = sorted({r for index in index_map.values() for r in range(*index[0].indices(shape[0]))})
    local = loader.batch(step, rows=np.asarray(rows, dtype=np.int64))
    position = {r: i for i, r in enumerate(rows)}

    def piece(index: tuple[slice, ...] | None) -> np.ndarray:
        assert index is not None  # jax passes every shard's index for a sharding of this shape
        wanted = [position[r] for r in range(*index[0].indices(shape[0]))]
        return local[wanted][:, index[1]]

    return jax.make_array_from_callback(shape, sharding, piece)


def _param_checksum(params: Any, checkpoint: str | None) -> str:
    """sha256 over every parameter's bytes: equal checksums mean bit-identical parameters.

    Parameters split across hosts are read back from the final checkpoint one leaf at a time (no
    host gathers the model); the bytes hashed are the same either way.
    """
    h = hashlib.sha256()
    if all(leaf.is_fully_addressable for leaf in jax.tree_util.tree_leaves(params)):
        for leaf in jax.tree_util.tree_leaves(jax.device_get(params)):
            h.update(np.ascontiguousarray(leaf).tobytes())
    elif jax.process_index() == 0 and checkpoint:
        for _keys, leaf in sorted(ckpt.iter_arrays(checkpoint, "params"), key=lambda kv: kv[0]):
            h.update(np.ascontiguousarray(leaf).tobytes())
    else:
        return ""
    return h.hexdigest()
