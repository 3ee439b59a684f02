"""Levanter's model-config spellings that Marin's Ray-era experiment files import.

`from levanter.models.llama import LlamaConfig` becomes `from marin_lab.marin.levanter import
LlamaConfig`. Calling it with Levanter's keywords builds marin_lab's `LlamaConfig`
(marin_lab.models.llama), the one the trainer takes:

    LlamaConfig(seq_len=512, hidden_dim=32, intermediate_dim=128, num_heads=2, num_kv_heads=2, num_layers=2)

Levanter's config has no vocabulary (its trainer takes the tokenizer's), so the result has
`vocab_size=None` and `default_train` sizes the embedding from the tokenizer of the data, as
Marin's `default_train` does. Keywords left out take Levanter's defaults (a Llama-2-7B shape,
RoPE base 10,000). A Levanter keyword our decoder has no counterpart for is a `TypeError` naming
it, never silently dropped.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from marin_lab.models.llama import LlamaConfig as _LabLlamaConfig

__all__ = ["Llama3RotaryEmbeddingsConfig", "LlamaConfig", "RotaryEmbeddingsConfig"]

_RENAMED = {
    "seq_len": "max_seq_len",
    "layer_norm_epsilon": "norm_eps",
    "initializer_range": "initializer_std",
    "tie_word_embeddings": "tie_embeddings",
}
"""Levanter's keyword -> marin_lab's field."""

_SAME = (
    "hidden_dim",
    "intermediate_dim",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "max_seq_len",
    "vocab_size",
)

_LEVANTER_DEFAULTS: dict[str, Any] = {
    "max_seq_len": 2048,
    "hidden_dim": 4096,
    "intermediate_dim": 11008,
    "num_layers": 32,
    "num_heads": 32,
    "num_kv_heads": 32,
    "norm_eps": 1e-5,
    "initializer_std": 0.02,
    "tie_embeddings": False,
    "rope_theta": 10_000.0,
}
"""Levanter's LlamaConfig defaults, for keywords a file leaves out."""


@dataclasses.dataclass(frozen=True)
class RotaryEmbeddingsConfig:
    """Levanter's default (Llama 2) rotary embedding: base `theta`."""

    theta: float = 10_000.0


@dataclasses.dataclass(frozen=True)
class Llama3RotaryEmbeddingsConfig:
    """Levanter's Llama 3 rotary embedding. Only the base frequency is modelled here; Llama 3's
    long-context frequency scaling (`factor` other than 1) is refused by `LlamaConfig`."""

    theta: float = 500_000.0
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


def LlamaConfig(**levanter_fields: Any) -> _LabLlamaConfig:  # noqa: N802 (Levanter's class name, called as one)
    """marin_lab's `LlamaConfig` from Levanter's keywords (see the module docstring)."""
    values = dict(_LEVANTER_DEFAULTS, vocab_size=None)
    if "seq_len" in levanter_fields and "max_seq_len" in levanter_fields:
        raise TypeError("LlamaConfig: give seq_len or max_seq_len (the same field), not both")
    rope = levanter_fields.pop("rope", None)
    if rope is not None:
        if not isinstance(rope, (RotaryEmbeddingsConfig, Llama3RotaryEmbeddingsConfig)):
            raise TypeError(
                f"LlamaConfig: rope={rope!r} is not a rotary config marin_lab knows; use "
                "RotaryEmbeddingsConfig(theta=...) or Llama3RotaryEmbeddingsConfig() from "
                "marin_lab.marin.levanter"
            )
        if isinstance(rope, Llama3RotaryEmbeddingsConfig) and rope.factor != 1.0:
            raise TypeError(
                f"LlamaConfig: rope factor={rope.factor} (Llama 3.1's long-context scaling) is not "
                "implemented by marin_lab's decoder; leave factor=1.0"
            )
        values["rope_theta"] = float(rope.theta)
    unknown = sorted(k for k in levanter_fields if k not in _RENAMED and k not in _SAME)
    if unknown:
        raise TypeError(
            f"LlamaConfig got Levanter keyword(s) {unknown} that marin_lab's decoder has no counterpart "
            f"for; accepted: {sorted([*_RENAMED, *_SAME, 'rope'])} (docs/coming_from_marin.md)"
        )
    for key, value in levanter_fields.items():
        values[_RENAMED.get(key, key)] = value
    return _LabLlamaConfig(**values)
