"""A trained or fine-tuned model, its tokenizer and its chat format, from what the steps wrote.

`load_model(path)` takes any of:

- a `train_lm` output (its latest complete checkpoint) or one of its `checkpoints/step-NNNNNN`;
- a `finetune_lm` output: its `merged/` checkpoint (adapters folded in; QLoRA's NF4 base
  dequantized) when the run finished, else its latest `checkpoints/step-NNNNNN`, which for
  lora/qlora holds only the adapters: they are merged here into the base the metadata names;
  for mode 'full' it holds the whole model;
- a `quantize_base` output (NF4 projections, dequantized to fp32 for inference);
- a Hugging Face Llama folder (config.json + safetensors), e.g. a run's `hf/` export.

Params come back as plain fp32 arrays on the default device: one pytree the model, the scorer
and generation all take.

The tokenizer of a checkpoint is looked for in its run's `hf/tokenizer.json`, then in the token
caches of the run's step record (`.executor_info`), then, for a fine-tune, in its base's. The chat
format of a fine-tune is the instruction cache's template (`tokenize_instructions`) that
`finetune_lm` records in its checkpoints' metadata (`chat`), or, for fine-tunes written before
that, the template in the ledger of the caches its step record names.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

import jax
import jax.numpy as jnp

from marin_lab.errors import MarinLabError
from marin_lab.evaluation.scoring import as_params
from marin_lab.io import fs as mfs
from marin_lab.models.llama import LlamaConfig, Params, init_params
from marin_lab.peft.lora import LoraConfig, LoraError, merge_lora
from marin_lab.processing.errors import TokenizeError
from marin_lab.processing.instruction import ChatTemplate, render_segments
from marin_lab.processing.tokenizers import tokenizer_at
from marin_lab.store.errors import RecordError
from marin_lab.store.step_record import read_step_record
from marin_lab.training import checkpoint as ckpt
from marin_lab.training.base_model import QuantConfig, load_base, quantize_params
from marin_lab.training.errors import TrainingError
from marin_lab.training.hf_import import import_hf, is_hf_checkpoint
from marin_lab.training.token_cache import TokenCache, TokenCacheError

logger = logging.getLogger(__name__)

__all__ = ["ChatFormat", "ModelLoadError", "chat_format", "find_tokenizer", "load_model", "load_tokenizer_for"]


class ModelLoadError(MarinLabError, ValueError):
    """A model that cannot be loaded: missing or damaged checkpoint, no model shape, no base."""


def _dense(p: Any) -> Any:
    return p.dequantize(jnp.float32) if hasattr(p, "dequantize") else p


def _dequantized(params: Params) -> Params:
    return jax.tree_util.tree_map(_dense, params, is_leaf=lambda p: hasattr(p, "dequantize"))


def _finetune_output(path: str) -> str | None:
    """`path`'s merged checkpoint when `path` is a finished fine-tune's output (merged/ inside)."""
    merged = mfs.join(path, "merged")
    try:
        return ckpt.resolve_checkpoint(merged) if mfs.exists(merged) else None
    except ckpt.CheckpointError:
        return None


def _subtree_target(resolved: str, key: str) -> Any:
    """The abstract tree of `state[key]` as the checkpoint's index lists it (names, shapes, dtypes)."""
    try:
        index = mfs.read_json(mfs.join(resolved, "index.json"))
        leaves = index["leaves"]
    except (FileNotFoundError, ValueError, KeyError, TypeError) as err:
        raise ModelLoadError(
            f"checkpoint {resolved}: index.json is missing or damaged ({err}); the checkpoint was not fully written"
        ) from None
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    tree: dict[str, Any] = {}
    for entry in leaves:
        keys = re.findall(r"\['([^']*)'\]", str(entry.get("name", "")))
        if len(keys) < 2 or keys[0] != key:
            continue
        node = tree
        for k in keys[1:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = jax.ShapeDtypeStruct(tuple(entry["shape"]), jnp.dtype(entry["dtype"]), sharding=device)
    if not tree:
        raise ModelLoadError(f"checkpoint {resolved} holds no '{key}' arrays")
    return tree


def _lora_config(meta: dict[str, Any], resolved: str) -> LoraConfig:
    raw = meta.get("lora")
    if not isinstance(raw, dict):
        raise ModelLoadError(
            f"checkpoint {resolved}: metadata.json records mode {meta.get('mode')!r} but no 'lora' settings"
        )
    fields = {f.name for f in dataclasses.fields(LoraConfig)}
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items() if k in fields}
    return LoraConfig(**values)


def _load_adapters(resolved: str, meta: dict[str, Any], model: LlamaConfig) -> Params:
    """Base + the adapters of a lora/qlora fine-tune checkpoint, merged (NF4 dequantized)."""
    lora = _lora_config(meta, resolved)
    base = meta.get("base")
    if not isinstance(base, str):
        raise ModelLoadError(f"checkpoint {resolved} holds adapters only and its metadata names no base")
    try:
        _, base_params, _ = load_base(base, model)
    except TrainingError as err:
        raise ModelLoadError(
            f"checkpoint {resolved} holds adapters only; its base {base} cannot be loaded "
            f"({err}); load the fine-tune's merged/ checkpoint or restore the base"
        ) from None
    adapters = ckpt.load_subtree(resolved, "trainable", _subtree_target(resolved, "trainable"))
    try:
        return jax.jit(lambda b, a: merge_lora(b, a, lora))(base_params, adapters)
    except LoraError as err:
        raise ModelLoadError(f"checkpoint {resolved}: {err}") from None


def load_model(path: str) -> tuple[LlamaConfig, Params, str, int]:
    """(model shape, fp32 params, the checkpoint read, its step) of a trained or fine-tuned model.

    `path`: see the module docstring. A Hugging Face folder has no step: 0 is returned. Raises
    ModelLoadError (one line naming the path) when nothing loadable is there.
    """
    if is_hf_checkpoint(path):
        try:
            model, params = import_hf(path)
        except (TrainingError, ValueError, OSError) as err:
            raise ModelLoadError(f"Hugging Face folder {path}: {err}") from None
        return model, as_params(params), path, 0
    try:
        resolved = _finetune_output(path) or ckpt.resolve_checkpoint(path)
        meta = ckpt.read_metadata(resolved)
        if not isinstance(meta.get("model"), dict):
            raise ModelLoadError(f"checkpoint {resolved} records no model config (metadata.json 'model')")
        try:
            model = LlamaConfig(**meta["model"])
            model.validate()
        except (TypeError, ValueError) as err:
            raise ModelLoadError(f"checkpoint {resolved}: metadata.json 'model' is not a model shape ({err})") from None
        step = int(meta.get("step", 0))
        mode = meta.get("mode")
        if mode == "full" and not _has_key(resolved, "params"):
            params = ckpt.load_subtree(resolved, "trainable", _subtree_target(resolved, "trainable"))
        elif mode in ("lora", "qlora") and not _has_key(resolved, "params"):
            params = _load_adapters(resolved, meta, model)
        else:
            template = jax.eval_shape(lambda: init_params(model, jax.random.key(0)))
            quant = meta.get("quantization")
            if isinstance(quant, dict):  # a quantize_base output
                qc = QuantConfig(block_size=quant["block_size"], double_quant=quant["double_quant"])
                template = jax.eval_shape(lambda: quantize_params(init_params(model, jax.random.key(0)), qc))
            params = ckpt.load_params(resolved, template)
    except ckpt.CheckpointError as err:
        raise ModelLoadError(str(err)) from None
    params = jax.tree_util.tree_map(lambda p: p.astype(jnp.float32), _dequantized(params))
    return model, as_params(params), resolved, step


def _has_key(resolved: str, key: str) -> bool:
    try:
        leaves = mfs.read_json(mfs.join(resolved, "index.json")).get("leaves", [])
    except (FileNotFoundError, ValueError, AttributeError):
        return False
    return any(str(e.get("name", "")).startswith(f"['{key}']") for e in leaves if isinstance(e, dict))


# --- the run around a checkpoint ------------------------------------------------------------------


def _run_dirs(path: str) -> list[str]:
    """Folders that may hold a run's hf/ and step record: `path`, and the output path(s) above a
    `.../checkpoints/step-NNNNNN` (and above a fine-tune's `merged/`)."""
    out = [path.rstrip("/")]
    parts = path.rstrip("/").split("/")
    if len(parts) >= 2 and re.fullmatch(r"step-\d+", parts[-1]) and parts[-2] == "checkpoints":
        run = "/".join(parts[:-2])
        out.append(run)
        if run.endswith("/merged"):
            out.append(run[: -len("/merged")])
    elif path.rstrip("/").endswith("/merged"):
        out.append(path.rstrip("/")[: -len("/merged")])
    return list(dict.fromkeys(d for d in out if d))


def _record_caches(run: str) -> list[str]:
    """Token cache paths named by the step record of output path `run` (config.data.caches)."""
    try:
        record = read_step_record(run)
    except RecordError:
        return []
    config = record.config if record is not None else None
    data = config.get("data") if isinstance(config, dict) else None
    caches = data.get("caches") if isinstance(data, dict) else None
    if not isinstance(caches, dict):
        return []
    return [caches[k] for k in sorted(caches) if isinstance(caches[k], str)]


def _ledger(cache: str) -> dict[str, Any] | None:
    try:
        return TokenCache(cache).ledger
    except (TokenCacheError, OSError, ValueError):
        return None


def _metadata(path: str) -> dict[str, Any]:
    try:
        resolved = _finetune_output(path) or ckpt.resolve_checkpoint(path)
        return ckpt.read_metadata(resolved)
    except ckpt.CheckpointError:
        return {}


def find_tokenizer(path: str, *, _seen: frozenset[str] = frozenset()) -> str | None:
    """The tokenizer.json of the model at `path` (see the module docstring), or None."""
    dirs = _run_dirs(path)
    for d in dirs:
        for candidate in (mfs.join(d, "tokenizer.json"), mfs.join(d, "hf", "tokenizer.json")):
            if mfs.exists(candidate):
                return candidate
    for d in dirs:
        for cache in _record_caches(d):
            try:
                url = TokenCache(cache).tokenizer_url()
            except (TokenCacheError, OSError, ValueError):
                continue
            if url and mfs.exists(url):
                return url
    base = _metadata(path).get("base")
    if isinstance(base, str) and base not in _seen and base != path:
        return find_tokenizer(base, _seen=_seen | {path})
    return None


def load_tokenizer_for(path: str, tokenizer_path: str | None = None) -> tuple[Any, str]:
    """(tokenizers.Tokenizer, where it was read) for the model at `path`; ModelLoadError if none."""
    url = tokenizer_path or find_tokenizer(path)
    if url is None:
        raise ModelLoadError(
            f"no tokenizer found for {path} (looked for hf/tokenizer.json and the run's token "
            "caches); pass a tokenizer.json"
        )
    if not mfs.exists(url):
        raise ModelLoadError(f"tokenizer {url} does not exist")
    try:
        return tokenizer_at(url), url
    except TokenizeError as err:
        cause = err.__cause__ or err  # the tokenizers library's own words
        first_line = str(cause).splitlines()[0][:200]
        raise ModelLoadError(f"tokenizer {url} is not a readable tokenizer.json ({first_line})") from None


# --- chat format ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ChatFormat:
    """How a chat fine-tune saw conversations: the template, and the BOS / EOS ids of its cache."""

    template: ChatTemplate
    bos_id: int | None = None
    eos_id: int | None = None

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ChatFormat:
        fields = {f.name for f in dataclasses.fields(ChatTemplate)}
        template = ChatTemplate(**{k: v for k, v in (record.get("template") or {}).items() if k in fields})
        return cls(template, record.get("bos_id"), record.get("eos_id"))

    def prompt_ids(self, tokenizer: Any, user_text: str) -> list[int]:
        """Token ids of one user turn followed by the assistant's marker, encoded segment by segment
        exactly as `tokenize_instructions` encoded the training conversations."""
        pieces = render_segments(
            [{"role": "user", "content": user_text}, {"role": "assistant", "content": ""}], self.template
        )
        ids = [self.bos_id] if self.bos_id is not None else []
        for enc in tokenizer.encode_batch([text for text, _ in pieces], add_special_tokens=False):
            ids += enc.ids
        return ids


def chat_format(path: str) -> ChatFormat | None:
    """The chat format of the fine-tune at `path`, or None when it is not a chat fine-tune."""
    meta = _metadata(path)
    if isinstance(meta.get("chat"), dict):
        return ChatFormat.from_record(meta["chat"])
    if not meta.get("mode"):  # not a fine-tune
        return None
    for d in _run_dirs(path):
        for cache in _record_caches(d):
            ledger = _ledger(cache)
            if ledger and isinstance(ledger.get("template"), dict):
                return ChatFormat.from_record(
                    {"template": ledger["template"], "bos_id": ledger.get("bos_id"), "eos_id": ledger.get("eos_id")}
                )
    return None
