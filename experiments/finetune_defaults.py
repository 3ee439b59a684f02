"""Recipe helpers for fine-tuning: instruction data, a quantized base, and `finetune_lm` steps.

Versioned (enters the identity): what changes the result — the base, the data, the mode, the
adapter and quantization settings, the optimizer, steps, batch, sequence length, seed, precision.
Not versioned: how the work is laid out — mesh, remat policy, offload, checkpoint cadence, W&B.
"""

from __future__ import annotations

from typing import Any, cast

from marin_lab.execution import ExecutorStep, output_path_of, this_output_path, versioned
from marin_lab.peft import LoraConfig
from marin_lab.processing.instruction import ChatTemplate, TokenizeInstructionsConfig, tokenize_instructions
from marin_lab.training import CheckpointConfig, DataConfig, LlamaConfig, MeshConfig, OptimizerConfig, WandbConfig
from marin_lab.training.base_model import QuantConfig, QuantizeBaseConfig
from marin_lab.training.base_quantize import quantize_base
from marin_lab.training.finetune import FinetuneConfig, finetune_lm


def _path(x: ExecutorStep | str, sub: str | None = None) -> Any:
    return output_path_of(x, sub) if isinstance(x, ExecutorStep) else versioned(x)


def default_tokenize_instructions(
    name: str,
    records: ExecutorStep,
    tokenizer: ExecutorStep | str,
    *,
    template: ChatTemplate = ChatTemplate(),
    validation_fraction: float = 0.1,
    num_workers: int = 1,
) -> ExecutorStep:
    """Instruction records (`records`' data/ folder) -> a masked token cache -> `tokenized/{name}`."""
    return ExecutorStep(
        name=f"tokenized/{name}",
        fn=tokenize_instructions,
        config=TokenizeInstructionsConfig(
            input_path=output_path_of(records, "data"),
            output_path=this_output_path(),
            tokenizer=_path(tokenizer),
            template=versioned(template),
            validation_fraction=versioned(validation_fraction),
            num_workers=num_workers,
        ),
        description="tokenize instruction records; loss on responses only",
    )


def default_quantize_base(name: str, base: ExecutorStep | str, *, quant: QuantConfig = QuantConfig()) -> ExecutorStep:
    """A base model's projections in NF4, once, for many QLoRA runs -> `quantized/{name}`."""
    return ExecutorStep(
        name=f"quantized/{name}",
        fn=quantize_base,
        config=QuantizeBaseConfig(base=_path(base), output_path=this_output_path(), quant=versioned(quant)),
        description=f"quantize to NF4 (blocks of {quant.block_size}, double quant {quant.double_quant})",
    )


_DEFAULT_OPTIMIZER = cast(OptimizerConfig, FinetuneConfig.__dataclass_fields__["optimizer"].default)


def default_finetune(
    name: str,
    base: ExecutorStep | str,
    instructions: ExecutorStep,
    *,
    mode: str,
    num_train_steps: int,
    batch_size: int,
    seq_len: int,
    lora: LoraConfig = LoraConfig(),
    quant: QuantConfig = QuantConfig(),
    optimizer: OptimizerConfig = _DEFAULT_OPTIMIZER,
    model: LlamaConfig | None = None,
    seed: int = 0,
    compute_dtype: str = "bfloat16",
    mesh: MeshConfig = MeshConfig(),
    gradient_checkpointing: bool | str = False,
    offload_optimizer_state: bool = False,
    offload_base: bool = False,
    checkpoint: CheckpointConfig = CheckpointConfig(),
    eval_max_sequences: int | None = 256,
    wandb: WandbConfig = WandbConfig(),
    resources: Any = None,
) -> ExecutorStep:
    """A `finetune_lm` step -> `finetunes/{name}` (merged/ inside it is an evaluate_lm checkpoint)."""
    adapters = mode in ("lora", "qlora")
    return ExecutorStep(
        name=f"finetunes/{name}",
        fn=finetune_lm,
        config=FinetuneConfig(
            output_path=this_output_path(),
            data=DataConfig(caches={instructions.name.rsplit("/", 1)[-1]: output_path_of(instructions)}),
            base=_path(base),
            mode=versioned(mode),
            model=versioned(model),
            lora=versioned(lora if adapters else LoraConfig()),
            quant=versioned(quant if mode == "qlora" else QuantConfig()),
            optimizer=versioned(optimizer),
            num_train_steps=versioned(num_train_steps),
            batch_size=versioned(batch_size),
            seq_len=versioned(seq_len),
            seed=versioned(seed),
            compute_dtype=versioned(compute_dtype),
            eval_max_sequences=versioned(eval_max_sequences),
            mesh=mesh,
            gradient_checkpointing=gradient_checkpointing,
            offload_optimizer_state=offload_optimizer_state,
            offload_base=offload_base,
            checkpoint=checkpoint,
            wandb=wandb,
        ),
        description=f"{mode} fine-tune, {num_train_steps} steps x {batch_size} x {seq_len} tokens",
        resources=resources,
    )
