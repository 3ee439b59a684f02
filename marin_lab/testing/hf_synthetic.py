"""Synthetic Hugging Face Llama checkpoints (config.json + safetensors) for tests and benchmarks.

Written tensor by tensor (the writer never holds more than one tensor), in bf16 by default as
published checkpoints are, optionally split into shards with a `model.safetensors.index.json`.
Weights are seeded normal draws scaled like an initialised Llama; norms are near 1.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import jax.numpy as jnp
import numpy as np

from marin_lab.io import fs as mfs
from marin_lab.models.llama import LlamaConfig
from marin_lab.training.hf_import import expected_hf_shapes

_CODES = {"BF16": jnp.bfloat16, "F16": np.float16, "F32": np.float32, "I8": np.int8, "I32": np.int32}


def hf_config_dict(model: LlamaConfig) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": model.vocab_size,
        "hidden_size": model.hidden_dim,
        "intermediate_size": model.intermediate_dim,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_heads,
        "num_key_value_heads": model.num_kv_heads,
        "head_dim": model.resolved_head_dim,
        "max_position_embeddings": model.max_seq_len,
        "rope_theta": model.rope_theta,
        "rms_norm_eps": model.norm_eps,
        "tie_word_embeddings": model.tie_embeddings,
        "hidden_act": "silu",
        "torch_dtype": "bfloat16",
    }


def _tensor(name: str, shape: tuple[int, ...], seed: int, dtype: Any) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if "norm" in name:
        values = rng.uniform(0.8, 1.2, size=shape).astype(np.float32)
    else:
        values = rng.standard_normal(size=shape, dtype=np.float32) * np.float32(0.02)
    return values.astype(dtype)


def write_safetensors(url: str, tensors: dict[str, tuple[str, tuple[int, ...]]], make: Any) -> int:
    """Write one safetensors file: `tensors` name -> (dtype code, shape); `make(name)` gives each
    array when its turn comes. Returns the file's size."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (code, shape) in tensors.items():
        n = int(np.prod(shape)) * np.dtype(_CODES[code]).itemsize
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors aligns the data to 8 bytes
    fs, path = mfs.fs_and_path(url)
    with fs.open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, (code, _) in tensors.items():
            f.write(np.ascontiguousarray(make(name)).astype(_CODES[code], copy=False).tobytes())
    return 8 + len(raw) + offset


def write_synthetic_llama(
    path: str,
    model: LlamaConfig,
    *,
    seed: int = 0,
    dtype: str = "BF16",
    shards: int = 1,
    overrides: dict[str, str] | None = None,
) -> int:
    """A Llama checkpoint of shape `model` at folder `path`; returns its safetensors bytes.

    `overrides`: tensor name -> dtype code, to store some tensors otherwise (tests of bad input).
    """
    mfs.makedirs(path)
    mfs.write_json(mfs.join(path, "config.json"), hf_config_dict(model))
    shapes = {name: shape for name, (shape, _) in expected_hf_shapes(model).items()}
    codes = {name: (overrides or {}).get(name, dtype) for name in shapes}
    names = list(shapes)
    groups = [names[i::shards] for i in range(shards)] if shards > 1 else [names]
    total = 0
    weight_map = {}
    for i, group in enumerate(groups):
        file = "model.safetensors" if shards == 1 else f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        total += write_safetensors(
            mfs.join(path, file),
            {n: (codes[n], shapes[n]) for n in group},
            lambda n: _tensor(n, shapes[n], seed, np.float32),
        )
        weight_map.update({n: file for n in group})
    if shards > 1:
        mfs.write_json(
            mfs.join(path, "model.safetensors.index.json"),
            {"metadata": {"total_size": total}, "weight_map": weight_map},
        )
    return total
