"""Evaluation tasks' items as text, read exactly as the evaluation reads them: the input of decontamination.

Each task is built by lm-eval from its own YAML through the same document hook as `evaluate_lm`
(`harness._document_source`: the pinned offline copy, else the hub, as `data` says), so an item
is one of the documents the evaluation scores, and its `id` is lm-eval's `doc_id` (the position in
the task's evaluated documents) -- what a results sample calls it. An item's text is its prompt
(`doc_to_text`) and its gold answer (the gold choice's text, or `doc_to_target` for generation
tasks). Words every prompt of a task starts or ends with ("Question:", "Answer:") are the task's
template, not the item, and are cut, so a leak of the bare question still matches as a whole.

A task without documents is kept with its one-line reason (`error`), never dropped: the
decontaminate step reports it as not checked.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from marin_lab.evaluation import harness
from marin_lab.store.contamination import write_task_items
from marin_lab.versioning import field_hints, versioned_field

logger = logging.getLogger(__name__)

__all__ = ["TaskItemsConfig", "export_task_items", "strip_template", "task_items"]


@field_hints
@dataclass(frozen=True)
class TaskItemsConfig:
    """Write the items of lm-eval tasks for decontamination."""

    tasks: tuple[str, ...] = versioned_field()
    """lm-eval task names (e.g. "arc_easy", "hellaswag", "gsm8k")."""
    output_path: str  # type: ignore[misc]  # mypy takes versioned_field() for a default; it has none
    """Where task_items.json goes."""
    data: str = versioned_field("offline")
    """Documents: "offline" (the pinned copy only, reproducible), "auto" or "hub", as evaluate_lm reads them."""


def strip_template(prompts: list[str]) -> list[str]:
    """`prompts` without the whole words that every one of them starts or ends with."""
    if len(prompts) < 2:
        return [p.strip() for p in prompts]
    head = os.path.commonprefix(prompts)
    tail = os.path.commonprefix([p[::-1] for p in prompts])[::-1]
    # Cut back to whitespace so a shared first letter or final "?" is not taken for a template.
    cut_head = max(head.rfind(" "), head.rfind("\n")) + 1 if not head[-1:].isspace() else len(head)
    cut_tail = min((i for i in (tail.find(" "), tail.find("\n")) if i >= 0), default=len(tail))
    cut_tail = len(tail) - cut_tail if not tail[:1].isspace() else len(tail)
    out = []
    for p in prompts:
        end = len(p) - cut_tail
        out.append(p[cut_head:end].strip() if end > cut_head else p.strip())
    return out


def _answer(task: Any, doc: dict[str, Any]) -> str:
    target = task.doc_to_target(doc)
    if task.OUTPUT_TYPE == "multiple_choice":
        choices = task.doc_to_choice(doc)
        gold = target[0] if isinstance(target, list) else target
        if isinstance(gold, int) and 0 <= gold < len(choices):
            return str(choices[gold])
    return target if isinstance(target, str) else ""


def _prompt(task: Any, doc: dict[str, Any]) -> str:
    text = task.doc_to_text(doc)
    if isinstance(text, int):  # winogrande-style: the prompt is one of the choices
        choices = task.doc_to_choice(doc)
        return str(choices[text]) if 0 <= text < len(choices) else ""
    return str(text)


def task_items(name: str, data: str = "offline") -> dict[str, Any]:
    """{"data_source", "split", "items": [{"id", "question", "answer"}]} of one task; HarnessError when
    it has no documents."""
    record: dict[str, dict[str, Any]] = {}
    harness.check_task_names([name])
    with harness._document_source(data, record), harness.quiet_lm_eval():
        loaded = harness.task_manager((), [name]).load([name])
    if loaded.get("groups") or name not in loaded["tasks"]:
        raise harness.HarnessError(f"task {name}: a group, not one task; name its tasks one by one")
    task = loaded["tasks"][name]
    docs = list(task.eval_docs)
    questions = strip_template([_prompt(task, d) for d in docs])
    pairs = enumerate(zip(docs, questions, strict=True))
    items = [{"id": i, "question": q, "answer": _answer(task, d)} for i, (d, q) in pairs]
    source = record.get(name, {})
    return {"data_source": source.get("data_source"), "split": source.get("split"), "items": items}


def export_task_items(config: TaskItemsConfig) -> dict[str, Any]:
    """task_items.json for `config.tasks`; a task without documents is written with its reason."""
    if config.data not in ("offline", "auto", "hub"):
        raise harness.HarnessError(f"task items: data={config.data!r}: use 'offline', 'auto' or 'hub'")
    harness.check_task_names(list(config.tasks))  # a misspelt name is an error, not an unchecked task
    tasks: dict[str, Any] = {}
    for name in config.tasks:
        try:
            tasks[name] = task_items(name, config.data)
        except harness.HarnessError as err:
            logger.warning("%s: not checked for contamination: %s", name, err)
            tasks[name] = {"error": str(err)}
    write_task_items(config.output_path, {"data": config.data, "tasks": tasks})
    counts = {n: len(t["items"]) if "items" in t else None for n, t in tasks.items()}
    logger.info("task items: %s", ", ".join(f"{n} {c if c is not None else 'no documents'}" for n, c in counts.items()))
    return {"tasks": counts, "without_documents": sorted(n for n, c in counts.items() if c is None)}
