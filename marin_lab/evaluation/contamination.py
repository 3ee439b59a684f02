"""Contamination of every evaluated task, through the lineage: which of its items the model's
training documents hold, and the score on the items they do not.

**The training documents** are found from the step records, never guessed from paths. From the
model's step (the step whose output the checkpoint is, or holds it under `checkpoints/`) the walk
follows the dependencies its config reads for training (not `eval_caches`: validation sets are
scored, not trained on): a training step that started from another model leads to that model's
step, and so on, until a `tokenize` step, whose `input_path`s are documents the model was trained
on. (A tokenize step's held-out validation documents are counted too: a conservative count.) No
step record at the checkpoint (an imported or hand-copied model), no tokenize step in the lineage,
or instruction data (`tokenize_instructions`, whose conversations are not read here): the tasks are
`checked: false` with that reason, never 0.

**The measurement**, per documents folder:

- the folder is a `decontaminate` step's `data/` (the documents without the contaminated ones) and
  its report checked the task on the same split and copy of the data: its report is used. The
  documents that held a checked item were removed, so none of the checked items is in them; the
  items it found too short to check stay unchecked;
- otherwise it is computed here, with the decontaminate step's own matcher and defaults
  (`processing.decontaminate`: 13-grams over a normalised word stream, items of 8-12 words matched
  whole, shorter ones unchecked) and the items as the evaluation reads them
  (`evaluation.task_items`): one pass over the folder's documents for all the tasks at once,
  ~3,000 documents per CPU-second. A corpus too large for that belongs behind a
  `default_decontaminate` step, which does the pass once, sharded, and whose report is then used.

A document folder that cannot be read whole (a damaged shard) leaves the tasks not checked, with
the shard named: a part of the data that was not read is never counted as clean.

Per task, `entry` gives results.json's `contamination` (docs/evaluation.md, "Contamination"): the
scored items found (`contaminated_ids`), those too short to check (`unchecked_ids`), `fraction` =
found / (scored - unchecked), and `clean`: the task's main metric over the other items with its
interval (`rescore.clean_score`, `stats.metric_interval`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from marin_lab.evaluation import harness, stats
from marin_lab.evaluation.rescore import clean_score
from marin_lab.evaluation.task_items import task_items
from marin_lab.execution.plan.planner import function_path
from marin_lab.io import fs as mfs
from marin_lab.io.compression import DECODE_ERRORS
from marin_lab.io.documents import SOURCE_PATTERNS, BadRecordError, list_shards, read_documents
from marin_lab.processing.decontaminate import NgramIndex, decontaminate, find_matches
from marin_lab.processing.instruction import tokenize_instructions
from marin_lab.processing.tokenize import tokenize
from marin_lab.store.contamination import read_contamination
from marin_lab.store.errors import RecordError
from marin_lab.store.reader import Reader, read_file
from marin_lab.store.step_record import StepRecord, read_step_record

logger = logging.getLogger(__name__)

__all__ = ["DocumentSource", "Lineage", "TaskToCheck", "entry", "measure", "not_checked", "training_lineage"]

NGRAM_SIZE = 13
"""Words per n-gram: the decontaminate step's default (lm-eval's and Marin's size)."""
MIN_ITEM_WORDS = 8
"""Items shorter than this are too short to check: the decontaminate step's default."""
_DOCS_PER_BATCH = 4096
_NOT_TRAINED_ON = frozenset({"eval_caches", "output_path"})
"""Config fields whose paths are not training data (validation sets, the step's own output)."""
_TOKENIZE = function_path(tokenize)
_TOKENIZE_INSTRUCTIONS = function_path(tokenize_instructions)
_DECONTAMINATE = function_path(decontaminate)


def not_checked(reason: str) -> dict[str, Any]:
    """A task's contamination entry when it could not be measured: never a 0."""
    return {
        "checked": False,
        "reason": reason,
        "contaminated_ids": [],
        "unchecked_ids": [],
        "fraction": None,
        "clean": None,
    }


@dataclasses.dataclass(frozen=True)
class DocumentSource:
    """A documents folder a tokenize step of the lineage read."""

    path: str
    report: str | None = None
    """The decontaminate step's output whose `data/` this is (its report covers it)."""
    on_bad_record: str = "raise"


@dataclasses.dataclass
class Lineage:
    """The training documents of a model, or why they are unknown."""

    model: str | None = None
    sources: list[DocumentSource] = dataclasses.field(default_factory=list)
    reason: str | None = None
    """Why no task can be checked (no record, no tokenize step, instruction data)."""


@dataclasses.dataclass(frozen=True)
class TaskToCheck:
    key: str
    name: str
    split: str | None
    data_source: str | None


def _strings(value: Any, skip: frozenset[str] = _NOT_TRAINED_ON) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k not in skip for s in _strings(v, skip)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v, skip)]
    return []


def _under(path: str, folder: str) -> bool:
    folder = folder.rstrip("/")
    return path.rstrip("/") == folder or path.startswith(folder + "/")


def _source(path: str, record: StepRecord, read: Reader) -> DocumentSource:
    config = record.config if isinstance(record.config, dict) else {}
    bad = "skip" if config.get("on_bad_record") == "skip" else "raise"
    for dep in record.dependencies:
        out = dep.get("output_path") if isinstance(dep, dict) else None
        if isinstance(out, str) and _under(path, out):
            writer = read_step_record(out, read)
            if writer is not None and writer.fn == _DECONTAMINATE and path.rstrip("/") == mfs.join(out, "data"):
                return DocumentSource(path, report=out, on_bad_record=bad)
    return DocumentSource(path, on_bad_record=bad)


def training_lineage(candidates: Sequence[str | None], read: Reader = read_file) -> Lineage:
    """The documents the model at the first of `candidates` (step outputs) with a step record was trained on."""
    try:
        return _walk([c for c in candidates if c], read)
    except RecordError as err:
        return Lineage(reason=f"the lineage cannot be read: {err}")


def _walk(candidates: list[str], read: Reader) -> Lineage:
    model = next((r for r in (read_step_record(c, read) for c in candidates) if r is not None), None)
    if model is None:
        where = candidates[0] if candidates else "the checkpoint"
        return Lineage(
            reason=f"{where} is not the output of a step with a record (an imported model?): "
            "its training documents are unknown"
        )
    lineage = Lineage(model=model.name)
    queue, seen = [model], {model.output_path}
    while queue:
        rec = queue.pop(0)
        if rec.fn == _TOKENIZE:
            config = rec.config if isinstance(rec.config, dict) else {}
            lineage.sources += [_source(p, rec, read) for p in _strings(config.get("input_path"))]
            continue
        if rec.fn == _TOKENIZE_INSTRUCTIONS:
            lineage.reason = f"step {rec.name} trained it on instruction data, which is not checked for contamination"
            return lineage
        used = _strings(rec.config)
        for dep in rec.dependencies:
            out = dep.get("output_path") if isinstance(dep, dict) else None
            if not isinstance(out, str) or out in seen or not any(_under(s, out) for s in used):
                continue
            seen.add(out)
            dep_record = read_step_record(out, read)
            if dep_record is None:
                lineage.reason = f"step {dep.get('name') or out} of the lineage has no record at {out}"
                return lineage
            queue.append(dep_record)
    if not lineage.sources:
        lineage.reason = f"the lineage of {model.name} reaches no tokenize step: its training documents are unknown"
    return lineage


@dataclasses.dataclass
class _Found:
    contaminated: set[int] = dataclasses.field(default_factory=set)
    unchecked: set[int] = dataclasses.field(default_factory=set)
    how: list[str] = dataclasses.field(default_factory=list)
    reason: str | None = None


def _report_for(source: DocumentSource, tasks: list[TaskToCheck], found: dict[str, _Found]) -> list[TaskToCheck]:
    """Apply the decontaminate report of `source` to the tasks it covers; the others are returned."""
    if source.report is None:
        return tasks
    try:
        report = read_contamination(source.report)
    except RecordError as err:
        logger.warning("contamination: %s; measuring its documents here instead", err)
        return tasks
    rest = []
    for t in tasks:
        entry = report["tasks"].get(t.name)
        same = isinstance(entry, dict) and entry.get("split") == t.split and entry.get("data_source") == t.data_source
        if not same:
            rest.append(t)
            continue
        # The documents that held a checked item were removed from data/: none of them is in it.
        found[t.key].unchecked |= {int(i) for i in entry.get("items_too_short") or [] if isinstance(i, int)}
        found[t.key].how.append(f"decontaminate report {source.report} (contaminated documents removed)")
    return rest


def _scan(source: DocumentSource, tasks: list[TaskToCheck], items: dict[str, Any], found: dict[str, _Found]) -> None:
    index, too_short = NgramIndex.build({t.key: items[t.name]["items"] for t in tasks}, NGRAM_SIZE, MIN_ITEM_WORDS)
    for t in tasks:
        found[t.key].unchecked |= set(too_short[t.key])
    shards = list_shards(source.path, SOURCE_PATTERNS)
    if not shards:
        for t in tasks:
            found[t.key].reason = f"no document shards at {source.path}"
        return
    documents = 0
    for shard in shards:
        try:
            batch: list[str] = []
            for doc in read_documents(shard, on_bad_record=source.on_bad_record):
                batch.append(str(doc.get("text", "")))
                if len(batch) >= _DOCS_PER_BATCH:
                    _match(index, batch, found)
                    documents += len(batch)
                    batch = []
            _match(index, batch, found)
            documents += len(batch)
        except (BadRecordError, OSError, *DECODE_ERRORS) as err:
            text = str(err).strip().splitlines()
            for t in tasks:
                found[t.key].reason = f"{shard} could not be read ({text[0] if text else type(err).__name__})"
            return
    for t in tasks:
        found[t.key].how.append(f"computed over {documents} documents of {source.path}")


def _match(index: NgramIndex, texts: list[str], found: dict[str, _Found]) -> None:
    for hits in find_matches(index, texts):
        for item in hits:
            key = index.task_names[int(index.task_of_item[item])]
            found[key].contaminated.add(int(index.id_of_item[item]))


def measure(lineage: Lineage, tasks: Sequence[TaskToCheck], data: str) -> dict[str, _Found]:
    """Per task key, the items found in the lineage's documents (or why they could not be measured)."""
    found = {t.key: _Found() for t in tasks}
    if lineage.reason is not None:
        for f in found.values():
            f.reason = lineage.reason
        return found
    items: dict[str, Any] = {}
    for source in lineage.sources:
        todo = [t for t in _report_for(source, list(tasks), found) if found[t.key].reason is None]
        for t in todo:
            if t.name not in items:
                try:
                    items[t.name] = task_items(t.name, data)
                except harness.HarnessError as err:
                    items[t.name] = {"error": str(err).splitlines()[0]}
            got = items[t.name]
            if "error" in got:
                found[t.key].reason = f"its items could not be read for checking: {got['error']}"
            elif (got.get("split"), got.get("data_source")) != (t.split, t.data_source):
                found[t.key].reason = (
                    f"its items for checking come from {got.get('data_source')} ({got.get('split')}), "
                    f"the evaluation's from {t.data_source} ({t.split})"
                )
        todo = [t for t in todo if found[t.key].reason is None]
        if todo:
            _scan(source, todo, items, found)
    return found


CLEAN_METRICS = ("acc_norm", "acc", "exact_match")
"""The metric a clean score is given in, the first of these a task has (the leaderboard's order),
else its first other right/wrong metric; a task with none (perplexity) gets no clean score."""


def primary_metric(metrics: Iterable[str]) -> str | None:
    names = sorted(metrics)
    return next((m for m in CLEAN_METRICS if m in names), next((m for m in names if stats.binary_metric(m)), None))


def entry(found: _Found, values: dict[Any, float], metric: str | None) -> dict[str, Any]:
    """results.json's `contamination` for a task whose scored items' values of `metric` are `values`."""
    if found.reason is not None:
        return not_checked(found.reason)
    scored = set(values)
    contaminated = sorted(found.contaminated & scored)
    unchecked = sorted((found.unchecked & scored) - found.contaminated)
    checked = len(scored) - len(unchecked)
    if checked == 0:
        return not_checked(f"every scored item is shorter than {MIN_ITEM_WORDS} words: too short to check")
    return {
        "checked": True,
        "reason": None,
        "source": found.how,
        "contaminated_ids": contaminated,
        "unchecked_ids": unchecked,
        "items_checked": checked,
        "fraction": len(contaminated) / checked,
        "clean": clean_score(values, metric, contaminated, unchecked) if metric else None,
    }
