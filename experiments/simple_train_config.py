"""`SimpleTrainConfig`: the training knobs of one run in one value, as in Marin.

`default_train(name, tokenized, model_config, train_config)` turns it into a `train_lm` step. The
optimizer and its schedule are one `OptimizerConfig` (`optimizer`), the value the trainer takes.
Marin's flat spelling still works: `SimpleTrainConfig(..., learning_rate=3e-3, weight_decay=0.05,
lr_schedule="cosine")` folds those keywords into that `OptimizerConfig`, and a keyword left out (or
None) keeps marin_lab's default (warmup-stable-decay, weight decay 0.1, beta2 0.95); reading
`config.learning_rate` (or any other flat name) reads the optimizer. Resources use Marin's
spellings (`marin_lab.resources`: `CpuOnlyConfig`, `GpuConfig`, `TpuPodConfig`; also importable
from here) or marin_lab's (`CpuResources`, `GpuResources`, `TpuResources`, a dict of Ray options).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

from marin_lab.resources import CpuOnlyConfig, GpuConfig, TpuPodConfig, step_resources
from marin_lab.training import CheckpointConfig, MeshConfig, OptimizerConfig
from marin_lab.versioning import field_hints, unknown_field_message

__all__ = ["CpuOnlyConfig", "GpuConfig", "SimpleTrainConfig", "TpuPodConfig"]

FLAT_OPTIMIZER_FIELDS: dict[str, str] = {
    "learning_rate": "learning_rate",
    "weight_decay": "weight_decay",
    "beta1": "beta1",
    "beta2": "beta2",
    "epsilon": "epsilon",
    "max_grad_norm": "max_grad_norm",
    "warmup": "warmup",
    "decay": "decay",
    "lr_schedule": "schedule",
    "min_lr_ratio": "min_lr_ratio",
}
"""Marin's flat keyword -> the `OptimizerConfig` field it sets."""


def _flat_property(flat: str, field: str) -> property:
    return property(lambda self: getattr(self.optimizer, field), doc=f"`optimizer.{field}` (Marin's `{flat}`).")


@field_hints(extra=tuple(FLAT_OPTIMIZER_FIELDS) + ("optimizer_config",))
@dataclasses.dataclass(frozen=True, init=False)
class SimpleTrainConfig:
    """What a training run needs beyond its data and model shape."""

    resources: Any
    """CpuOnlyConfig, GpuConfig, TpuPodConfig, or marin_lab's resources (a dict of Ray options, TpuResources, ...)."""
    train_batch_size: int
    """Sequences per step, across all devices."""
    num_train_steps: int
    """Global step at which training stops."""
    optimizer: OptimizerConfig
    """AdamW and the learning-rate schedule (Marin's flat `learning_rate=`, `weight_decay=`, ... fill it)."""
    z_loss_weight: float | None = None
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
    gradient_checkpointing: bool | str = False
    """Recompute activations on the backward pass (less memory, ~1/3 more FLOPs)."""
    attention_impl: str | None = None
    """None: 'splash' (the Pallas TPU kernel) when the resources are TPUs, einsum elsewhere; or one of
    'einsum', 'xla', 'cudnn', 'splash' (docs/training.md, "Attention")."""
    checkpoint: CheckpointConfig | None = None
    """Replaces the checkpoint policy derived from steps_per_export."""

    def __init__(
        self,
        resources: Any,
        train_batch_size: int,
        num_train_steps: int,
        learning_rate: float | None = None,
        *,
        optimizer: OptimizerConfig | None = None,
        optimizer_config: OptimizerConfig | None = None,
        **fields: Any,
    ):
        """Marin's spelling: `learning_rate` and the other flat optimizer keywords (see the module
        docstring), or `optimizer_config=` (Marin's name for a whole optimizer, used as it is); or
        marin_lab's `optimizer=`, which the flat keywords then adjust field by field."""
        valid = (
            [f.name for f in dataclasses.fields(self)]
            + ["learning_rate", "optimizer_config"]
            + [k for k in FLAT_OPTIMIZER_FIELDS if k != "learning_rate"]
        )
        unknown = [k for k in fields if k not in valid]  # @field_hints names them when other errors come first
        if unknown:  # a misspelt keyword names the closest setting, before anything else is said
            raise TypeError(unknown_field_message("SimpleTrainConfig", unknown, valid))
        flat = {FLAT_OPTIMIZER_FIELDS[k]: fields.pop(k) for k in list(fields) if k in FLAT_OPTIMIZER_FIELDS}
        flat = {k: v for k, v in flat.items() if v is not None}
        if learning_rate is not None:
            flat["learning_rate"] = learning_rate
        if optimizer is not None and optimizer_config is not None:
            raise TypeError("SimpleTrainConfig: give optimizer or optimizer_config (the same thing), not both")
        if optimizer_config is not None:
            # Marin's whole optimizer: its learning_rate is the one given with it; other flat fields conflict.
            extra = sorted(k for k, v in flat.items() if k != "learning_rate")
            if extra:
                raise ValueError(f"SimpleTrainConfig: give either optimizer_config or {', '.join(extra)}, not both")
            optimizer = optimizer_config
        elif optimizer is not None:
            optimizer = dataclasses.replace(optimizer, **flat) if flat else optimizer
        elif "learning_rate" in flat:
            optimizer = OptimizerConfig(**flat)
        else:
            raise TypeError(
                "SimpleTrainConfig: give learning_rate (and any other optimizer field), or "
                "optimizer=OptimizerConfig(...)"
            )
        values = {
            "resources": resources,
            "train_batch_size": train_batch_size,
            "num_train_steps": num_train_steps,
            "optimizer": optimizer,
        }
        for f in dataclasses.fields(self):
            if f.name in values:
                continue
            if f.name in fields:
                values[f.name] = fields.pop(f.name)
            else:
                factory = cast(Callable[[], Any], f.default_factory)  # a field with no default has a factory
                values[f.name] = factory() if f.default is dataclasses.MISSING else f.default
        for name, value in values.items():
            object.__setattr__(self, name, value)

    learning_rate = _flat_property("learning_rate", "learning_rate")
    weight_decay = _flat_property("weight_decay", "weight_decay")
    beta1 = _flat_property("beta1", "beta1")
    beta2 = _flat_property("beta2", "beta2")
    epsilon = _flat_property("epsilon", "epsilon")
    max_grad_norm = _flat_property("max_grad_norm", "max_grad_norm")
    warmup = _flat_property("warmup", "warmup")
    decay = _flat_property("decay", "decay")
    lr_schedule = _flat_property("lr_schedule", "schedule")
    min_lr_ratio = _flat_property("min_lr_ratio", "min_lr_ratio")

    def checkpoints(self) -> CheckpointConfig:
        """The checkpoint policy: `checkpoint`, else Marin's (rotated every 10 min, kept every steps_per_export)."""
        if self.checkpoint is not None:
            return self.checkpoint
        return CheckpointConfig(
            save_every_steps=self.steps_per_export,
            keep_every_steps=self.steps_per_export,
            save_interval_s=600.0,
            keep_last=1,
        )

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
