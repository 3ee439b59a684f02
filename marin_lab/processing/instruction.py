"""Instruction data: chat/instruction JSON lines -> a token cache whose loss counts responses only.

A record is one JSON object per line (`.jsonl`, `.jsonl.gz`, `.jsonl.zst`), either

    {"id": "q-17", "prompt": "What is ...?", "response": "It is ..."}
    {"id": "c-3", "messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."},
                              {"role": "assistant", "content": "..."}, ...]}

`prompt`/`response` is the one-turn shorthand of `messages`. Each conversation is rendered with a
plain-text template (`ChatTemplate`) and tokenized segment by segment, so every token knows whether
it belongs to an assistant reply. The token cache (docs/token_cache.md) then gets, beside each
shard's tokens and offsets, a `loss_mask.npy`: 1 on assistant tokens and on the EOS that ends the
conversation, 0 on system/user text and on the template's role markers. Conversations are packed
end to end like any documents; the trainer cuts fixed windows from them and averages the loss
over masked-in positions only.

Determinism and reruns follow `tokenize`: output shard i comes from input shard i, a record's split
is a hash of its id, a finished shard has a completion marker and is not redone, and the ledger is
written last.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

import fsspec
import numpy as np

from marin_lab.io import fs as mfs
from marin_lab.io.documents import BadRecordError, ReadStats, list_shards
from marin_lab.processing.errors import TokenizeError
from marin_lab.processing.quarantine import Quarantine, ShardPolicy
from marin_lab.processing.shards import mark_shard_done, read_shard_done
from marin_lab.processing.tokenize import ledger_left_out, split_of
from marin_lab.processing.tokenizers import find_eos_id, resolve_tokenizer_bytes, tokenizer_at, tokenizer_from_bytes
from marin_lab.store.token_cache import (
    TOKENIZER_FILE,
    add_split,
    new_ledger,
    shard_name,
    token_dtype,
    write_ledger,
    write_shard,
)
from marin_lab.versioning import field_hints

logger = logging.getLogger(__name__)

__all__ = ["ChatTemplate", "TokenizeInstructionsConfig", "render_segments", "tokenize_instructions"]

SPLITS = ("train", "validation")
ROLES = ("system", "user", "assistant")


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """Plain-text role markers around each message (no special tokens needed in the tokenizer)."""

    system: str = "### System:\n"
    """Prefix of a system message."""
    user: str = "### Question:\n"
    """Prefix of a user message."""
    assistant: str = "### Answer:\n"
    """Prefix of an assistant message (not in the loss: the model is given it at inference)."""
    separator: str = "\n\n"
    """Text after every message but the last; counts in the loss after an assistant message."""


@field_hints
@dataclasses.dataclass(frozen=True)
class TokenizeInstructionsConfig:
    """Tokenize instruction/chat records into a token cache with a response-only loss mask."""

    input_path: str | list[str]
    """Folder(s) or files of instruction records (.jsonl, .jsonl.gz, .jsonl.zst)."""
    output_path: str
    """Where the token cache goes."""
    tokenizer: str
    """A tokenizer.json path or URL, a folder holding one, or a hub model id."""
    tokenizer_revision: str | None = None
    """Hub revision when `tokenizer` is a hub id."""
    template: ChatTemplate = ChatTemplate()
    """How conversations are rendered as text."""
    validation_fraction: float = 0.1
    """Share of records (by a hash of their id) that go to the validation split."""
    split_salt: str = ""
    """Mixed into the split hash."""
    eos_token: str | None = None
    """Token that ends each conversation; None picks the tokenizer's end-of-text token."""
    bos_token: str | None = None
    """If set, prepended to each conversation (never in the loss)."""
    on_bad_record: str = "raise"
    """'raise' stops at the first bad record (file:line in the message); 'skip' counts and skips it."""
    num_workers: int = 1
    """Shards tokenized in parallel; never changes the output."""
    shard_policy: ShardPolicy | None = None
    """Quarantine failing shards (retries, time limit, allowance, memory per shard; docs/data.md
    "Bad shards"); None: the first failing shard fails the step."""


def _messages(obj: Any) -> list[dict[str, str]] | tuple[str, str]:
    """The record's messages, or (reason, detail) when it is not a valid record."""
    if not isinstance(obj, dict):
        return "not_an_object", f"expected a JSON object, got {type(obj).__name__}"
    if not isinstance(obj.get("id"), str):
        return "missing_id", "no string 'id' field"
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            return "bad_messages", "'messages' must be a non-empty list"
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                return "bad_messages", f"messages[{i}] must be {{'role': one of {list(ROLES)}, 'content': str}}"
        if not any(m["role"] == "assistant" for m in msgs):
            return "no_response", "no assistant message: nothing to learn from"
        return msgs
    prompt, response = obj.get("prompt"), obj.get("response")
    if not isinstance(prompt, str) or not isinstance(response, str):
        return "missing_prompt_or_response", "expected string 'prompt' and 'response' fields (or 'messages')"
    if not response:
        return "no_response", "'response' is empty: nothing to learn from"
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]


def render_segments(messages: list[dict[str, str]], template: ChatTemplate) -> list[tuple[str, bool]]:
    """(text, counts in the loss) pieces of a conversation, in order."""
    pieces: list[tuple[str, bool]] = []
    for i, m in enumerate(messages):
        is_reply = m["role"] == "assistant"
        pieces.append((getattr(template, m["role"]), False))
        pieces.append((m["content"], is_reply))
        if i < len(messages) - 1:
            pieces.append((template.separator, is_reply))
    return [(text, loss) for text, loss in pieces if text]


def read_instructions(path: str, *, on_bad_record: str, stats: ReadStats) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """(id, messages) of each good record of one file; bad ones raise or are counted (file:line)."""
    with fsspec.open(path, "rb", compression="infer") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
                found = _messages(obj)
            except UnicodeDecodeError as err:
                found = ("bad_utf8", f"not UTF-8 at byte {err.start}")
            except json.JSONDecodeError as err:
                found = ("bad_json", f"malformed JSON ({err.msg} at column {err.colno})")
            if isinstance(found, tuple):
                bad = BadRecordError(path, lineno, *found)
                if on_bad_record == "raise":
                    raise bad
                stats.add_skip(bad)
                continue
            stats.read += 1
            yield obj["id"], found


@dataclasses.dataclass(frozen=True)
class _ShardTask:
    index: int
    input_file: str
    config: TokenizeInstructionsConfig
    eos_id: int
    bos_id: int | None
    dtype: str
    tokenizer_sha256: str


def _tokenize_shard(task: _ShardTask) -> dict:
    cfg = task.config
    name = shard_name(task.index)
    marker = mfs.join(cfg.output_path, "progress", name)
    previous = read_shard_done(marker)
    if previous is not None:
        return {**previous, "reused": True}
    # The cache's copy, loaded once per process (the caller's own tasks use the one it loaded).
    tokenizer = tokenizer_at(mfs.join(cfg.output_path, TOKENIZER_FILE), sha256=task.tokenizer_sha256)
    stats = ReadStats()
    per_split: dict[str, tuple[list, list, list]] = {s: ([], [], []) for s in SPLITS}
    for record_id, messages in read_instructions(task.input_file, on_bad_record=cfg.on_bad_record, stats=stats):
        pieces = render_segments(messages, cfg.template)
        encoded = tokenizer.encode_batch([text for text, _ in pieces], add_special_tokens=False)
        ids = [task.bos_id] if task.bos_id is not None else []
        mask = [0] * len(ids)
        for enc, (_, in_loss) in zip(encoded, pieces, strict=True):
            ids += enc.ids
            mask += [int(in_loss)] * len(enc.ids)
        ids.append(task.eos_id)
        mask.append(1)  # the model learns to stop after its answer
        tokens, masks, lengths = per_split[split_of(record_id, cfg.validation_fraction, cfg.split_salt)]
        tokens.append(np.asarray(ids, dtype=task.dtype))
        masks.append(np.asarray(mask, dtype=np.uint8))
        lengths.append(len(ids))
    splits = {}
    for split, (tokens, masks, lengths) in per_split.items():
        if lengths:
            splits[split] = write_shard(cfg.output_path, split, name, task.dtype, tokens, lengths, loss_mask=masks)
    info = {"index": task.index, "input": task.input_file, "stats": stats.to_dict(), "splits": splits}
    mark_shard_done(marker, info)
    return {**info, "reused": False}


def _check(config: TokenizeInstructionsConfig) -> None:
    if not 0.0 <= config.validation_fraction < 1.0:
        raise TokenizeError(
            f"TokenizeInstructionsConfig.validation_fraction={config.validation_fraction}: expected 0 <= x < 1"
        )
    if config.on_bad_record not in ("raise", "skip"):
        raise TokenizeError(
            f"TokenizeInstructionsConfig.on_bad_record={config.on_bad_record!r}: expected 'raise' or 'skip'"
        )


def tokenize_instructions(config: TokenizeInstructionsConfig) -> dict:
    """Tokenize every instruction file under `config.input_path` into a masked token cache."""
    _check(config)
    paths = [config.input_path] if isinstance(config.input_path, str) else list(config.input_path)
    if not paths:
        raise TokenizeError("TokenizeInstructionsConfig.input_path is empty: give at least one folder or file")
    shards = [s for p in paths for s in list_shards(p)]
    tok_bytes, origin = resolve_tokenizer_bytes(config.tokenizer, config.tokenizer_revision)
    tokenizer = tokenizer_from_bytes(tok_bytes, origin)
    eos_id = find_eos_id(tokenizer, config.eos_token)
    bos_id = tokenizer.token_to_id(config.bos_token) if config.bos_token else None
    if config.bos_token and bos_id is None:
        raise TokenizeError(f"TokenizeInstructionsConfig.bos_token={config.bos_token!r} is not in the tokenizer")
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    dtype = token_dtype(vocab_size)
    mfs.atomic_write_bytes(mfs.join(config.output_path, TOKENIZER_FILE), tok_bytes)
    if config.num_workers <= 1:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    tok_sha = hashlib.sha256(tok_bytes).hexdigest()
    tasks = [_ShardTask(i, path, config, eos_id, bos_id, dtype, tok_sha) for i, path in enumerate(shards)]
    quarantine = Quarantine("tokenize_instructions", config.output_path, config.shard_policy)
    results = [
        r
        for r in quarantine.map(
            _tokenize_shard, tasks, num_workers=config.num_workers, desc="tokenize instructions", labels=shards
        )
        if r is not None
    ]
    left_out = quarantine.finish()
    stats = ReadStats()
    for r in results:
        stats.merge(ReadStats(**r["stats"]))
    if stats.read == 0:
        raise TokenizeError(
            f"tokenize_instructions: no valid record in {len(shards)} file(s) under {config.input_path!r} "
            f"({stats.skipped} bad records skipped); records need 'id' and 'prompt'/'response' or 'messages'"
        )
    ledger = new_ledger(
        dtype=dtype,
        vocab_size=vocab_size,
        eos_id=eos_id,
        bos_id=bos_id,
        tokenizer={
            "file": TOKENIZER_FILE,
            "sha256": tok_sha,
            "source": config.tokenizer,
            "revision": config.tokenizer_revision,
        },
        split={
            "validation_fraction": config.validation_fraction,
            "salt": config.split_salt,
            "rule": "blake2b-64(salt NUL id) < fraction * 2**64",
        },
        loss_mask="response tokens only (instruction data)",
        template=dataclasses.asdict(config.template),
        **({"left_out": ledger_left_out(left_out)} if left_out else {}),
    )
    for split in SPLITS:
        add_split(ledger, split, [r["splits"][split] for r in results if split in r["splits"]], masked=True)
    write_ledger(config.output_path, ledger)
    summary = {
        "records": stats.read,
        "skipped": stats.skipped,
        "skip_reasons": stats.to_dict()["skip_reasons"],
        "skip_examples": stats.examples,
        "tokens": {s: ledger["splits"][s]["tokens"] for s in SPLITS},
        "loss_tokens": {s: ledger["splits"][s]["loss_tokens"] for s in SPLITS},
        "records_by_split": {s: ledger["splits"][s]["documents"] for s in SPLITS},
        "shards_reused": sum(1 for r in results if r["reused"]),
    }
    if config.shard_policy is not None:
        summary["bad_shards"] = left_out
    logger.info(
        "tokenize_instructions: %d records (%d skipped) -> %s tokens, %s in the loss",
        stats.read,
        stats.skipped,
        summary["tokens"],
        summary["loss_tokens"],
    )
    return summary
