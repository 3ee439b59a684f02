"""`evaluate_lm`: perplexity / bits-per-byte on validation sets and multiple-choice tasks.

Writes `{output_path}/results.json`:
`{"perplexity": {set: x}, "bits_per_byte": {set: x|null}, "tasks": {task: {"accuracy", "accuracy_norm",
"n"}}, "details": {...}, "checkpoint": path, "step": n}`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from marin_lab.errors import MarinLabError
from marin_lab.evaluation.loading import ModelLoadError, find_tokenizer, load_model
from marin_lab.evaluation.multiple_choice import TaskError, evaluate_task, load_task
from marin_lab.evaluation.perplexity import evaluate_cache, load_tokenizer
from marin_lab.io import fs as mfs
from marin_lab.models.llama import LlamaConfig
from marin_lab.training.token_cache import TokenCache
from marin_lab.versioning import versioned_field

logger = logging.getLogger(__name__)


class EvaluationError(MarinLabError, ValueError):
    """An evaluation cannot run: missing checkpoint, validation set or tokenizer."""


@dataclasses.dataclass(frozen=True)
class EvalLmConfig:
    """Evaluate one trained model."""

    checkpoint_path: str = versioned_field()
    """A train step's output path (its latest checkpoint is used) or a step-NNNNNN folder."""
    output_path: str  # type: ignore[misc]  # mypy takes versioned_field() for a default; it has none
    """Where results.json goes."""
    caches: dict[str, str] = versioned_field(default_factory=dict)
    """Validation set name -> token cache path; each cache's validation split is scored."""
    split: str = versioned_field("validation")
    """Split of each cache to score."""
    seq_len: int = versioned_field(512)
    """Tokens of context per scored window (at most the model's max_seq_len)."""
    batch_size: int = 8
    """Sequences per forward pass."""
    max_sequences: int | None = versioned_field(256)
    """At most this many evenly spaced windows per validation set; None scores all."""
    tasks: tuple[str, ...] = versioned_field(())
    """Multiple-choice tasks: shipped names (see evaluation.tasks.shipped_tasks()) or .jsonl paths."""
    tokenizer_path: str | None = versioned_field(None)
    """tokenizer.json for the tasks; None takes the first cache's, then the checkpoint's
    (evaluation.loading.find_tokenizer)."""
    compute_dtype: str = versioned_field("float32")
    """Dtype of the forward pass."""


def _load_model(path: str) -> tuple[LlamaConfig, Any, str, int]:
    try:
        return load_model(path)
    except ModelLoadError as err:
        raise EvaluationError(f"checkpoint_path: {err}") from err


def _tokenizer_url(config: EvalLmConfig) -> str | None:
    if config.tokenizer_path:
        return config.tokenizer_path
    for name in sorted(config.caches):
        url = TokenCache(config.caches[name]).tokenizer_url()
        if url and mfs.exists(url):
            return url
    return find_tokenizer(config.checkpoint_path)


def evaluate_lm(config: EvalLmConfig) -> dict[str, Any]:
    """Score the model on every validation set and task; writes and returns results.json's content."""
    model, params, resolved, step = _load_model(config.checkpoint_path)
    if config.seq_len > model.max_seq_len:
        raise EvaluationError(
            f"seq_len={config.seq_len} is larger than the model's max_seq_len={model.max_seq_len}"
        )
    tokenizer = None
    if config.tasks:
        tokenizer = load_tokenizer(_tokenizer_url(config))
        if tokenizer is None:
            raise EvaluationError(
                "tasks need a tokenizer: set tokenizer_path, or give caches that hold tokenizer.json"
            )
    results: dict[str, Any] = {"perplexity": {}, "bits_per_byte": {}, "tasks": {}, "details": {},
                               "checkpoint": resolved, "step": step}
    for name in sorted(config.caches):
        r = evaluate_cache(params, model, config.caches[name], split=config.split, seq_len=config.seq_len,
                           batch_size=config.batch_size, max_sequences=config.max_sequences,
                           compute_dtype=config.compute_dtype, name=name)
        results["perplexity"][name] = r["perplexity"]
        results["bits_per_byte"][name] = r["bits_per_byte"]
        results["details"][name] = r
        logger.info("eval %s: perplexity %.3f, bits/byte %s", name, r["perplexity"], r["bits_per_byte"])
    for task in config.tasks:
        try:
            name, examples = load_task(task)
        except TaskError as err:
            raise EvaluationError(f"tasks: {err}") from err
        results["tasks"][name] = evaluate_task(params, model, tokenizer, examples, max_len=config.seq_len,
                                               batch_size=config.batch_size,
                                               compute_dtype=config.compute_dtype)
        logger.info("eval task %s: %s", name, results["tasks"][name])
    mfs.write_json(mfs.join(config.output_path, "results.json"), results)
    return results
