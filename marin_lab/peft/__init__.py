"""Parameter-efficient fine-tuning: LoRA adapters over plain or quantized frozen weights."""

from marin_lab.peft.lora import (
    ALL_PROJECTIONS,
    LoraConfig,
    LoraError,
    LoraWeight,
    adapter_shapes,
    apply_lora,
    init_lora,
    merge_lora,
    unmerge_lora,
)

__all__ = [
    "ALL_PROJECTIONS",
    "LoraConfig",
    "LoraError",
    "LoraWeight",
    "adapter_shapes",
    "apply_lora",
    "init_lora",
    "merge_lora",
    "unmerge_lora",
]
