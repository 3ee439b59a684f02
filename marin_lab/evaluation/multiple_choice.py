"""Multiple-choice tasks scored by log-likelihood, in the style of lm-evaluation-harness.

A task file is JSON lines, one question per line: `{"id", "context", "choices": [...], "label"}`.
For each choice the model scores log p(choice | context); `accuracy` picks the highest sum,
`accuracy_norm` the highest sum per UTF-8 byte of the choice (which removes the bias towards
short answers). The project ships small tasks in `marin_lab/evaluation/tasks/`; a path to any
file in this format works too.
"""

from __future__ import annotations

import json
import logging
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from marin_lab.errors import MarinLabError
from marin_lab.evaluation.scoring import bucket_length, token_logprobs
from marin_lab.io import fs as mfs
from marin_lab.models.llama import LlamaConfig, Params

logger = logging.getLogger(__name__)


class TaskError(MarinLabError, ValueError):
    """A task file is missing or malformed."""


def shipped_tasks() -> list[str]:
    folder = resources.files("marin_lab.evaluation") / "tasks"
    return sorted(p.name[: -len(".jsonl")] for p in folder.iterdir() if p.name.endswith(".jsonl"))


def load_task(name_or_path: str) -> tuple[str, list[dict[str, Any]]]:
    """(task name, examples) for a shipped task name or a .jsonl path/URL."""
    if name_or_path.endswith(".jsonl"):
        name, text = Path(name_or_path).stem, mfs.read_text(name_or_path)
    else:
        source = resources.files("marin_lab.evaluation") / "tasks" / f"{name_or_path}.jsonl"
        if not source.is_file():
            raise TaskError(f"unknown task {name_or_path!r}; shipped tasks are {shipped_tasks()}, "
                            "or give a path ending in .jsonl")
        name, text = name_or_path, source.read_text(encoding="utf-8")
    examples = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        ex = json.loads(line)
        if not isinstance(ex.get("choices"), list) or not 0 <= ex.get("label", -1) < len(ex["choices"]):
            raise TaskError(f"task {name!r} line {lineno}: needs 'choices' (a list) and a valid 'label'")
        examples.append(ex)
    if not examples:
        raise TaskError(f"task {name!r} has no examples")
    return name, examples


def encode_pair(tokenizer: Any, context: str, choice: str) -> tuple[list[int], list[int]]:
    """(context ids, continuation ids); the continuation is cut from the joint encoding when the
    tokenizer agrees on the context prefix, which keeps merges across the boundary honest."""
    ctx = tokenizer.encode(context, add_special_tokens=False).ids
    whole = tokenizer.encode(context + choice, add_special_tokens=False).ids
    if whole[: len(ctx)] == ctx and len(whole) > len(ctx):
        return ctx, whole[len(ctx):]
    return ctx, tokenizer.encode(choice, add_special_tokens=False).ids


def evaluate_task(params: Params, model: LlamaConfig, tokenizer: Any, examples: list[dict[str, Any]], *,
                  max_len: int, batch_size: int = 8, compute_dtype: str = "float32") -> dict[str, Any]:
    rows, spans, owners = [], [], []
    for ex_i, ex in enumerate(examples):
        for choice in ex["choices"]:
            ctx, cont = encode_pair(tokenizer, ex["context"], choice)
            ids = (ctx + cont)[-(max_len + 1):]
            rows.append(ids)
            spans.append(min(len(cont), len(ids) - 1))
            owners.append(ex_i)
    length = bucket_length(max(len(r) for r in rows), max_len + 1)
    tokens = np.zeros((len(rows), length), np.int32)
    for i, ids in enumerate(rows):
        tokens[i, : len(ids)] = ids
    logp = token_logprobs(params, model, tokens, batch_size=batch_size, compute_dtype=compute_dtype)
    scores = np.empty(len(rows))
    for i, ids in enumerate(rows):
        end = len(ids) - 1  # logp[:, t] scores token t+1
        scores[i] = logp[i, end - spans[i]:end].sum()
    correct = correct_norm = 0
    cursor = 0
    for ex in examples:
        k = len(ex["choices"])
        s = scores[cursor:cursor + k]
        norm = s / np.array([max(len(c.encode("utf-8")), 1) for c in ex["choices"]])
        correct += int(np.argmax(s) == ex["label"])
        correct_norm += int(np.argmax(norm) == ex["label"])
        cursor += k
    n = len(examples)
    return {"accuracy": correct / n, "accuracy_norm": correct_norm / n, "n": n}
