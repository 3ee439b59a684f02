"""Export parameters to the Hugging Face Llama format: a folder that `AutoModelForCausalLM`,
`AutoTokenizer` and lm-eval's `hf` backend load as is.

The folder holds `config.json`, `model.safetensors`, `generation_config.json` and, when the run has
a tokenizer, its `tokenizer.json` with `tokenizer_config.json` and `special_tokens_map.json`. The
special tokens come from the tokenizer and the token cache's ledger: EOS is the cache's end-of-text
id (else the tokenizer's own, `find_eos_id`), BOS the cache's BOS id (else the token the tokenizer's
post-processor puts before every text, if any), and PAD is EOS, so that lm-eval never adds a token
of its own. A chat fine-tune's template is written as a Jinja `chat_template` that renders a
conversation as `tokenize_instructions` rendered it (`render_segments`, then EOS).

Our matrices are stored [in, out]; torch Linear weights are [out, in], hence the transposes.
RoPE already uses HF's "rotate half" layout, so q/k need no head permutation.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np
from safetensors.numpy import save_file as safetensors_save_file

from marin_lab.io import fs as mfs
from marin_lab.models.llama import LlamaConfig, Params
from marin_lab.processing.errors import TokenizeError
from marin_lab.processing.instruction import ROLES, ChatTemplate
from marin_lab.processing.tokenizers import find_eos_id, tokenizer_from_bytes
from marin_lab.training.checkpoint import iter_arrays
from marin_lab.training.errors import TrainingError

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
    config: LlamaConfig,
    *,
    bos_id: int | None = None,
    eos_id: int | None = None,
    pad_id: int | None = None,
    torch_dtype: str = "float32",
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
        "pad_token_id": pad_id,
        "torch_dtype": torch_dtype,
        "dtype": torch_dtype,
    }


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
    """The BOS / EOS / PAD tokens of an exported model: (id, text) each, None where it has none."""

    eos: tuple[int, str]
    bos: tuple[int, str] | None = None

    @property
    def pad(self) -> tuple[int, str]:
        # EOS pads, as for Llama 3: lm-eval would otherwise add a `<|pad|>` token the model never saw.
        return self.eos


def special_tokens(tokenizer: Any, *, bos_id: int | None = None, eos_id: int | None = None) -> SpecialTokens:
    """The special tokens of `tokenizer` (a `tokenizers.Tokenizer`) for the token cache's `bos_id` and
    `eos_id` (None: EOS is the tokenizer's end-of-text token, BOS what its post-processor prepends)."""
    if eos_id is None:
        try:
            eos_id = find_eos_id(tokenizer, None)
        except TokenizeError as err:
            raise TrainingError(f"Hugging Face export: {err}; pass the run's eos_id") from None
    if bos_id is None:
        bos_id = _prepended_id(tokenizer)
    return SpecialTokens(
        eos=(eos_id, _token_text(tokenizer, eos_id, "eos")),
        bos=None if bos_id is None else (bos_id, _token_text(tokenizer, bos_id, "bos")),
    )


def _token_text(tokenizer: Any, token_id: int, what: str) -> str:
    text = tokenizer.id_to_token(token_id)
    if text is None:
        raise TrainingError(
            f"Hugging Face export: {what} id {token_id} is not in the tokenizer "
            f"({tokenizer.get_vocab_size(with_added_tokens=True)} tokens); the token cache and its "
            f"tokenizer.json disagree: retokenize with this tokenizer"
        )
    return str(text)


def _prepended_id(tokenizer: Any) -> int | None:
    """The id the tokenizer's post-processor puts before every text (Llama 3's <|begin_of_text|>), or None."""
    try:
        plain = tokenizer.encode("a", add_special_tokens=False).ids
        full = tokenizer.encode("a", add_special_tokens=True).ids
    except Exception:  # e.g. a WordLevel vocabulary without "a" or an unknown token: nothing to learn
        return None
    if len(full) > len(plain) and full[1 : 1 + len(plain)] == plain:
        return int(full[0])
    return None


def chat_template_jinja(template: ChatTemplate, *, eos: str, bos: str | None = None) -> str:
    """A Jinja chat template (`tokenizer.apply_chat_template`) rendering a conversation as
    `tokenize_instructions` did: `bos` first when its cache had one, each message's role prefix
    and text, the separator between messages, and EOS at the end; `add_generation_prompt` ends
    with the separator and the assistant's prefix instead, as `ChatFormat.prompt_ids` does."""

    def literal(text: str) -> str:  # a Jinja string literal: JSON's escapes are Jinja's
        return json.dumps(text, ensure_ascii=False)

    roles = "".join(
        f"{{%- {'if' if i == 0 else 'elif'} message['role'] == {literal(role)} %}}"
        f"{{{{ {literal(getattr(template, role))} }}}}"
        for i, role in enumerate(ROLES)
    )
    unknown = literal(f"role must be one of {list(ROLES)}")
    sep = literal(template.separator)
    return (
        (f"{{{{ {literal(bos)} }}}}" if bos else "")
        + "{%- for message in messages %}"
        + roles
        + f"{{%- else %}}{{{{ raise_exception({unknown}) }}}}{{%- endif %}}"
        + "{{- message['content'] }}"
        + f"{{%- if not loop.last %}}{{{{ {sep} }}}}{{%- endif %}}"
        + "{%- endfor %}"
        + f"{{%- if add_generation_prompt %}}{{{{ {sep} }}}}{{{{ {literal(template.assistant)} }}}}"
        + f"{{%- else %}}{{{{ {literal(eos)} }}}}{{%- endif %}}"
    )


def chat_template_of(record: Mapping[str, Any] | None) -> ChatTemplate | None:
    """The `ChatTemplate` of a token cache ledger's `template` record, or None without one."""
    if not record:
        return None
    fields = {f.name for f in dataclasses.fields(ChatTemplate)}
    return ChatTemplate(**{k: v for k, v in record.items() if k in fields})


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
    chat_template: ChatTemplate | None = None,
) -> str:
    """Write `out_dir` (see the module docstring) from in-memory parameters; returns out_dir."""
    return _write_hf(
        hf_state_dict(params, config),
        config,
        out_dir,
        tokenizer_url=tokenizer_url,
        bos_id=bos_id,
        eos_id=eos_id,
        chat_template=chat_template,
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
    chat_template: ChatTemplate | None = None,
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
        chat_template=chat_template,
    )


def _tokenizer_configs(
    tokens: SpecialTokens, config: LlamaConfig, chat_template: ChatTemplate | None, chat_bos: str | None
) -> dict[str, dict[str, Any]]:
    """tokenizer_config.json and special_tokens_map.json: what `AutoTokenizer` reads beside tokenizer.json."""
    special = {"eos_token": tokens.eos[1], "pad_token": tokens.pad[1]}
    if tokens.bos:
        special["bos_token"] = tokens.bos[1]
    tokenizer_config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "model_max_length": config.max_seq_len,
        # decode as `tokenizers` does (our adapter's decode), without HF's extra space clean-up
        "clean_up_tokenization_spaces": False,
    }
    if chat_template is not None:
        tokenizer_config["chat_template"] = chat_template_jinja(chat_template, eos=tokens.eos[1], bos=chat_bos)
    return {"tokenizer_config.json": tokenizer_config, "special_tokens_map.json": special}


def _write_hf(
    tensors: dict[str, np.ndarray],
    config: LlamaConfig,
    out_dir: str,
    *,
    tokenizer_url: str | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    chat_template: ChatTemplate | None = None,
    torch_dtype: str = "float32",
) -> str:
    # The tokenizer is read (and its special tokens checked) before any weight is written.
    tokenizer_json = mfs.read_bytes(tokenizer_url) if tokenizer_url and mfs.exists(tokenizer_url) else None
    tokens = None
    if tokenizer_json is not None:
        tokenizer = tokenizer_from_bytes(tokenizer_json, str(tokenizer_url))
        tokens = special_tokens(tokenizer, bos_id=bos_id, eos_id=eos_id)
    ids = {
        "bos_token_id": tokens.bos[0] if tokens and tokens.bos else bos_id,
        "eos_token_id": tokens.eos[0] if tokens else eos_id,
        "pad_token_id": tokens.pad[0] if tokens else eos_id,
    }
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
    model_config = hf_config(
        config,
        bos_id=ids["bos_token_id"],
        eos_id=ids["eos_token_id"],
        pad_id=ids["pad_token_id"],
        torch_dtype=torch_dtype,
    )
    mfs.atomic_write_text(mfs.join(out_dir, "config.json"), json.dumps(model_config, indent=2))
    generation = {k: v for k, v in ids.items() if v is not None}
    mfs.atomic_write_text(mfs.join(out_dir, "generation_config.json"), json.dumps(generation, indent=2))
    if tokenizer_json is not None and tokens is not None:
        mfs.atomic_write_bytes(mfs.join(out_dir, "tokenizer.json"), tokenizer_json)
        chat_bos = tokens.bos[1] if tokens.bos and bos_id is not None else None  # the cache's BOS only
        for name, doc in _tokenizer_configs(tokens, config, chat_template, chat_bos).items():
            mfs.atomic_write_text(mfs.join(out_dir, name), json.dumps(doc, indent=2))
    logger.info("exported Hugging Face model to %s", out_dir)
    return out_dir
