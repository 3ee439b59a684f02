"""Export parameters to the Hugging Face Llama format (config.json + model.safetensors).

Our matrices are stored [in, out]; torch Linear weights are [out, in], hence the transposes.
RoPE already uses HF's "rotate half" layout, so q/k need no head permutation.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import jax
import numpy as np
from safetensors.numpy import save as safetensors_save

from marin_lab.io import fs as mfs
from marin_lab.training.model import LlamaConfig, Params

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


def hf_config(config: LlamaConfig, *, bos_id: int | None = None, eos_id: int | None = None,
              torch_dtype: str = "float32") -> dict[str, Any]:
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


def hf_state_dict(params: Params, config: LlamaConfig, dtype: Any = np.float32) -> dict[str, np.ndarray]:
    host = jax.device_get(params)
    out = {"model.embed_tokens.weight": np.asarray(host["embed"], dtype),
           "model.norm.weight": np.asarray(host["final_norm"], dtype)}
    if not config.tie_embeddings:
        out["lm_head.weight"] = np.ascontiguousarray(np.asarray(host["lm_head"], dtype).T)
    for name, (hf_name, transpose) in _LAYER_MAP.items():
        stacked = np.asarray(host["layers"][name], dtype)
        for i in range(config.num_layers):
            w = stacked[i].T if transpose else stacked[i]
            out[f"model.layers.{i}.{hf_name}"] = np.ascontiguousarray(w)
    return out


def export_hf(params: Params, config: LlamaConfig, out_dir: str, *, tokenizer_url: str | None = None,
              bos_id: int | None = None, eos_id: int | None = None) -> str:
    """Write `out_dir`/{config.json, model.safetensors[, tokenizer.json]}; returns out_dir."""
    tensors = hf_state_dict(params, config)
    mfs.atomic_write_bytes(mfs.join(out_dir, "model.safetensors"),
                           safetensors_save(tensors, metadata={"format": "pt"}))
    mfs.atomic_write_text(mfs.join(out_dir, "config.json"),
                          json.dumps(hf_config(config, bos_id=bos_id, eos_id=eos_id), indent=2))
    if tokenizer_url and mfs.exists(tokenizer_url):
        mfs.atomic_write_bytes(mfs.join(out_dir, "tokenizer.json"), mfs.read_bytes(tokenizer_url))
    logger.info("exported Hugging Face model to %s", out_dir)
    return out_dir
