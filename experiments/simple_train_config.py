"""`SimpleTrainConfig`: the training knobs of one run in one value, as in Marin.

`default_train(name, tokenized, model_config, train_config)` turns it into a `train_lm` step.
Fields left None take marin_lab's defaults (`OptimizerConfig`: warmup-stable-decay, weight decay
0.1, beta2 0.95). Resources use Marin's spellings (`marin_lab.resources`: `CpuOnlyConfig`, `GpuConfig`,
`TpuPodConfig`; also importable from here) or marin_lab's (`CpuResources`, `GpuResources`, `TpuResources`, a dict of Ray options).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from marin_lab.resources import CpuOnlyConfig, GpuConfig, TpuPodConfig, step_resources
from marin_lab.training import CheckpointConfig, MeshConfig, OptimizerConfig

__all__ = ["CpuOnlyConfig", "GpuConfig", "SimpleTrainConfig", "TpuPodConfig"]


@dataclasses.dataclass(frozen=True)
class SimpleTrainConfig:
    """What a training run needs beyond its data and model shape."""

    resources: Any
    """CpuOnlyConfig, GpuConfig, TpuPodConfig, or marin_lab's resources (a dict of Ray options, TpuResources, ...)."""
    train_batch_size: int
    """Sequences per step, across all devices."""
    num_train_steps: int
    """Global step at which training stops."""
    learning_rate: float
    """Peak learning rate."""
    weight_decay: float | None = None
    beta1: float | None = None
    beta2: float | None = None
    epsilon: float | None = None
    max_grad_norm: float | None = None
    warmup: float | None = None
    """A fraction of the run if < 1, else steps."""
    decay: float | None = None
    """WSD's final decay: a fraction of the run if < 1, else steps."""
    lr_schedule: str | None = None
    """'wsd', 'cosine', 'linear' or 'constant'."""
    min_lr_ratio: float | None = None
    z_loss_weight: float | None = None
    optimizer_config: OptimizerConfig | None = None
    """A whole optimizer (used as it is, learning_rate included); the single fields above then stay None."""
    data_seed: int | None = None
    """Data-order seed (None: 0)."""
    seed: int = 0
    """Parameter-initialisation seed."""
    train_seq_len: int | None = None
    """Tokens per sequence; None: the model's max_seq_len."""
    steps_per_eval: int | None = None
    """Validation loss every this many steps (and at the end); None: every 1000 steps."""
    max_eval_batches: int | None = None
    """At most this many batches per validation set; None: all."""
    steps_per_export: int = 10_000
    """A checkpoint every this many steps, kept for good (besides one every 10 minutes, rotated)."""
    initialize_from_checkpoint_path: Any = None
    """Start from a checkpoint: a train step (its latest checkpoint), an output_path_of(...) or a path."""
    compute_dtype: str | None = None
    """None: bfloat16, or float32 on CpuOnlyConfig (CPUs have no fast bfloat16)."""
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    """Device mesh and parameter sharding."""
    microbatches: int = 1
    """Gradient accumulation."""
    gradient_checkpointing: bool = False
    """Recompute activations on the backward pass (less memory, ~1/3 more FLOPs)."""
    attention_impl: str | None = None
    """None: 'splash' (the Pallas TPU kernel) when the resources are TPUs, einsum elsewhere; or one of
    'einsum', 'xla', 'cudnn', 'splash' (docs/training.md, "Attention")."""
    checkpoint: CheckpointConfig | None = None
    """Replaces the checkpoint policy derived from steps_per_export."""

    def optimizer(self) -> OptimizerConfig:
        """The optimizer these fields describe."""
        fields = {"learning_rate": self.learning_rate, "weight_decay": self.weight_decay, "beta1": self.beta1,
                  "beta2": self.beta2, "epsilon": self.epsilon, "max_grad_norm": self.max_grad_norm,
                  "warmup": self.warmup, "decay": self.decay, "schedule": self.lr_schedule,
                  "min_lr_ratio": self.min_lr_ratio}
        if self.optimizer_config is not None:
            extra = sorted(k for k, v in fields.items() if v is not None and k != "learning_rate")
            if extra:
                raise ValueError(f"SimpleTrainConfig: give either optimizer_config or {', '.join(extra)}, not both")
            return self.optimizer_config
        return OptimizerConfig(**{k: v for k, v in fields.items() if v is not None})

    def checkpoints(self) -> CheckpointConfig:
        """The checkpoint policy: `checkpoint`, else Marin's (rotated every 10 min, kept every steps_per_export)."""
        if self.checkpoint is not None:
            return self.checkpoint
        return CheckpointConfig(save_every_steps=self.steps_per_export, keep_every_steps=self.steps_per_export,
                                save_interval_s=600.0, keep_last=1)

    def step_resources(self) -> tuple[Any, str | None, int]:
        """(the step's resources, the TPU type and slice count for the dry run's estimate)."""
        return step_resources(self.resources)

    def resolved_attention_impl(self) -> str | None:
        if self.attention_impl is not None:
            return self.attention_impl
        # The TPU type is what the step declares it runs on (TpuPodConfig or TpuResources).
        return "splash" if self.step_resources()[1] is not None else None

    def resolved_compute_dtype(self) -> str:
        if self.compute_dtype is not None:
            return self.compute_dtype
        return "float32" if isinstance(self.resources, CpuOnlyConfig) else "bfloat16"
