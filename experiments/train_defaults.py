"""`default_train` and `default_eval`: wire the trainer and evaluator into ExecutorSteps.

Versioned (enters the identity): what changes the trained weights — the data and its mixture,
the model shape, the optimizer, steps, batch, sequence length, seeds, precision, z-loss and the
checkpoint a phase starts from. Not versioned: how the work is laid out or watched — mesh,
microbatches (same math up to float rounding), gradient checkpointing, checkpoint cadence,
logging, W&B. The lead merges these helpers into experiments/defaults.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from marin_lab.evaluation import EvalLmConfig, evaluate_lm
from marin_lab.execution import ExecutorStep, output_path_of, this_output_path, versioned
from marin_lab.training import (
    CheckpointConfig,
    DataConfig,
    LlamaConfig,
    MeshConfig,
    MixturePhase,
    OptimizerConfig,
    TrainLmConfig,
    WandbConfig,
    train_lm,
)

TokenizedInput = ExecutorStep | Mapping[str, ExecutorStep]
"""One tokenize step, or dataset name -> tokenize step (a mixture)."""


def _caches(tokenized: TokenizedInput) -> dict[str, Any]:
    if isinstance(tokenized, ExecutorStep):
        return {tokenized.name.rsplit("/", 1)[-1]: output_path_of(tokenized)}
    return {name: output_path_of(step) for name, step in tokenized.items()}


def default_train(
    name: str,
    tokenized: TokenizedInput,
    model: LlamaConfig,
    *,
    num_train_steps: int,
    batch_size: int,
    seq_len: int,
    optimizer: OptimizerConfig = OptimizerConfig(),
    weights: Mapping[str, float] | None = None,
    phases: Sequence[MixturePhase] = (),
    initialize_from: ExecutorStep | None = None,
    seed: int = 0,
    data_seed: int = 0,
    compute_dtype: str = "bfloat16",
    z_loss_weight: float = 0.0,
    mesh: MeshConfig = MeshConfig(),
    microbatches: int = 1,
    gradient_checkpointing: bool = False,
    checkpoint: CheckpointConfig = CheckpointConfig(),
    wandb: WandbConfig = WandbConfig(),
    resources: Any = None,
    tpu_type: str | None = None,
    tpu_slices: int = 1,
    description: str | None = None,
) -> ExecutorStep:
    """A `train_lm` step -> `checkpoints/{name}`; `initialize_from` continues an earlier phase."""
    data = DataConfig(
        caches=_caches(tokenized),
        weights=versioned(dict(weights) if weights is not None else None),
        phases=versioned(tuple(phases)),
        seed=versioned(data_seed),
    )
    config = TrainLmConfig(
        output_path=this_output_path(),
        data=data,
        model=versioned(model),
        optimizer=versioned(optimizer),
        num_train_steps=versioned(num_train_steps),
        batch_size=versioned(batch_size),
        seq_len=versioned(seq_len),
        seed=versioned(seed),
        compute_dtype=versioned(compute_dtype),
        z_loss_weight=versioned(z_loss_weight),
        initialize_from=output_path_of(initialize_from, "checkpoints") if initialize_from else None,
        microbatches=microbatches,
        mesh=mesh,
        gradient_checkpointing=gradient_checkpointing,
        checkpoint=checkpoint,
        wandb=dataclasses.replace(wandb, tags=tuple(wandb.tags) + (name,)),
        tpu_type=tpu_type,
        tpu_slices=tpu_slices,
    )
    return ExecutorStep(
        name=f"checkpoints/{name}",
        fn=train_lm,
        config=config,
        description=description or f"train {model.num_params() / 1e6:,.0f}M-parameter model, "
                                   f"{num_train_steps} steps x {batch_size} x {seq_len} tokens",
        resources=resources,
    )


def default_eval(
    name: str,
    trained: ExecutorStep,
    tokenized: TokenizedInput,
    *,
    tasks: Sequence[str] = ("capitals", "arithmetic_2digit"),
    seq_len: int = 512,
    max_sequences: int | None = 256,
    batch_size: int = 8,
    resources: Any = None,
) -> ExecutorStep:
    """An `evaluate_lm` step on every validation split of `tokenized` -> `evaluation/{name}`."""
    return ExecutorStep(
        name=f"evaluation/{name}",
        fn=evaluate_lm,
        config=EvalLmConfig(
            checkpoint_path=output_path_of(trained),
            output_path=this_output_path(),
            caches=_caches(tokenized),
            seq_len=versioned(seq_len),
            max_sequences=versioned(max_sequences),
            tasks=versioned(tuple(tasks)),
            batch_size=batch_size,
        ),
        description="perplexity, bits-per-byte and multiple-choice tasks",
        resources=resources,
    )
