"""Import a Hugging Face Llama checkpoint (config.json + safetensors) into our parameters.

The inverse of `hf_export`: torch `Linear` weights are [out, in] and ours [in, out], hence the
transposes; RoPE uses the same "rotate half" layout, so q/k need no permutation. Single-file
(`model.safetensors`) and sharded (`model.safetensors.index.json`) checkpoints are read from any
fsspec URL.

Safetensors files are parsed here (an 8-byte header length, a JSON header, raw little-endian
bytes) rather than with `safetensors.numpy`, which has no bfloat16 (the dtype most published
checkpoints use) and reads only local files.
"""

from __future__ import annotations

import json
import logging
import struct
from typing import Any

import jax.numpy as jnp
import numpy as np

from marin_lab.io import fs as mfs
from marin_lab.training.errors import TrainingError
from marin_lab.training.hf_export import _LAYER_MAP
from marin_lab.training.model import LlamaConfig, Params, unflatten_params

logger = logging.getLogger(__name__)

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": jnp.bfloat16, "F64": np.float64,
           "I64": np.int64, "I32": np.int32, "U8": np.uint8, "I8": np.int8, "BOOL": np.bool_}


class HfImportError(TrainingError, ValueError):
    """A Hugging Face checkpoint that cannot become our parameters; the message names the tensor or field."""


def is_hf_checkpoint(path: str) -> bool:
    return mfs.exists(mfs.join(path, "config.json")) and (
        mfs.exists(mfs.join(path, "model.safetensors")) or mfs.exists(mfs.join(path, "model.safetensors.index.json")))


def llama_config_from_hf(hf: dict[str, Any], *, max_seq_len: int | None = None) -> LlamaConfig:
    """Our LlamaConfig from a Llama `config.json` (refusing what our model does not implement)."""
    if hf.get("model_type") not in ("llama", None):
        raise HfImportError(f"config.json: model_type {hf.get('model_type')!r} is not 'llama'; only Llama-family checkpoints import")
    for flag in ("attention_bias", "mlp_bias"):
        if hf.get(flag):
            raise HfImportError(f"config.json: {flag}=true; our Llama has no biases")
    if hf.get("hidden_act", "silu") != "silu":
        raise HfImportError(f"config.json: hidden_act={hf.get('hidden_act')!r}; our MLP is SwiGLU (silu)")
    rope = hf.get("rope_scaling") or {}
    params = hf.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type")) or params.get("rope_type", "default")
    if rope_type not in ("default", None):
        raise HfImportError(f"config.json: rope type {rope_type!r} (RoPE scaling) is not implemented; only plain RoPE imports")
    heads = hf["num_attention_heads"]
    return LlamaConfig(
        vocab_size=hf["vocab_size"], hidden_dim=hf["hidden_size"], intermediate_dim=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"], num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        max_seq_len=max_seq_len or hf.get("max_position_embeddings", 2048),
        rope_theta=float(params.get("rope_theta", hf.get("rope_theta", 10000.0))),
        norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        initializer_std=float(hf.get("initializer_range", 0.02)),
    )


def _read_header(url: str) -> tuple[dict[str, Any], int]:
    fs, path = mfs.fs_and_path(url)
    with fs.open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return header, 8 + size


def read_safetensors(url: str, names: set[str] | None = None) -> dict[str, np.ndarray]:
    """Tensors of one safetensors file (only `names` if given), by byte range."""
    header, data_start = _read_header(url)
    fs, path = mfs.fs_and_path(url)
    out = {}
    with fs.open(path, "rb") as f:
        for name, info in header.items():
            if name == "__metadata__" or (names is not None and name not in names):
                continue
            if info["dtype"] not in _DTYPES:
                raise HfImportError(f"{url}: tensor {name} has dtype {info['dtype']}, which we do not read")
            start, end = info["data_offsets"]
            f.seek(data_start + start)
            raw = f.read(end - start)
            dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
            out[name] = np.frombuffer(raw, dtype=dtype).reshape(info["shape"])
    return out


def _tensor_files(path: str) -> list[str]:
    index = mfs.join(path, "model.safetensors.index.json")
    if mfs.exists(index):
        return sorted({mfs.join(path, f) for f in mfs.read_json(index)["weight_map"].values()})
    return [mfs.join(path, "model.safetensors")]


def expected_hf_shapes(config: LlamaConfig) -> dict[str, tuple[tuple[int, ...], str]]:
    """HF tensor name -> (shape, the config fields that decide it)."""
    d, f, hd = config.hidden_dim, config.intermediate_dim, config.resolved_head_dim
    q, kv = config.num_heads * hd, config.num_kv_heads * hd
    out = {"model.embed_tokens.weight": ((config.vocab_size, d), "vocab_size, hidden_dim"),
           "model.norm.weight": ((d,), "hidden_dim")}
    if not config.tie_embeddings:
        out["lm_head.weight"] = ((config.vocab_size, d), "vocab_size, hidden_dim")
    per_layer = {
        "input_layernorm.weight": ((d,), "hidden_dim"),
        "post_attention_layernorm.weight": ((d,), "hidden_dim"),
        "self_attn.q_proj.weight": ((q, d), "num_heads, head_dim, hidden_dim"),
        "self_attn.k_proj.weight": ((kv, d), "num_kv_heads, head_dim, hidden_dim"),
        "self_attn.v_proj.weight": ((kv, d), "num_kv_heads, head_dim, hidden_dim"),
        "self_attn.o_proj.weight": ((d, q), "hidden_dim, num_heads, head_dim"),
        "mlp.gate_proj.weight": ((f, d), "intermediate_dim, hidden_dim"),
        "mlp.up_proj.weight": ((f, d), "intermediate_dim, hidden_dim"),
        "mlp.down_proj.weight": ((d, f), "hidden_dim, intermediate_dim"),
    }
    for i in range(config.num_layers):
        for name, spec in per_layer.items():
            out[f"model.layers.{i}.{name}"] = spec
    return out


def import_hf(path: str, model: LlamaConfig | None = None, dtype: Any = np.float32) -> tuple[LlamaConfig, Params]:
    """(model config, params as numpy arrays) of the Llama checkpoint in folder `path`.

    With `model` given, the checkpoint must have exactly that shape; every mismatch is reported
    by tensor and config field before any weight is converted.
    """
    if not is_hf_checkpoint(path):
        raise HfImportError(f"{path} is not a Hugging Face checkpoint: expected config.json and "
                            "model.safetensors (or model.safetensors.index.json) in it")
    hf_cfg = mfs.read_json(mfs.join(path, "config.json"))
    config = model or llama_config_from_hf(hf_cfg)
    if model is not None:
        model.validate()
    expected = expected_hf_shapes(config)
    shapes: dict[str, tuple[int, ...]] = {}
    for url in _tensor_files(path):
        header, _ = _read_header(url)
        shapes.update({k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"})
    problems = []
    for name, (shape, fields) in expected.items():
        if name not in shapes:
            problems.append(f"{name} is missing (model.{fields.split(',')[0]}, num_layers={config.num_layers})")
        elif shapes[name] != shape:
            problems.append(f"{name} has shape {shapes[name]} but the config's {fields} give {shape}")
    if problems:
        raise HfImportError(
            f"Hugging Face checkpoint {path} does not match the model config: " + "; ".join(problems[:5])
            + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            + ". Fix the `model` fields named (or leave `model` unset to take config.json's shape)"
        )
    tensors: dict[str, np.ndarray] = {}
    for url in _tensor_files(path):
        tensors.update(read_safetensors(url, set(expected)))
    flat = {"embed": tensors["model.embed_tokens.weight"].astype(dtype),
            "final_norm": tensors["model.norm.weight"].astype(dtype)}
    if not config.tie_embeddings:
        flat["lm_head"] = np.ascontiguousarray(tensors["lm_head.weight"].astype(dtype).T)
    for ours, (hf_name, transpose) in _LAYER_MAP.items():
        stack = [tensors[f"model.layers.{i}.{hf_name}"].astype(dtype) for i in range(config.num_layers)]
        flat[f"layers/{ours}"] = np.stack([w.T if transpose else w for w in stack])
    logger.info("imported %s: %d tensors, %.1fM parameters", path, len(expected), config.num_params() / 1e6)
    return config, unflatten_params(flat)
