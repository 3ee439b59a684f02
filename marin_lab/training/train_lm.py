"""`train_lm`: the training step function. Reads top to bottom: check, build, resume, loop, export.

Resume: if `{output_path}/checkpoints` holds a complete checkpoint, training continues from the
newest one; the data order is a function of the step number, so the continued run is bit-identical
to one that never stopped (same hardware, software and device count).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import math
import platform
import time
from typing import Any

import jax

# Numerics depend on this flag; fix it before any JAX operation runs in this process.
jax.config.update("jax_enable_x64", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from marin_lab.execution.artifacts import reproducibility
from marin_lab.io import fs as mfs  # noqa: E402
from marin_lab.precision import masters  # noqa: E402
from marin_lab.precision.scalify_train import overflow_message as scalify_overflow  # noqa: E402
from marin_lab.training import checkpoint as ckpt  # noqa: E402
from marin_lab.training import distributed  # noqa: E402
from marin_lab.training.attention import AttentionConfigError, check_attention  # noqa: E402
from marin_lab.training.config import BACKENDS, TrainLmConfig  # noqa: E402
from marin_lab.training.data import MixtureLoader  # noqa: E402
from marin_lab.training.errors import TrainingError  # noqa: E402
from marin_lab.training.hf_export import export_hf_from_checkpoint  # noqa: E402
from marin_lab.training.mesh import MeshError, batch_divisor, batch_sharding  # noqa: E402
from marin_lab.training.metrics import MetricsLogger, StepTimer, device_peak_flops, mfu  # noqa: E402
from marin_lab.training.token_cache import TokenCache, TokenCacheError  # noqa: E402
from marin_lab.training.train_step import StepSettings, build_step, make_init_fn  # noqa: E402

logger = logging.getLogger(__name__)
# A training progress line (and a metrics.jsonl flush) at most this often.
PRINT_EVERY_S = 10.0


def validate_config(config: TrainLmConfig) -> None:
    """Everything that can be checked before compiling: raises TrainingError naming the field."""
    if not config.output_path:
        raise TrainingError("output_path is empty; give the step's output folder (this_output_path() in a recipe)")
    try:
        config.model.validate()
        config.optimizer.validate()
        config.precision.validate(config.model.param_shapes())
        config.precision.check_backend()
    except ValueError as err:
        raise TrainingError(str(err)) from err
    if config.backend not in BACKENDS:
        raise TrainingError(f"backend={config.backend!r} is not one of {BACKENDS}")
    try:
        check_attention(config.attention_impl, seq_len=config.seq_len, num_heads=config.model.num_heads,
                        num_kv_heads=config.model.num_kv_heads, platform=jax.default_backend())
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
        raise TrainingError(
            f"batch_size={config.batch_size} is not divisible by microbatches={config.microbatches}"
        )
    if config.compute_dtype not in ("bfloat16", "float32", "float16"):
        raise TrainingError(f"compute_dtype={config.compute_dtype!r} must be bfloat16, float16 or float32")
    for name, path in config.data.caches.items():
        try:
            cache = TokenCache(path)
        except TokenCacheError as err:
            raise TrainingError(f"data.caches[{name!r}]: {err}") from err
        if cache.vocab_size > config.model.vocab_size:
            raise TrainingError(
                f"data.caches[{name!r}] has vocab_size {cache.vocab_size} but model.vocab_size is "
                f"{config.model.vocab_size}; use a model whose vocabulary covers the tokenizer"
            )
    if config.eval_tasks:
        from marin_lab.evaluation.multiple_choice import TaskError, load_task

        for task in config.eval_tasks:
            try:
                load_task(task)
            except TaskError as err:
                raise TrainingError(f"eval_tasks: {err}") from err
    for name, path in _validation_sets(config).items():
        try:
            windows = TokenCache(path).split(config.data.validation_split, config.seq_len).num_sequences
        except TokenCacheError as err:
            raise TrainingError(f"validation set {name!r}: {err}") from err
        if windows == 0:
            raise TrainingError(
                f"validation set {name!r} ({path}) has no {config.data.validation_split} window of "
                f"{config.seq_len + 1} tokens; lower seq_len, give it a larger validation split, or drop it"
            )


def _validation_sets(config: TrainLmConfig) -> dict[str, str]:
    """What evaluation during training scores: the training caches that have a validation split,
    and every eval cache."""
    if not config.steps_per_eval:
        return {}
    sets = {name: path for name, path in config.data.caches.items()
            if config.data.validation_split in TokenCache(path).splits}
    return {**sets, **config.eval_caches}


def _evaluate(config: TrainLmConfig, params: Any, step: int) -> dict[str, Any]:
    """eval/<name>/loss and eval/<name>/bpb at `step` (single-process runs)."""
    from marin_lab.evaluation.perplexity import evaluate_cache  # evaluation builds on training

    line: dict[str, Any] = {"step": step, "time": time.time()}
    limit = None if config.max_eval_batches is None else config.max_eval_batches * config.batch_size
    for name, path in sorted(_validation_sets(config).items()):
        r = evaluate_cache(params, config.model, path, split=config.data.validation_split, seq_len=config.seq_len,
                           batch_size=config.batch_size, max_sequences=limit, compute_dtype=config.compute_dtype,
                           name=name)
        line[f"eval/{name}/loss"], line[f"eval/{name}/bpb"] = r["loss"], r["bits_per_byte"]
    logger.info("train_lm %s: eval at step %d: %s", config.output_path, step,
                ", ".join(f"{k} {v:.4f}" for k, v in line.items() if k.endswith("/loss")))
    return line


def _evaluate_tasks(config: TrainLmConfig, params: Any, step: int) -> dict[str, Any]:
    """Each of `config.eval_tasks` scored with the first cache's tokenizer."""
    from marin_lab.evaluation.multiple_choice import evaluate_task, load_task
    from marin_lab.evaluation.perplexity import load_tokenizer

    first = TokenCache(config.data.caches[sorted(config.data.caches)[0]])
    tokenizer = load_tokenizer(first.tokenizer_url())
    if tokenizer is None:
        raise TrainingError(f"eval_tasks need a tokenizer, but cache {first.path} holds no tokenizer.json")
    line: dict[str, Any] = {"step": step, "time": time.time()}
    for task in config.eval_tasks:
        name, examples = load_task(task)
        result = evaluate_task(params, config.model, tokenizer, examples, max_len=config.seq_len,
                               batch_size=config.batch_size, compute_dtype=config.compute_dtype)
        line[f"eval_task/{name}/accuracy"] = result["accuracy"]
    return line


def _environment(mesh: Any) -> dict[str, Any]:
    devices = jax.devices()
    return {"mesh": dict(mesh.shape), "jax": jax.__version__, "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__")
            else _jaxlib_version(), "backend": jax.default_backend(), "device_count": len(devices),
            "device_kind": devices[0].device_kind, "process_count": jax.process_count(),
            "local_device_count": jax.local_device_count(),
            "python": platform.python_version()}


def _jaxlib_version() -> str:
    import jaxlib

    return jaxlib.__version__


def _start_point(config: TrainLmConfig, template: Any) -> tuple[Any, dict[str, Any], str, list[dict[str, Any]]]:
    """(state, data base, how, hardware so far) from this run's latest checkpoint, initialize_from,
    or None.

    `template` carries the shardings of *this* run's mesh: a checkpoint written on other hardware
    is resharded onto it as it is read.
    """
    root = mfs.join(config.output_path, "checkpoints")
    own = ckpt.agreed_latest_checkpoint(root)
    if own:
        meta = ckpt.read_metadata(own)
        _check_model_metadata(config, meta, own)
        state = ckpt.load_checkpoint(own, template)
        return (state, meta.get("data_base", {"step": 0, "offsets": {}}), f"resumed from {own}",
                meta.get("hardware", []))
    if config.initialize_from:
        path = ckpt.resolve_checkpoint(config.initialize_from)
        meta = ckpt.read_metadata(path)
        _check_model_metadata(config, meta, path)
        state = ckpt.load_checkpoint(path, template)
        if config.reset_optimizer_state:
            state = {**state, "opt_state": template["opt_state"]}
        base = {"step": int(meta["step"]), "offsets": meta.get("data_consumed", {})}
        return state, base, f"initialized from {path}", meta.get("hardware", [])
    return None, {"step": 0, "offsets": {}}, "fresh", []


def check_batch(config: TrainLmConfig, mesh: Any) -> None:
    """The global batch splits evenly over the mesh's batch axes and the microbatches."""
    if config.batch_size % (batch_divisor(mesh) * config.microbatches):
        raise TrainingError(
            f"batch_size={config.batch_size} must be divisible by mesh replica*data*fsdp="
            f"{batch_divisor(mesh)} times microbatches={config.microbatches}"
        )


def step_settings(config: TrainLmConfig) -> StepSettings:
    """What the compiled step needs from the run's config (shared with `marin-lab compile`)."""
    return StepSettings(config.compute_dtype, config.param_dtype, config.gradient_checkpointing,
                        config.attention_impl, config.z_loss_weight, config.microbatches, config.precision,
                        config.loss_chunk_size)


@functools.lru_cache(maxsize=8)
def _programs(model: Any, optimizer_config: Any, num_train_steps: int, settings: StepSettings,
              mesh_config: Any, device_ids: tuple[int, ...]) -> tuple[Any, Any, Any]:
    """(state shardings, init fn, train step) for one set of frozen configs.

    Cached so that several runs in one process (tests, phases, sweeps) compile each program once;
    every input is a frozen, hashable config, so equal configs really mean the same program.
    """
    del device_ids  # part of the cache key only: a different device set is a different program
    mesh = mesh_config.build()
    optimizer = optimizer_config.build(moments=settings.precision.optimizer_state)
    shardings, step_fn = build_step(model, optimizer, optimizer_config.lr_schedule(num_train_steps), settings,
                                    mesh, mesh_config.param_sharding)
    init_fn = make_init_fn(model, optimizer, shardings, jnp.dtype(settings.param_dtype), settings.precision)
    return shardings, init_fn, step_fn


def _check_start_checkpoint(config: TrainLmConfig) -> None:
    """Refuse a checkpoint of another model shape before anything is compiled."""
    own = ckpt.latest_checkpoint(mfs.join(config.output_path, "checkpoints"))
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


@reproducibility(
    # The parameters are compared bit for bit through train_summary.json's param_checksum; see
    # checkpoint.RUN_LOG_FILES for why orbax's array store is not.
    non_artifacts=("wandb/*", *ckpt.RUN_LOG_FILES),
    # Wall-clock facts and locations: the rest of each line and of the summary must match.
    volatile_fields={"metrics.jsonl": ("time", "tokens_per_s", "mfu"),
                     "train_summary.json": ("tokens_per_s", "mfu", "environment", "wandb", "eval.time"),
                     **ckpt.VOLATILE_FIELDS},
)
def train_lm(config: TrainLmConfig) -> dict[str, Any]:
    """Train (or resume training) a Llama-family LM; returns the run summary.

    On a multi-host step every host runs this (one process each, joined through `jax.distributed`
    from the environment the slice runner sets); process 0 writes metrics, W&B, export and summary.
    """
    multi_process = distributed.initialize_from_env()
    validate_config(config)
    try:
        distributed.check_slices(config.mesh.slices)
        mesh = config.mesh.build()
    except MeshError as err:
        raise TrainingError(str(err)) from err
    check_batch(config, mesh)
    env = _environment(mesh)
    try:  # too-short caches and unknown mixture names fail here, before anything compiles
        MixtureLoader(config.data, config.seq_len, config.batch_size)
    except (TokenCacheError, ValueError) as err:
        raise TrainingError(str(err)) from err

    settings = step_settings(config)
    try:
        _check_start_checkpoint(config)
        programs = _programs(config.model, config.optimizer, config.num_train_steps, settings,
                             config.mesh, tuple(d.id for d in jax.devices()))
        _shardings, init_fn, step_fn = programs
        fresh = init_fn(jax.random.key(config.seed))
        restored, data_base, how, hardware = _start_point(config, fresh)
    except ckpt.CheckpointError as err:
        raise TrainingError(str(err)) from err
    state = restored if restored is not None else fresh
    start_step = int(jax.device_get(state["step"]))
    # One entry per attempt (and phase): which hardware trained from which step.
    hardware = [*hardware, {"from_step": start_step, **env}]
    loader = MixtureLoader(config.data, config.seq_len, config.batch_size,
                           base_step=int(data_base["step"]), base_offsets=data_base.get("offsets"))
    logger.info("train_lm %s: %s at step %d of %d; %d params; %d devices (%s)", config.output_path,
                how, start_step, config.num_train_steps, config.model.num_params(),
                env["device_count"], env["device_kind"])

    checkpointer = ckpt.Checkpointer(mfs.join(config.output_path, "checkpoints"), config.checkpoint)
    metrics = MetricsLogger(config.output_path, config.wandb, run_name=config.output_path.rstrip("/").rsplit("/", 1)[-1],
                            config_for_wandb=dataclasses.asdict(config), resume_step=start_step)
    flops_per_token = config.model.flops_per_token(config.seq_len)
    peak = device_peak_flops(env["device_kind"], config.peak_flops_per_device)
    end_step = config.num_train_steps
    if config.stop_after_steps is not None:
        end_step = min(end_step, start_step + config.stop_after_steps)

    def checkpoint_metadata(step: int) -> dict[str, Any]:
        return {"model": dataclasses.asdict(config.model), "data_base": data_base,
                "data_consumed": loader.consumed_before(step), "environment": env, "hardware": hardware,
                "seed": config.seed}

    pending: tuple[int, dict[str, jax.Array], float] | None = None
    last: dict[str, Any] = {}
    last_eval: dict[str, Any] | None = None
    # Scoring runs in this process on the whole model: multi-host runs evaluate their checkpoints instead.
    evaluate = bool(_validation_sets(config)) and jax.process_count() == 1
    if config.steps_per_eval and not evaluate:
        logger.warning("train_lm %s: no evaluation during training (%s)", config.output_path,
                       "no validation set" if not _validation_sets(config) else "multi-process run; "
                       "evaluate the checkpoints with an evaluate_lm step")
    tokens_done, train_time = 0, 0.0
    progress = tqdm(total=end_step - start_step, desc="train", unit="step", disable=None)
    printed = [float("-inf")]  # the first logged step is printed (it includes compilation)
    timer = StepTimer()

    def finish_step(step: int, out: dict[str, jax.Array], started: float) -> None:
        """Fetch one step's metrics (after the next step was dispatched, to keep the device busy)."""
        nonlocal tokens_done, train_time, last
        values = {k: float(v) for k, v in jax.device_get(out).items()}
        overflow = scalify_overflow(values, step)  # names the layer, before the loss says only NaN
        if overflow:
            raise TrainingError(overflow)
        if not math.isfinite(values["loss"]):
            raise TrainingError(
                f"loss is {values['loss']} at step {step}; stopping. Lower optimizer.learning_rate, "
                "enable z_loss_weight or clipping, or inspect the data of that step"
            )
        elapsed = timer.finished(started)
        if step > start_step:  # the first step of a run includes compilation
            tokens_done += config.tokens_per_step
            train_time += elapsed
        tps = config.tokens_per_step / elapsed if elapsed > 0 else 0.0
        last = {"step": step, "loss": values["loss"], "cross_entropy": values["cross_entropy"],
                "learning_rate": values["learning_rate"], "grad_norm": values["grad_norm"],
                "batch_checksum": int(values["batch_checksum"]),
                "tokens_per_s": tps, "mfu": mfu(flops_per_token, tps, env["device_count"], peak),
                "time": time.time(), **{k: v for k, v in values.items() if k.startswith(("fp8/", "scalify/"))}}
        if step % config.log_every == 0 or step == end_step - 1:
            metrics.log(last)
            # Workers are not terminals: a line a person can read, and metrics.jsonl kept current,
            # every log_every steps but at most every PRINT_EVERY_S (log_every=1 would flood).
            now = time.monotonic()
            if now - printed[0] >= PRINT_EVERY_S or step == end_step - 1:
                printed[0] = now
                logger.info("train_lm: step %d/%d, loss %.4f, %.0f tokens/s", step + 1, config.num_train_steps,
                            values["loss"], tps)
                metrics.flush()
        progress.update(1)
        progress.set_postfix(loss=f"{values['loss']:.4f}")

    try:
        for step in range(start_step, end_step):
            batch = _host_batch(loader, step, batch_sharding(mesh))
            started = time.perf_counter()
            state, out = step_fn(state, batch)
            if multi_process:
                distributed.maybe_fault(step + 1, config.output_path)
            if pending is not None:
                finish_step(*pending)
            pending = (step, out, started)
            done = step + 1
            if config.steps_per_eval and (done % config.steps_per_eval == 0 or done == end_step) and evaluate:
                finish_step(*pending)
                pending = None
                last_eval = _evaluate(config, masters.plain_params(state["params"]), done)
                metrics.log(last_eval)
            if checkpointer.should_save(done, is_last=done == config.num_train_steps) or done == end_step:
                if pending is not None:  # never checkpoint a state whose loss was not checked
                    finish_step(*pending)
                pending = None
                checkpointer.save(done, state, checkpoint_metadata(done))
                metrics.flush()
        if pending is not None:
            finish_step(*pending)
    finally:
        progress.close()
        metrics.flush()

    final_step = int(jax.device_get(state["step"]))
    task_results = None
    if config.eval_tasks and final_step == config.num_train_steps and jax.process_count() == 1:
        task_results = _evaluate_tasks(config, masters.plain_params(state["params"]), final_step)
        metrics.log(task_results)
        metrics.flush()
    final_checkpoint = ckpt.latest_checkpoint(mfs.join(config.output_path, "checkpoints"))
    hf_path = None
    if config.export_hf and final_step == config.num_train_steps and jax.process_index() == 0:
        # From the final (sharded) checkpoint, one parameter at a time: nothing is gathered.
        first_cache = TokenCache(config.data.caches[sorted(config.data.caches)[0]])
        read = functools.partial(ckpt.load_subtree, final_checkpoint, "params", this_process_only=True)
        hf_path = export_hf_from_checkpoint(final_checkpoint, config.model, mfs.join(config.output_path, "hf"),
                                            tokenizer_url=first_cache.tokenizer_url(),
                                            bos_id=first_cache.ledger.get("bos_id"),
                                            eos_id=first_cache.ledger.get("eos_id"),
                                            leaves=masters.export_leaves(read, state["params"],
                                                                         config.precision.export_dtype),
                                            dtype=config.precision.export_dtype)
    summary = {
        "final_step": final_step, "num_train_steps": config.num_train_steps, "start": how,
        "final_loss": last.get("loss"), "steps_this_run": final_step - start_step,
        "tokens_per_s": tokens_done / train_time if train_time else None,
        "mfu": mfu(flops_per_token, tokens_done / train_time, env["device_count"], peak) if train_time else None,
        "params": config.model.num_params(), "checkpoint": final_checkpoint,
        "hf_path": hf_path, "metrics_path": metrics.url, "environment": env, "hardware": hardware, "eval": last_eval,
        "tasks": task_results,
        "param_checksum": _param_checksum(state["params"], final_checkpoint),
        "wandb": metrics.wandb_info(),
    }
    if jax.process_index() != 0:  # one writer of the summary and of W&B
        return summary
    mfs.write_json(mfs.join(config.output_path, "train_summary.json"), summary)
    metrics.close(summary)
    logger.info("train_lm %s: step %d, loss %s, %s tokens/s", config.output_path, final_step,
                summary["final_loss"], summary["tokens_per_s"])
    return summary


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

    def piece(index: tuple[slice, ...]) -> np.ndarray:
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
