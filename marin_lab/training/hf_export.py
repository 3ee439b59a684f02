"""Export parameters to the Hugging Face Llama format (config.json + model.safetensors).

Our matrices are stored [in, out]; torch Linear weights are [out, in], hence the transposes.
RoPE already uses HF's "rotate half" layout, so q/k need no head permutation.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable
from typing import Any

import jax
import numpy as np
from safetensors.numpy import save_file as safetensors_save_file

from marin_lab.io import fs as mfs
from marin_lab.models.llama import LlamaConfig, Params
from marin_lab.training.checkpoint import iter_arrays

logger = logging.getLogger(__name__)

_LAYER_MAP = {
    "attn_norm": ("input_layernorm.weight", False),
    "wq": ("self_attn.q_proj.weight", True),
    "wk": ("self_attn.k_proj.weight", True),
    "wv": ("self_attn.v_proj.weight", True),
    "wo": ("self_attn.o_proj.weight", True),
    "mlp_norm": ("post_attention_layernorm.weight", False),
    "w_gate": ("mlp.gate_proj.weight", True),
    "w_up": ("mlp.up_proj.weight", True),
    "w_down": ("mlp.down_proj.weight", True),
}


def hf_config(
    config: LlamaConfig, *, bos_id: int | None = None, eos_id: int | None = None, torch_dtype: str = "float32"
) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_dim,
        "intermediate_size": config.intermediate_dim,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.resolved_head_dim,
        "max_position_embeddings": config.max_seq_len,
        "rms_norm_eps": config.norm_eps,
        "rope_theta": config.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "tie_word_embeddings": config.tie_embeddings,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": config.initializer_std,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "torch_dtype": torch_dtype,
        "dtype": torch_dtype,
    }


def hf_tensors(
    leaves: Iterable[tuple[tuple[str, ...], np.ndarray]], config: LlamaConfig, dtype: Any = np.float32
) -> dict[str, np.ndarray]:
    """HF-named tensors from (parameter keys, array) pairs, consumed one leaf at a time."""
    out: dict[str, np.ndarray] = {}
    for keys, value in leaves:
        if keys == ("embed",):
            out["model.embed_tokens.weight"] = np.asarray(value, dtype)
        elif keys == ("final_norm",):
            out["model.norm.weight"] = np.asarray(value, dtype)
        elif keys == ("lm_head",):
            if not config.tie_embeddings:
                out["lm_head.weight"] = np.ascontiguousarray(np.asarray(value, dtype).T)
        elif len(keys) == 2 and keys[0] == "layers" and keys[1] in _LAYER_MAP:
            hf_name, transpose = _LAYER_MAP[keys[1]]
            stacked = np.asarray(value, dtype)
            for i in range(config.num_layers):
                w = stacked[i].T if transpose else stacked[i]
                out[f"model.layers.{i}.{hf_name}"] = np.ascontiguousarray(w)
    return out


def param_leaves(params: Params) -> list[tuple[tuple[str, ...], np.ndarray]]:
    """(keys, host array) of every leaf of in-memory (fully addressable) parameters."""
    host = jax.device_get(params)
    return [
        (tuple(getattr(k, "key", k) for k in path), leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(host)[0]
    ]


def hf_state_dict(params: Params, config: LlamaConfig, dtype: Any = np.float32) -> dict[str, np.ndarray]:
    """HF tensors of in-memory (fully addressable) parameters."""
    return hf_tensors(param_leaves(params), config, dtype)


def export_hf(
    params: Params,
    config: LlamaConfig,
    out_dir: str,
    *,
    tokenizer_url: str | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
) -> str:
    """Write `out_dir`/{config.json, model.safetensors[, tokenizer.json]}; returns out_dir."""
    return _write_hf(
        hf_state_dict(params, config), config, out_dir, tokenizer_url=tokenizer_url, bos_id=bos_id, eos_id=eos_id
    )


def export_hf_from_checkpoint(
    checkpoint: str,
    config: LlamaConfig,
    out_dir: str,
    *,
    leaves: Iterable[tuple[tuple[str, ...], np.ndarray]] | None = None,
    dtype: str = "float32",
    **kwargs: Any,
) -> str:
    """Export a (sharded) training checkpoint, reading one parameter at a time on this process.

    Nothing is gathered across hosts; this host holds the float32 tensors once, and safetensors
    writes them to a file rather than building the whole file in memory as well. `leaves` replaces
    the checkpoint's own parameter arrays (float16 masters decoded by
    `marin_lab.precision.masters.export_leaves`); `dtype` ('float32', 'bfloat16') is the tensors'.
    """

    leaves = iter_arrays(checkpoint, "params") if leaves is None else leaves
    return export_hf_leaves(leaves, config, out_dir, dtype=dtype, **kwargs)


def export_hf_leaves(
    leaves: Iterable[tuple[tuple[str, ...], np.ndarray]],
    config: LlamaConfig,
    out_dir: str,
    *,
    dtype: str = "float32",
    tokenizer_url: str | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
) -> str:
    """Write `out_dir` from (keys, array) per parameter, converted to `dtype` one at a time."""
    return _write_hf(
        hf_tensors(leaves, config, np.dtype(dtype)),
        config,
        out_dir,
        torch_dtype=dtype,
        tokenizer_url=tokenizer_url,
        bos_id=bos_id,
        eos_id=eos_id,
    )


def _write_hf(
    tensors: dict[str, np.ndarray],
    config: LlamaConfig,
    out_dir: str,
    *,
    tokenizer_url: str | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    torch_dtype: str = "float32",
) -> str:
    # safetensors writes the file tensor by tensor (no second in-memory copy); the finished file is
    # then renamed into place (local) or uploaded as one object (gs://): readers see it whole or not.
    fs, target = mfs.fs_and_path(mfs.join(out_dir, "model.safetensors"))
    local_dir = os.path.dirname(target) if mfs.is_local(out_dir) else None
    if local_dir:
        os.makedirs(local_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".hf-export-", dir=local_dir) as tmp:
        local = os.path.join(tmp, "model.safetensors")
        safetensors_save_file(tensors, local, metadata={"format": "pt"})
        del tensors
        if local_dir:
            os.replace(local, target)
        else:
            fs.put_file(local, target)
    mfs.atomic_write_text(
        mfs.join(out_dir, "config.json"),
        json.dumps(hf_config(config, bos_id=bos_id, eos_id=eos_id, torch_dtype=torch_dtype), indent=2),
    )
    if tokenizer_url and mfs.exists(tokenizer_url):
        mfs.atomic_write_bytes(mfs.join(out_dir, "tokenizer.json"), mfs.read_bytes(tokenizer_url))
    logger.info("exported Hugging Face model to %s", out_dir)
    return out_dir
