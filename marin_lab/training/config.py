"""TrainLmConfig: everything one training step needs, and its cost estimate for dry runs.

Also what is derived from the config alone and shared by the step (marin_lab.main.train_lm), the
ahead-of-time compile (cluster/tpu_compile.py) and the evaluation hooks (evaluation/during_training.py):
the compiled step's settings, the batch check against a mesh, and the validation sets.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from marin_lab.models.llama import LOSS_CHUNK_SIZE, LlamaConfig
from marin_lab.precision.policy import PrecisionConfig
from marin_lab.training.checkpoint import CheckpointConfig
from marin_lab.training.data import DataConfig, validation_windows
from marin_lab.training.errors import TrainingError
from marin_lab.training.mesh import MeshConfig, batch_divisor
from marin_lab.training.metrics import TPU_PEAK_BY_TYPE, WandbConfig
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.training.token_cache import TokenCache
from marin_lab.training.train_step import StepSettings
from marin_lab.versioning import field_hints, versioned_field


@field_hints
@dataclasses.dataclass(frozen=True)
class TrainLmConfig:
    """A language-model training run (the `train_lm` step's config)."""

    output_path: str
    """Where checkpoints, metrics.jsonl, hf/ and train_summary.json go."""
    data: DataConfig
    """Token caches and their mixture."""
    model: LlamaConfig = versioned_field(default_factory=LlamaConfig)
    """Model shape."""
    optimizer: OptimizerConfig = versioned_field(default_factory=OptimizerConfig)
    """AdamW and the learning-rate schedule."""
    num_train_steps: int = versioned_field(1000)
    """Global step at which training stops."""
    batch_size: int = versioned_field(32)
    """Sequences per step (global, across all devices and microbatches)."""
    seq_len: int = versioned_field(512)
    """Tokens per training sequence (at most model.max_seq_len)."""
    microbatches: int = 1
    """Gradient accumulation: the batch is split into this many sequential microbatches."""
    seed: int = versioned_field(0)
    """Parameter-initialisation seed."""
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    """Device mesh and parameter sharding rule."""
    compute_dtype: str = versioned_field("bfloat16")
    """Matmul/activation dtype ('bfloat16' or 'float32'); parameters stay in param_dtype."""
    param_dtype: str = versioned_field("float32")
    """Storage dtype of parameters and optimizer state."""
    precision: PrecisionConfig = versioned_field(default_factory=PrecisionConfig)
    """Matmul format (compute dtype, fp32, bf16, fp8, fp8_delayed, mxfp8) and Adam's moment format
    (docs/precision.md); the defaults change nothing."""
    gradient_checkpointing: bool | str = False
    """Recompute each block's activations on the backward pass: True/'full' (least memory, the most
    recompute), a policy of `marin_lab.models.llama.REMAT_POLICIES` that keeps some activations
    (docs/training.md, "Rematerialization"), or False. `marin-lab compile --remat all` compares them."""
    attention_impl: str | None = None
    """None (einsum, any backend), 'xla' or 'cudnn' (jax.nn.dot_product_attention; cudnn on NVIDIA
    GPUs), 'splash' (the Pallas TPU kernel; interpreted on CPU): docs/training.md, "Attention"."""
    loss_chunk_size: int | None = LOSS_CHUNK_SIZE
    """Sequence positions per cross-entropy chunk: the fp32 logits exist [batch, this, vocab] at a
    time, forward and backward; None: the whole sequence at once (the same loss up to fp32 sums)."""
    z_loss_weight: float = versioned_field(0.0)
    """Weight of the z-loss (logsumexp^2); 1e-4 is common, 0 disables."""
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    """Checkpoint policies."""
    initialize_from: str | None = versioned_field(None)
    """A checkpoint (or a train step's output path) to start from: a new phase of a longer run."""
    reset_optimizer_state: bool = versioned_field(False)
    """With initialize_from: keep only the parameters, start Adam moments from zero."""
    log_every: int = 1
    """Write a metrics line every this many steps."""
    steps_per_eval: int | None = None
    """Every this many steps and at the end: loss and bits per byte on the validation split of every
    cache in data.caches and eval_caches, logged as eval/<name>/loss and eval/<name>/bpb; None: never."""
    max_eval_batches: int | None = 8
    """At most this many batches of batch_size windows per validation set (evenly spaced); None: all."""
    eval_caches: dict[str, str] = dataclasses.field(default_factory=dict)
    """Validation sets that are evaluated but not trained on: name -> token cache path."""
    eval_tasks: tuple[str, ...] = ()
    """lm-eval tasks (`name[:num_fewshot[:limit]]`, e.g. evaluation.CORE_TASKS) scored with the first
    cache's tokenizer every `steps_per_task_eval` steps and at the end (only at the end when that is
    None); logged as eval/<task>/<metric> and kept in the summary."""
    steps_per_task_eval: int | None = None
    """Every this many steps, the eval_tasks; None: once, when training reaches num_train_steps."""
    eval_task_limit: int | None = 100
    """At most this many items per eval task (a task's own `:limit` wins); None scores all."""
    wandb: WandbConfig = dataclasses.field(default_factory=WandbConfig)
    """W&B logging (offline unless a project and WANDB_API_KEY are set)."""
    export_hf: bool = True
    """Write a Hugging Face checkpoint to {output_path}/hf at the end."""
    peak_flops_per_device: float | None = None
    """Peak FLOP/s for MFU when the device is not in the known table (e.g. a CPU benchmark)."""
    stop_after_steps: int | None = None
    """Stop after this many steps of this run (preemption drills and tests); None: run to the end."""
    tpu_type: str | None = None
    """Accelerator the run is planned for (e.g. 'v5e-256'); used by plan_estimate only."""
    tpu_slices: int = 1
    """Number of such slices."""
    assumed_mfu: float = 0.4
    """MFU assumed by plan_estimate."""

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def plan_estimate(self) -> dict[str, Any]:
        """Tokens, FLOPs (6*N*T + attention) and accelerator-hours, for the executor's dry run.

        The dry run calls this on the unresolved config, where values may still be wrapped by
        `versioned(...)`; they are unwrapped by duck typing (this module never imports the executor).
        """
        model, optimizer = _plain(self.model), _plain(self.optimizer)
        seq_len, batch = _plain(self.seq_len), _plain(self.batch_size)
        start = _plain(optimizer.schedule_offset)
        steps = max(_plain(self.num_train_steps) - start, 0)
        tokens = steps * batch * seq_len
        flops = model.flops_per_token(seq_len) * tokens
        out: dict[str, Any] = {
            "steps": steps,
            "tokens": tokens,
            "params": model.num_params(),
            "flops": float(f"{flops:.4g}"),
            "assumed_mfu": self.assumed_mfu,
        }
        tpu_type = _plain(self.tpu_type)
        chips, peak = tpu_chips_and_peak(tpu_type) if tpu_type else (None, None)
        if chips and peak:
            chips *= _plain(self.tpu_slices)
            seconds = flops / (chips * peak * self.assumed_mfu)
            out.update(
                {
                    "accelerator": f"{tpu_type} x{_plain(self.tpu_slices)}",
                    "chips": chips,
                    "wall_hours": round(seconds / 3600, 1),
                    "accelerator_hours": round(chips * seconds / 3600),
                }
            )
        return out


def _plain(value: Any) -> Any:
    """The value inside a `versioned(...)` wrapper, or the value itself."""
    return value.value if type(value).__name__ == "VersionedValue" else value


def tpu_chips_and_peak(tpu_type: str) -> tuple[int | None, float | None]:
    """Chips and per-chip bf16 peak of a TPU type name ('v5e-256', 'v4-2048', 'v5p-512')."""
    m = re.fullmatch(r"(v\d+[a-z]*|v5litepod)-(\d+)", tpu_type.strip().lower())
    if not m:
        return None, None
    generation, count = m.group(1), int(m.group(2))
    peak = TPU_PEAK_BY_TYPE.get(generation)
    # v4 and v5p names count TensorCores (2 per chip); v5e/v6e names count chips.
    chips = count // 2 if generation in ("v4", "v5p") else count
    return chips, peak


def step_settings(config: TrainLmConfig) -> StepSettings:
    """What the compiled step needs from the run's config (shared with `marin-lab compile`)."""
    return StepSettings(
        config.compute_dtype,
        config.param_dtype,
        config.gradient_checkpointing,
        config.attention_impl,
        config.z_loss_weight,
        config.microbatches,
        config.precision,
        config.loss_chunk_size,
    )


def check_batch(config: TrainLmConfig, mesh: Any) -> None:
    """The global batch splits evenly over the mesh's batch axes and the microbatches."""
    if config.batch_size % (batch_divisor(mesh) * config.microbatches):
        raise TrainingError(
            f"batch_size={config.batch_size} must be divisible by mesh replica*data*fsdp="
            f"{batch_divisor(mesh)} times microbatches={config.microbatches}"
        )


def validation_sets(config: TrainLmConfig) -> dict[str, str]:
    """What evaluation during training scores: the training caches whose validation split holds at
    least one window, and every eval cache."""
    if not config.steps_per_eval:
        return {}
    split = config.data.validation_split
    sets = {
        name: path
        for name, path in config.data.caches.items()
        if validation_windows(TokenCache(path), split, config.seq_len) > 0
    }
    return {**sets, **config.eval_caches}
