"""Import a Hugging Face Llama checkpoint (config.json + safetensors) into our parameters.

The inverse of `hf_export`: torch `Linear` weights are [out, in] and ours [in, out], hence the
transposes; RoPE uses the same "rotate half" layout, so q/k need no permutation. Single-file
(`model.safetensors`) and sharded (`model.safetensors.index.json`) checkpoints are read from any
fsspec URL, one tensor per byte range (`safetensors_reader`).

`open_hf` checks everything that can be checked without reading a weight: config.json's required
fields, every file's header against its size, each expected tensor's presence, shape and float
dtype. `import_hf` then reads the whole model into host memory (fp32 numpy) — simple, and what
tests and exports use; a fine-tune's base streams instead, tensor by tensor (`base_stream`).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import numpy as np

from marin_lab.io import fs as mfs
from marin_lab.models.llama import LlamaConfig, Params, unflatten_params
from marin_lab.training.hf_export import _LAYER_MAP
from marin_lab.training.safetensors_reader import HfImportError, SafetensorsIndex

logger = logging.getLogger(__name__)

__all__ = [
    "HfImportError",
    "expected_hf_shapes",
    "import_hf",
    "is_hf_checkpoint",
    "llama_config_from_hf",
    "open_hf",
    "our_tensor",
]

REQUIRED_FIELDS = {
    "vocab_size": int,
    "hidden_size": int,
    "intermediate_size": int,
    "num_hidden_layers": int,
    "num_attention_heads": int,
}
"""config.json fields without which a Llama's shape is unknown (the rest have Llama defaults)."""
_LAYER_TENSOR = re.compile(r"model\.layers\.(\d{1,9})\.")


def is_hf_checkpoint(path: str) -> bool:
    return mfs.exists(mfs.join(path, "config.json")) and (
        mfs.exists(mfs.join(path, "model.safetensors")) or mfs.exists(mfs.join(path, "model.safetensors.index.json"))
    )


_POSITIVE_INTS = ("num_key_value_heads", "head_dim", "max_position_embeddings")
_NUMBERS = ("rope_theta", "rms_norm_eps", "initializer_range")


def _check_optional_types(hf: dict[str, Any]) -> None:
    """Optional fields, when given (null counts as absent), have the type a Llama config gives them."""

    def given(field: str) -> bool:
        return hf.get(field) is not None

    for field in _POSITIVE_INTS:
        v = hf.get(field)
        if given(field) and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise HfImportError(f"config.json: {field}={v!r} must be a positive integer")
    for field in _NUMBERS:
        v = hf.get(field)
        if given(field) and (not isinstance(v, int | float) or isinstance(v, bool) or not v == v or v < 0):
            raise HfImportError(f"config.json: {field}={v!r} must be a non-negative number (e.g. 1e-05)")
    if given("tie_word_embeddings") and not isinstance(hf["tie_word_embeddings"], bool):
        raise HfImportError(f"config.json: tie_word_embeddings={hf['tie_word_embeddings']!r} must be true or false")
    for field in ("rope_scaling", "rope_parameters"):
        if given(field) and not isinstance(hf[field], dict):
            raise HfImportError(f"config.json: {field}={hf[field]!r} must be an object or null")
    params = hf.get("rope_parameters") or {}
    if "rope_theta" in params and (
        not isinstance(params["rope_theta"], int | float) or isinstance(params["rope_theta"], bool)
    ):
        raise HfImportError(f"config.json: rope_parameters.rope_theta={params['rope_theta']!r} must be a number")
    for field in ("model_type", "hidden_act"):
        if given(field) and not isinstance(hf[field], str):
            raise HfImportError(f"config.json: {field}={hf[field]!r} must be text")


def llama_config_from_hf(hf: dict[str, Any], *, max_seq_len: int | None = None) -> LlamaConfig:
    """Our LlamaConfig from a Llama `config.json` (refusing what our model does not implement)."""
    if not isinstance(hf, dict):
        raise HfImportError("config.json is not a JSON object")
    for field, kind in REQUIRED_FIELDS.items():
        if field not in hf:
            raise HfImportError(
                f"config.json lacks the required field {field!r}; a Llama config names {', '.join(REQUIRED_FIELDS)}"
            )
        if not isinstance(hf[field], kind) or isinstance(hf[field], bool) or hf[field] < 1:
            raise HfImportError(f"config.json: {field}={hf[field]!r} must be a positive integer")
    _check_optional_types(hf)
    if hf.get("model_type") not in ("llama", None):
        raise HfImportError(
            f"config.json: model_type {hf.get('model_type')!r} is not 'llama'; only Llama-family checkpoints import"
        )
    for flag in ("attention_bias", "mlp_bias"):
        if hf.get(flag):
            raise HfImportError(f"config.json: {flag}=true; our Llama has no biases")
    if hf.get("hidden_act", "silu") != "silu":
        raise HfImportError(f"config.json: hidden_act={hf.get('hidden_act')!r}; our MLP is SwiGLU (silu)")
    rope: dict[str, Any] = hf.get("rope_scaling") or {}
    params: dict[str, Any] = hf.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type")) or params.get("rope_type", "default")
    if rope_type not in ("default", None):
        raise HfImportError(
            f"config.json: rope type {rope_type!r} (RoPE scaling) is not implemented; only plain RoPE imports"
        )
    heads = hf["num_attention_heads"]
    theta = params["rope_theta"] if "rope_theta" in params else hf.get("rope_theta", 10000.0)
    return LlamaConfig(
        vocab_size=hf["vocab_size"],
        hidden_dim=hf["hidden_size"],
        intermediate_dim=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        max_seq_len=max_seq_len or hf.get("max_position_embeddings", 2048),
        rope_theta=float(theta),
        norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        initializer_std=float(hf.get("initializer_range", 0.02)),
    )


def expected_hf_shapes(config: LlamaConfig) -> dict[str, tuple[tuple[int, ...], str]]:
    """HF tensor name -> (shape, the config fields that decide it)."""
    d, f, hd = config.hidden_dim, config.intermediate_dim, config.resolved_head_dim
    q, kv = config.num_heads * hd, config.num_kv_heads * hd
    vocab = config.resolved_vocab_size
    out = {
        "model.embed_tokens.weight": ((vocab, d), "vocab_size, hidden_dim"),
        "model.norm.weight": ((d,), "hidden_dim"),
    }
    if not config.tie_embeddings:
        out["lm_head.weight"] = ((vocab, d), "vocab_size, hidden_dim")
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


def read_hf_config(path: str, *, max_seq_len: int | None = None) -> LlamaConfig:
    url = mfs.join(path, "config.json")
    try:
        hf = mfs.read_json(url)
    except (ValueError, UnicodeDecodeError) as err:
        raise HfImportError(f"{url} is not valid JSON: {err}") from err
    except RecursionError:
        raise HfImportError(f"{url} is not a Llama config: its JSON is nested too deeply to read") from None
    try:
        return llama_config_from_hf(hf, max_seq_len=max_seq_len)
    except HfImportError as err:
        raise HfImportError(f"{path}/{err}") from err


def open_hf(path: str, model: LlamaConfig | None = None) -> tuple[LlamaConfig, SafetensorsIndex]:
    """(model config, located tensors) of the checkpoint in folder `path`; reads headers only.

    With `model` given, the checkpoint must have exactly that shape; every mismatch is reported
    by tensor and config field. Missing tensors, wrong shapes, integer dtypes, truncated files and
    LFS pointers are all refused here, before a weight is read.
    """
    if not is_hf_checkpoint(path):
        raise HfImportError(
            f"{path} is not a Hugging Face checkpoint: expected config.json and "
            "model.safetensors (or model.safetensors.index.json) in it"
        )
    config = read_hf_config(path) if model is None else model
    if model is not None:
        read_hf_config(path)  # still refuse a config.json we could not have read
        model.validate()
    index = SafetensorsIndex.open(path)
    # The layers the headers hold, before one name per configured layer is built: a config that
    # claims millions of layers is refused here, at the cost of the headers it has.
    stored_layers = {int(m.group(1)) for n in index.entries if (m := _LAYER_TENSOR.match(n))}
    have = max(stored_layers) + 1 if stored_layers else 0
    if config.num_layers > have:
        raise HfImportError(
            f"Hugging Face checkpoint {path} does not match the model config: num_layers={config.num_layers} "
            f"(config.json num_hidden_layers) but its safetensors hold {have} layer(s) "
            f"(model.layers.0-{max(have - 1, 0)}); "
            "fix num_hidden_layers (or the `model` field) to the checkpoint's, or fetch the missing files"
        )
    expected = expected_hf_shapes(config)
    problems = []
    for name, (shape, fields) in expected.items():
        entry = index.entries.get(name)
        if entry is None:
            problems.append(f"{name} is missing (model.{fields.split(',')[0]}, num_layers={config.num_layers})")
        elif entry.shape != shape:
            problems.append(
                f"{name} has shape {entry.shape} but the config's {fields} give {shape} "
                f"(in {entry.url.rsplit('/', 1)[-1]})"
            )
    if problems:
        raise HfImportError(
            f"Hugging Face checkpoint {path} does not match the model config: "
            + "; ".join(problems[:5])
            + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            + ". Fix the `model` fields named (or leave `model` unset to take config.json's shape)"
        )
    index.check_float(set(expected))
    return config, index


def our_tensor(
    index: SafetensorsIndex, name: str, config: LlamaConfig, dtype: Any = np.float32, layer: int | None = None
) -> np.ndarray:
    """One of our parameters (`embed`, `final_norm`, `lm_head`, or layer `layer` of `layers/<name>`)
    read from the checkpoint, transposed to our [in, out] layout, in `dtype` (a copy only if needed)."""
    if layer is None:
        hf_name, transpose = {
            "embed": ("model.embed_tokens.weight", False),
            "final_norm": ("model.norm.weight", False),
            "lm_head": ("lm_head.weight", True),
        }[name]
    else:
        hf_name, transpose = _LAYER_MAP[name]
        hf_name = f"model.layers.{layer}.{hf_name}"
    raw = index.read(hf_name)
    value = raw.astype(dtype, copy=False)
    return np.ascontiguousarray(value.T) if transpose else value


def import_hf(path: str, model: LlamaConfig | None = None, dtype: Any = np.float32) -> tuple[LlamaConfig, Params]:
    """(model config, params as numpy arrays) of the Llama checkpoint in folder `path`, whole in host memory."""
    config, index = open_hf(path, model)
    flat = {name: our_tensor(index, name, config, dtype) for name in ("embed", "final_norm")}
    if not config.tie_embeddings:
        flat["lm_head"] = our_tensor(index, "lm_head", config, dtype)
    for ours in _LAYER_MAP:
        flat[f"layers/{ours}"] = np.stack([our_tensor(index, ours, config, dtype, i) for i in range(config.num_layers)])
    logger.info("imported %s: %d tensors, %.1fM parameters", path, len(index.entries), config.num_params() / 1e6)
    return config, unflatten_params(flat)
