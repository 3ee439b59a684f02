"""Decontamination: which documents hold which evaluation items, by word n-gram overlap.

Both sides are read as one stream of words: NFKC, lower case, every punctuation mark, symbol and
kind of whitespace (line breaks included) turned into a space, then split. Layout does not hide a
leak: a question re-wrapped into 8-word lines, re-cased or re-punctuated has the same words. (Marin
takes 13-grams per paragraph, so re-wrapping leaked text into 8-word lines drops its measured overlap
to 0, marin#6852; lm-eval's Janitor reads a word stream too but deletes punctuation, which glues
"end.Next" into one word.) Digits are kept: numbers tell gsm8k items apart.

An item (its prompt without the task's template, and its gold answer: `evaluation.task_items`) of at
least `ngram_size` words contributes its `ngram_size`-grams; a shorter one, of at least
`min_item_words` words, is one n-gram of all its words, so it matches only whole (as does a
question of that many words on its own, so a leak with "Answer:" between question and answer is
found); a shorter one still cannot be told from chance and is listed as too short, never as clean. A document
contaminates an item when they share at least one such n-gram (lm-eval's rule).

The step, sharded like every data step (`processing/shards.py`, a completion marker per shard, so a
rerun redoes only unfinished shards):

1. in the step's process: the items' n-gram hashes, sorted, to `.work/index.npz`;
2. per shard, in parallel: the documents' n-gram hashes looked up (a bitmap of the hashes' top
   bits first, then a binary search); writes `matches/{shard}.jsonl.zst` (one record per document
   with matches: `{"id", "shard", "matches": [{"task", "item", "ngrams"}]}`) and, with
   `filter_documents`, the filtering layout (`data/` without the contaminated documents,
   `removed/` with rule `contaminated`), then the marker. A damaged shard is not checked: it is
   named in the report with the reason, and has no marker, so a rerun tries it again;
3. the report (`store.contamination`): per task the contaminated item ids, per document its
   matches, and what could not be checked.

Hashing reuses fuzzy dedup's word hashes (`minhash`: a polynomial of each word's UTF-8 bytes, all
words at once in numpy); an n-gram's hash folds its word hashes in order, salted by its length.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from marin_lab.io import fs as mfs
from marin_lab.io.compression import DECODE_ERRORS
from marin_lab.io.documents import BadRecordError, ReadStats, read_documents, read_lines, write_documents
from marin_lab.processing import minhash
from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.filtering import (
    REMOVED_DIR,
    ShardPlan,
    check_on_bad_record,
    plan_shards,
    relative_name,
    summarize,
)
from marin_lab.processing.quarantine import Quarantine, ShardPolicy
from marin_lab.processing.shards import mark_shard_done, read_shard_done
from marin_lab.store.contamination import read_task_items, write_contamination
from marin_lab.store.errors import RecordError
from marin_lab.versioning import field_hints, versioned_field

logger = logging.getLogger(__name__)

__all__ = [
    "DecontaminateConfig",
    "NgramIndex",
    "decontaminate",
    "find_matches",
    "normalize",
    "words",
]

MATCHES_DIR = "matches"
RULE = "contaminated"
_BITMAP_BITS = 24  # 16 MiB of booleans: with a million item n-grams ~6% of lookups reach the binary search
_MIX = np.uint64(0x9E3779B97F4A7C15)
_LENGTH_SALT = np.uint64(0xC2B2AE3D27D4EB4F)
_BATCH_CHARS = 1 << 20  # characters of documents hashed per numpy pass (bounds temporaries)


def _fold_table() -> dict[int, str]:
    """str.translate table: punctuation, symbols and every kind of whitespace to " " (digits kept)."""
    table: dict[int, str] = {}
    for cp in range(0x3000):
        ch = chr(cp)
        if unicodedata.category(ch)[0] in "PS" or (ch.isspace() and ch != " "):
            table[cp] = " "
    for cp in (*range(0x3000, 0x3040), *range(0xFF00, 0xFF10)):  # CJK and full-width punctuation
        table[cp] = " "
    return table


_FOLD = _fold_table()


def normalize(text: str) -> str:
    """NFKC, lower case, punctuation, symbols and line breaks to spaces: words separated by spaces."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return text.lower().translate(_FOLD)


def words(text: str) -> list[str]:
    return normalize(text).split()


def _word_hashes(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Every word's hash and its text's number, for texts hashed together."""
    joined = "\n".join(normalize(t) for t in texts)
    data = np.frombuffer(joined.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    return minhash._word_hashes(data)


def _ngrams(word_hashes: np.ndarray, owner: np.ndarray, lengths: Sequence[int]) -> dict[int, tuple]:
    """For each length: (hashes, first word index) of every n-gram that lies inside one text."""
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    total = word_hashes.size
    acc = word_hashes.copy()
    with np.errstate(over="ignore"):
        for n in range(1, max(lengths, default=0) + 1):
            if n > 1:
                acc = acc[: total - n + 1] * _MIX + word_hashes[n - 1 :]
            if n in lengths:
                starts = np.flatnonzero(owner[: total - n + 1] == owner[n - 1 :])
                out[n] = (minhash._fmix(acc[starts] ^ (np.uint64(n) * _LENGTH_SALT)), starts)
    return out


@dataclass(frozen=True)
class NgramIndex:
    """The items' n-gram hashes, sorted, each with the item (a row of `tasks`/`ids`) it came from."""

    keys: np.ndarray
    item: np.ndarray
    task_of_item: np.ndarray
    id_of_item: np.ndarray
    task_names: tuple[str, ...]
    lengths: tuple[int, ...]

    @classmethod
    def build(
        cls, tasks: dict[str, list[dict[str, Any]]], ngram_size: int, min_item_words: int
    ) -> tuple[NgramIndex, dict[str, list[int]]]:
        """The index of every item long enough, and per task the ids of those too short to check.

        An item gives the `ngram_size`-grams of its question and answer read as one stream; a stream
        shorter than that, of at least `min_item_words`, is one n-gram of all of it. So is a question
        of `min_item_words` to `ngram_size - 1` words on its own, so that a leak that puts a word
        between question and answer ("Answer:") is still found."""
        names = tuple(tasks)
        texts: list[str] = []
        seg_item: list[int] = []
        whole_only: list[bool] = []
        task_of: list[int] = []
        id_of: list[int] = []
        for t, name in enumerate(names):
            for item in tasks[name]:
                row = len(task_of)
                task_of.append(t)
                id_of.append(int(item["id"]))
                texts += [f"{item['question']} {item['answer']}", item["question"]]
                seg_item += [row, row]
                whole_only += [False, True]
        hashes, owner = _word_hashes(texts) if texts else (np.empty(0, np.uint64), np.empty(0, np.int64))
        counts = np.bincount(owner, minlength=len(texts))
        only = np.asarray(whole_only, dtype=bool)
        target = np.where(only, np.where(counts < ngram_size, counts, 0), np.minimum(counts, ngram_size))
        target[counts < min_item_words] = 0
        checked = np.zeros(len(task_of), dtype=bool)
        checked[np.asarray(seg_item, dtype=np.int64)[target > 0]] = True
        too_short: dict[str, list[int]] = {name: [] for name in names}
        for i in np.flatnonzero(~checked):
            too_short[names[task_of[i]]].append(id_of[i])
        lengths = tuple(sorted({int(n) for n in target[target > 0]}))
        item_of_seg = np.asarray(seg_item, dtype=np.int64)
        keys, items = [], []
        for n, (h, starts) in _ngrams(hashes, owner, lengths).items():
            mine = target[owner[starts]] == n
            keys.append(h[mine])
            items.append(item_of_seg[owner[starts][mine]])
        key = np.concatenate(keys) if keys else np.empty(0, np.uint64)
        rows = np.concatenate(items) if items else np.empty(0, np.int64)
        key, rows = np.unique(np.stack([key, rows.astype(np.uint64)]), axis=1)  # sorted by key, then item
        index = cls(
            keys=np.ascontiguousarray(key),
            item=rows.astype(np.int64),
            task_of_item=np.asarray(task_of, dtype=np.int32),
            id_of_item=np.asarray(id_of, dtype=np.int64),
            task_names=names,
            lengths=lengths,
        )
        return index, too_short

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.savez(
            buf,
            keys=self.keys,
            item=self.item,
            task_of_item=self.task_of_item,
            id_of_item=self.id_of_item,
            task_names=np.asarray(self.task_names, dtype=str),
            lengths=np.asarray(self.lengths, dtype=np.int64),
        )
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> NgramIndex:
        z = np.load(io.BytesIO(data))
        return cls(
            keys=z["keys"],
            item=z["item"],
            task_of_item=z["task_of_item"],
            id_of_item=z["id_of_item"],
            task_names=tuple(str(s) for s in z["task_names"]),
            lengths=tuple(int(n) for n in z["lengths"]),
        )


_BITMAPS: list[tuple[np.ndarray, np.ndarray]] = []  # (the keys it was built from, the bitmap): the last one


def _bitmap(index: NgramIndex) -> np.ndarray:
    """Which values of a hash's top bits occur among the keys: most lookups stop here."""
    if not _BITMAPS or _BITMAPS[0][0] is not index.keys:
        bitmap = np.zeros(1 << _BITMAP_BITS, dtype=bool)
        bitmap[index.keys >> np.uint64(64 - _BITMAP_BITS)] = True
        _BITMAPS[:] = [(index.keys, bitmap)]
    return _BITMAPS[0][1]


def find_matches(index: NgramIndex, texts: Sequence[str]) -> list[dict[int, int]]:
    """Per text: {item row: distinct item n-grams it holds}; {} for a clean text."""
    found: list[dict[int, set[int]]] = [defaultdict(set) for _ in texts]
    if not index.keys.size:
        return [{} for _ in texts]
    bitmap = _bitmap(index)
    shift = np.uint64(64 - _BITMAP_BITS)
    start = 0
    for stop in _batches(texts):
        hashes, owner = _word_hashes(texts[start:stop])
        for h, starts in _ngrams(hashes, owner, index.lengths).values():
            cand = np.flatnonzero(bitmap[h >> shift])
            if not cand.size:
                continue
            hc = h[cand]
            lo = np.searchsorted(index.keys, hc, side="left")
            hi = np.searchsorted(index.keys, hc, side="right")
            for j in np.flatnonzero(hi > lo):
                doc = start + int(owner[starts[cand[j]]])
                for item in index.item[lo[j] : hi[j]]:
                    found[doc][int(item)].add(int(hc[j]))
        start = stop
    return [{item: len(grams) for item, grams in sorted(d.items())} for d in found]


def _batches(texts: Sequence[str]) -> list[int]:
    """End positions of runs of texts holding about `_BATCH_CHARS` characters each."""
    ends, size = [], 0
    for i, t in enumerate(texts):
        size += len(t) + 1
        if size >= _BATCH_CHARS:
            ends.append(i + 1)
            size = 0
    if not ends or ends[-1] != len(texts):
        ends.append(len(texts))
    return ends


@field_hints
@dataclass(frozen=True)
class DecontaminateConfig:
    """Configuration of `decontaminate`."""

    input_path: str = versioned_field()
    """Folder (or single shard) of documents to check."""
    items_path: str = versioned_field()
    """An evaluation tasks' items step's output (`evaluation.task_items.export_task_items`)."""
    output_path: str  # type: ignore[misc]  # mypy takes versioned_field() for a default; it has none
    """Where the report, `matches/` and (with `filter_documents`) `data/` and `removed/` go."""
    ngram_size: int = versioned_field(13)
    """Words per n-gram (lm-eval and Marin: 13)."""
    min_item_words: int = versioned_field(8)
    """An item with fewer words (its n-gram is all of it) is too short to check and listed as such."""
    filter_documents: bool = versioned_field(True)
    """Write `data/` without the contaminated documents (and `removed/` naming their matches)."""
    on_bad_record: str = versioned_field("raise")
    """'raise': a bad line leaves its shard unchecked (and says so); 'skip': counts and skips it."""
    num_workers: int = 1
    """Shards processed in parallel (Ray tasks under Ray, else processes)."""
    shard_policy: ShardPolicy | None = None
    """Quarantine failing shards (docs/data.md "Bad shards"); None: the first failing shard fails the step."""


@dataclass(frozen=True)
class _ShardTask:
    plan: ShardPlan
    matches_file: str
    index_url: str
    index_digest: str
    filter_documents: bool
    on_bad_record: str

    @property
    def label(self) -> str:
        return self.plan.input_file


_INDEXES: dict[str, NgramIndex] = {}


def _load_index(url: str, digest: str) -> NgramIndex:
    if digest not in _INDEXES:
        _INDEXES.clear()
        _INDEXES[digest] = NgramIndex.from_bytes(mfs.read_bytes(url))
    return _INDEXES[digest]


def _shard(task: _ShardTask) -> dict[str, Any]:
    done = read_shard_done(task.matches_file)
    if done is not None:
        return done
    plan = task.plan
    stats = ReadStats()
    try:
        docs = list(read_documents(plan.input_file, on_bad_record=task.on_bad_record, stats=stats))
    except (BadRecordError, OSError, *DECODE_ERRORS) as err:
        return {"shard": plan.name, "not_checked": str(err).split("\n")[0]}
    index = _load_index(task.index_url, task.index_digest)
    per_doc = find_matches(index, [d["text"] for d in docs])
    records = []
    for doc, found in zip(docs, per_doc, strict=True):
        if found:
            matches = [
                {
                    "task": index.task_names[int(index.task_of_item[item])],
                    "item": int(index.id_of_item[item]),
                    "ngrams": n,
                }
                for item, n in found.items()
            ]
            records.append({"id": doc["id"], "shard": plan.name, "matches": matches})
    removed = 0
    if task.filter_documents:
        write_documents(plan.removed_file, [{**r, "rule": RULE} for r in records])
        write_documents(plan.output_file, [d for d, found in zip(docs, per_doc, strict=True) if not found])
        removed = len(records)
    write_documents(task.matches_file, records)
    info = {
        "shard": plan.name,
        "read": stats.read,
        "kept": stats.read - removed,
        "removed": {RULE: removed} if removed else {},
        "contaminated_documents": len(records),
        "skipped": stats.skipped,
        "skip_reasons": dict(sorted(stats.skip_reasons.items())),
        "skip_examples": list(stats.examples),
    }
    mark_shard_done(task.matches_file, info)
    return info


def _check(config: DecontaminateConfig, step: str) -> None:
    check_on_bad_record(config.on_bad_record, step)
    for name in ("ngram_size", "min_item_words"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProcessingError(f"{step}: {name}={value!r}: expected a whole number >= 1")
    if config.min_item_words > config.ngram_size:
        raise ProcessingError(
            f"{step}: min_item_words={config.min_item_words} is more than ngram_size={config.ngram_size}; "
            "items between the two would never be checked"
        )


def decontaminate(config: DecontaminateConfig) -> dict[str, Any]:
    """Find the documents that hold evaluation items; write the report (and the filtered documents)."""
    step = "decontaminate"
    _check(config, step)
    try:
        items = read_task_items(config.items_path)
    except RecordError as err:
        raise ProcessingError(f"{step}: items_path: {err}") from None
    usable = {name: t["items"] for name, t in items["tasks"].items() if "items" in t}
    unchecked_tasks = {name: t["error"] for name, t in items["tasks"].items() if "items" not in t}
    for name, t in items["tasks"].items():
        if "items" in t and not t["items"]:
            usable.pop(name)
            unchecked_tasks[name] = f"task {name}: no items in {config.items_path}"
    index, too_short = NgramIndex.build(usable, config.ngram_size, config.min_item_words)
    blob = index.to_bytes()
    index_url = mfs.join(config.output_path, ".work", "index.npz")
    mfs.atomic_write_bytes(index_url, blob)
    digest = hashlib.sha256(blob).hexdigest()

    plans = plan_shards(config.input_path, config.output_path)
    removed = mfs.join(config.output_path, REMOVED_DIR)
    tasks = [
        _ShardTask(
            plan=p,
            matches_file=mfs.join(config.output_path, MATCHES_DIR, relative_name(removed, p.removed_file)),
            index_url=index_url,
            index_digest=digest,
            filter_documents=config.filter_documents,
            on_bad_record=config.on_bad_record,
        )
        for p in plans
    ]
    shards = Quarantine(step, config.output_path, config.shard_policy)
    infos = shards.map(_shard, tasks, num_workers=config.num_workers, desc=step, labels=[p.input_file for p in plans])
    left_out = shards.finish()
    unchecked_shards: dict[str, str] = {}
    for b in left_out:
        last = (b.get("attempts") or [{}])[-1]
        unchecked_shards[str(b.get("shard"))] = (
            f"left out after {len(b.get('attempts', []))} attempt(s): {last.get('error')}"
        )
    checked: list[dict[str, Any]] = []
    documents: list[dict[str, Any]] = []
    for task, info in zip(tasks, infos, strict=True):
        if info is None:
            continue
        if "not_checked" in info:
            unchecked_shards[info["shard"]] = info["not_checked"]
            continue
        checked.append(info)
        if info["skipped"]:
            reasons = ", ".join(f"{r} {n}" for r, n in info["skip_reasons"].items())
            unchecked_shards[f"{info['shard']} ({info['skipped']} records)"] = f"bad records skipped: {reasons}"
        if info["contaminated_documents"]:
            documents.extend(json.loads(line) for line in read_lines(task.matches_file) if line.strip())
    contaminated: dict[str, set[int]] = {name: set() for name in usable}
    for doc in documents:
        for m in doc["matches"]:
            contaminated[m["task"]].add(m["item"])
    report = {
        "complete": not unchecked_tasks and not unchecked_shards,
        "ngram_size": config.ngram_size,
        "min_item_words": config.min_item_words,
        "documents_checked": sum(i["read"] for i in checked),
        "shards_checked": len(checked),
        "tasks": {
            name: {
                "data_source": items["tasks"][name].get("data_source"),
                "split": items["tasks"][name].get("split"),
                "items": len(usable[name]),
                "items_checked": len(usable[name]) - len(too_short[name]),
                "items_too_short": sorted(too_short[name]),
                "contaminated": sorted(contaminated[name]),
            }
            for name in usable
        },
        "not_checked": {"tasks": unchecked_tasks, "shards": unchecked_shards},
        "documents": documents,
    }
    write_contamination(config.output_path, report)
    for what, reason in [*unchecked_tasks.items(), *unchecked_shards.items()]:
        logger.warning("%s: not checked: %s: %s", step, what, reason)
    counts = {name: len(ids) for name, ids in contaminated.items()}
    logger.info(
        "%s: %d documents checked, %d contaminated; contaminated items per task %s",
        step,
        report["documents_checked"],
        len(documents),
        counts,
    )
    return summarize(
        step,
        checked,
        left_out=left_out if config.shard_policy is not None else None,
        contaminated_items=counts,
        contaminated_documents=len(documents),
        not_checked={"tasks": sorted(unchecked_tasks), "shards": sorted(unchecked_shards)},
    )
