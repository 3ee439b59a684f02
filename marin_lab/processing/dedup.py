"""Deduplication steps: exact (document and paragraph hashes) and fuzzy (MinHash-LSH).

Both find duplicates across ALL shards, not within each, in phases:

1. per shard, in parallel (`map_shards`): hash every document (and paragraph), or compute its
   MinHash signature and LSH band keys; written to `{output_path}/.work/` with a marker, so a
   rerun redoes only unfinished shards;
2. decide, globally, which documents are duplicates of which (the first document in corpus
   order -- shard name, then line -- is a cluster's representative and is kept). Exact: in the
   step's own process, from the 128-bit hashes. Fuzzy: partitioned (`marin_lab.processing.lsh`):
   the band keys are split by hash into `lsh_partitions` partitions, each bucketed by its own
   task, and the step's process joins the resulting pairs into clusters, so no process ever
   holds every signature or band key;
3. per shard, in parallel: write the kept documents and one removal record per removed document
   (`{"id", "shard", "rule", "duplicate_of", "duplicate_of_shard", "similarity"}`), see
   `marin_lab.processing.filtering` for the layout. Fuzzy dedup copies the kept lines by the line
   numbers phase 1 recorded instead of parsing the shard again (a line not already in the form
   `write_documents` gives is parsed and rewritten), so the output bytes are those a parse and
   rewrite gives; a CRC of the lines checks that the shard did not change in between.

Decisions depend only on the documents and their order, never on the worker or partition count:
the same input gives the same bytes out.

Under a `shard_policy` every phase is quarantined (processing/quarantine.py): a bad shard is
retried and named while the others finish and keep their markers, but the step never succeeds
without it -- dedup is global, so a shard left out would change what the other shards keep.

Fuzzy dedup shingles like FineWeb (5-word shingles, 112 MinHash permutations) but bands them as 28
bands x 4 rows, which proposes nearly every pair above ~0.6 Jaccard similarity, and then links a
candidate pair only when its similarity estimated from all 112 slots reaches `threshold` (0.7).
Against FineWeb's 14 bands x 8 rows without a check (`num_bands=14, rows_per_band=8,
threshold=None`), recall of pairs above the threshold no longer depends on band luck, and chance
band matches of dissimilar pairs are rejected (`minhash.link_probability` gives both curves;
docs/dedup_and_quality.md compares them).

Memory of fuzzy dedup (measured in docs/dedup_and_quality.md): a phase-1 task holds one shard's
documents and signatures (448 bytes per document); a partition task 16 bytes x 28 bands per
document / `lsh_partitions`, plus sorting room; the step's process a few 8-byte integers per
document of the whole corpus (cluster labels), the candidate pairs, and one shard's signatures or
ids at a time.
"""

from __future__ import annotations

import io
import json
import logging
import re
import unicodedata
import zlib
from dataclasses import dataclass

import numpy as np
import xxhash

from marin_lab.io import fs as mfs
from marin_lab.io.compression import DECODE_ERRORS
from marin_lab.io.documents import (
    ReadStats,
    canonical_line,
    compress_for,
    read_document_lines,
    read_documents,
    read_lines,
    write_documents,
)
from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.filtering import (
    ShardPlan,
    check_on_bad_record,
    filter_shard,
    plan_shards,
    summarize,
)
from marin_lab.processing.lsh import (
    ShardBands,
    band_records,
    bucket_edges,
    components,
    read_partition,
    save_npy,
    signature_rows,
)
from marin_lab.processing.minhash import MinHasher, estimated_similarity
from marin_lab.processing.quarantine import Quarantine, ShardPolicy, check_policy
from marin_lab.processing.shards import input_sizes, mark_shard_done, read_shard_done
from marin_lab.versioning import field_hints, versioned_field

logger = logging.getLogger(__name__)

__all__ = ["DedupConfig", "DedupError", "dedup_exact", "dedup_fuzzy"]

WORK_DIR = ".work"
_SPACES = re.compile(r"\s+")


class DedupError(ProcessingError):
    """A dedup step's input or configuration is unusable, or its shards changed between phases."""


@field_hints
@dataclass(frozen=True)
class DedupConfig:
    """Configuration of `dedup_exact` and `dedup_fuzzy`."""

    input_path: str = versioned_field()
    """Folder (or single shard) of input documents (.jsonl, .jsonl.gz, .jsonl.zst)."""
    output_path: str  # type: ignore[misc]  # mypy takes versioned_field() for a default; it has none
    """Where `data/` (kept documents), `removed/` (removal records) and `.work/` go."""
    ngram_size: int = versioned_field(5)
    """Fuzzy: words per shingle (FineWeb: 5)."""
    num_bands: int = versioned_field(28)
    """Fuzzy: LSH bands. 28 bands of 4 rows propose almost every pair above ~0.6 Jaccard
    similarity as a candidate, and `threshold` decides (FineWeb: 14 bands of 8 rows, no
    threshold: whether a pair is found is then the luck of its band draws)."""
    rows_per_band: int = versioned_field(4)
    """Fuzzy: MinHash rows per band (FineWeb: 8); bands x rows permutations in all (112 either way,
    so the signatures are the same)."""
    threshold: float | None = versioned_field(0.7)
    """Fuzzy: link a candidate pair only when its estimated Jaccard similarity (the share of equal
    MinHash slots) is at least this; None links every candidate pair (FineWeb). 0.7 sits at the
    middle of FineWeb's 14 x 8 curve (which finds a pair of similarity 0.69 half of the time), so
    it keeps FineWeb's notion of a near duplicate but cuts sharply there."""
    seed: int = versioned_field(1)
    """Fuzzy: seed of the MinHash permutations."""
    paragraph_level: bool = versioned_field(False)
    """Exact: also remove every paragraph (line) already seen earlier in the corpus; a document
    left with no text is removed."""
    normalize: bool = versioned_field(True)
    """Exact: compare text after NFKC normalisation and whitespace collapsing."""
    num_workers: int = 1
    """Shards processed in parallel (Ray tasks under Ray, else processes)."""
    lsh_partitions: int = 8
    """Fuzzy: band keys are split by hash into this many partitions, each bucketed by its own
    task, so no process holds every key; never changes the result (a tuning knob for memory:
    a partition task holds about 16 bytes x bands x documents / lsh_partitions)."""
    on_bad_record: str = versioned_field("raise")
    """'raise' stops at the first bad line; 'skip' counts and skips it."""
    shard_policy: ShardPolicy | None = None
    """Quarantine failing shards (retries, time limit, memory per shard; docs/data.md "Bad shards");
    None: the first failing shard fails the step. Its `max_bad_shards` must be 0: see `_check`."""


def _check(config: DedupConfig, step: str) -> None:
    check_on_bad_record(config.on_bad_record, step)
    if config.shard_policy is not None:
        check_policy(config.shard_policy, step)
    if config.shard_policy is not None and config.shard_policy.max_bad_shards:
        # Dedup is global: a shard missing from the hashes changes what every other shard keeps (its
        # documents are the first occurrences of their duplicates elsewhere), and one missing from
        # the filter loses its own documents and, silently, their duplicates removed elsewhere.
        raise DedupError(
            f"{step}: shard_policy.max_bad_shards={config.shard_policy.max_bad_shards}: a dedup step "
            "needs every shard (a shard left out changes what the others keep); set it to 0, and "
            "leave bad shards out in the step before dedup instead"
        )
    if config.threshold is not None and not 0.0 <= config.threshold <= 1.0:
        raise DedupError(f"{step}: threshold={config.threshold} must lie in [0, 1] (or be None)")
    for name in ("ngram_size", "num_bands", "rows_per_band", "num_workers", "lsh_partitions"):
        if getattr(config, name) < 1:
            raise DedupError(f"{step}: {name}={getattr(config, name)} must be at least 1")


def _work_file(config: DedupConfig, plan: ShardPlan, kind: str) -> str:
    return mfs.join(config.output_path, WORK_DIR, kind, plan.name + ".npz")


def _save_npz(path: str, **arrays: np.ndarray) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as allow_pickle
    mfs.atomic_write_bytes(path, buf.getvalue())


def _load_npz(path: str) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(mfs.read_bytes(path)), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def _read_all(plan: ShardPlan, on_bad_record: str) -> tuple[list[dict], ReadStats]:
    stats = ReadStats()
    return list(read_documents(plan.input_file, on_bad_record=on_bad_record, stats=stats)), stats


def _ids_array(ids: list[str]) -> np.ndarray:
    return np.array(ids, dtype=str) if ids else np.empty(0, dtype="<U1")


def _all_done(plans: list[ShardPlan]) -> list[dict] | None:
    infos = [read_shard_done(p.output_file) for p in plans]
    done = [i for i in infos if i is not None]
    return done if len(done) == len(infos) else None


# ---------------------------------------------------------------- fuzzy


@dataclass(frozen=True)
class _SignatureTask:
    plan: ShardPlan
    prefix: str
    hasher: MinHasher
    partitions: int
    on_bad_record: str

    @property
    def label(self) -> str:
        return self.plan.input_file

    @property
    def params(self) -> str:
        # `lines=1`: the marker also holds what the filter phase needs to pick lines by number.
        return f"{self.hasher!r} partitions={self.partitions} lines=1"


def _signature_task(task: _SignatureTask) -> dict:
    """Phase 1 for one shard: signatures, ids and band-key records split into partitions, and
    where each document's line is (number, whether it is already written as `canonical_line`
    writes it, and a CRC of them all) so that phase 3 copies lines instead of parsing them."""
    done = read_shard_done(task.prefix)
    # Outputs left by a run with other parameters (same output path) are recomputed.
    if done is not None and done.get("params") == task.params:
        return done
    stats = ReadStats()
    texts: list[str] = []
    ids: list[str] = []
    numbers: list[int] = []
    verbatim: list[bool] = []
    crc = 0
    for line in read_document_lines(task.plan.input_file, on_bad_record=task.on_bad_record, stats=stats):
        texts.append(line.doc["text"])
        ids.append(line.doc["id"])
        numbers.append(line.number)
        verbatim.append(line.text == canonical_line(line.doc))
        crc = zlib.crc32(line.raw, crc)
    sigs, valid = task.hasher.signatures(texts)
    records, bounds = band_records(task.hasher.band_keys(sigs), valid, task.partitions)
    save_npy(task.prefix + ".sig.npy", sigs)
    save_npy(task.prefix + ".bands.npy", records)
    _save_npz(
        task.prefix + ".ids.npz",
        ids=_ids_array(ids),
        valid=valid,
        line=np.array(numbers, dtype=np.int64),
        verbatim=np.array(verbatim, dtype=bool),
    )
    info = {
        "read": stats.read,
        "params": task.params,
        "bounds": bounds.tolist(),
        "without_words": int((~valid).sum()),
        "crc": crc,
        "skipped": stats.skipped,
        "skip_reasons": dict(sorted(stats.skip_reasons.items())),
        "skip_examples": list(stats.examples),
    }
    mark_shard_done(task.prefix, info)
    return info


def _bucket_task(task: tuple[list[ShardBands], int, str]) -> int:
    """Phase 2 for one partition: star edges of every bucket whose key falls in it."""
    shards, partition, out = task
    records, first_doc = read_partition(shards, partition)
    edges = bucket_edges(records, first_doc)
    # Read back and deleted within this run (a rerun recomputes them): no fsync needed.
    save_npy(out, edges, durable=False)
    return int(len(edges))


def _removal_filter_task(task: tuple[ShardPlan, str, dict[int, dict], dict]) -> dict:
    """Phase 3 for one shard: its lines copied to the output, less the removed documents.

    The lines are picked by the numbers phase 1 recorded and copied as they are when they already
    read as `canonical_line` writes them (others are parsed and written so), which gives the bytes
    `filter_shard` would write without parsing the shard a second time. Their CRC must match phase
    1's: a shard that changed in between fails the step instead of shifting every decision."""
    plan, prefix, removals, hashed = task
    done = read_shard_done(plan.output_file)
    if done is not None:
        return done
    meta = _load_npz(prefix + ".ids.npz")
    ids, numbers, verbatim = meta["ids"].tolist(), meta["line"].tolist(), meta["verbatim"].tolist()
    kept: list[bytes] = []
    removed: list[dict] = []
    by_rule: dict[str, int] = {}
    crc, doc = 0, 0
    wanted = numbers[0] if numbers else 0
    try:
        for number, raw in enumerate(read_lines(plan.input_file), start=1):
            if number != wanted:
                continue
            crc = zlib.crc32(raw, crc)
            if doc in removals:
                removed.append({"id": ids[doc], "shard": plan.name, **removals[doc]})
                rule = removals[doc]["rule"]
                by_rule[rule] = by_rule.get(rule, 0) + 1
            elif verbatim[doc]:
                kept.append(raw)
            else:
                kept.append(canonical_line(json.loads(raw)).encode("utf-8"))
            doc += 1
            if doc == len(numbers):
                break
            wanted = numbers[doc]
    except DECODE_ERRORS:
        pass  # the lines phase 1 read end before the damage, or `doc` is short: reported below
    if doc != len(numbers) or crc != hashed["crc"]:
        raise DedupError(
            f"{plan.input_file}: its lines differ from those read when hashing; the input changed "
            f"during the step. Delete {plan.output_file}.done and the .work folder, then rerun."
        )
    # Removal records first, data second, marker last (as `filter_shard`): a marker means both are complete.
    write_documents(plan.removed_file, removed)
    data = b"\n".join(kept) + b"\n" if kept else b""
    mfs.atomic_write_bytes(plan.output_file, compress_for(plan.output_file, data))
    info = {
        "shard": plan.name,
        "read": len(numbers),
        "kept": len(kept),
        "removed": dict(sorted(by_rule.items())),
        "skipped": hashed["skipped"],
        "skip_reasons": hashed["skip_reasons"],
        "skip_examples": hashed["skip_examples"],
    }
    mark_shard_done(plan.output_file, info)
    return info


def _filter_unchanged(plan, decide, on_bad_record: str, expected: int) -> dict:
    """Filter one shard, and fail if it no longer holds the documents that were hashed."""
    info = filter_shard(plan, decide, on_bad_record=on_bad_record)
    if info["read"] != expected:
        raise DedupError(
            f"{plan.input_file}: read {info['read']} documents now but {expected} when hashing; "
            f"the input changed during the step. Delete {plan.output_file}.done and the .work "
            f"folder, then rerun."
        )
    return info


def _removal_records(plans, shards: list[ShardBands], prefixes: list[str], rep: np.ndarray) -> list[dict[int, dict]]:
    """Per shard, {document index: removal record}; ids and signatures read one shard at a time."""
    removed = np.flatnonzero(rep != np.arange(rep.size))
    firsts = np.array([s.first_doc for s in shards], dtype=np.int64)
    similarity = np.ones(removed.size)
    if removed.size:
        similarity = estimated_similarity(signature_rows(shards, removed), signature_rows(shards, rep[removed]))
    reps = rep[removed]
    rep_shard = np.searchsorted(firsts, reps, side="right") - 1
    rep_ids = np.empty(removed.size, dtype=object)
    for s in np.unique(rep_shard):
        ids = _load_npz(prefixes[int(s)] + ".ids.npz")["ids"]
        mine = rep_shard == s
        rep_ids[mine] = ids[reps[mine] - firsts[s]]
    out: list[dict[int, dict]] = [{} for _ in plans]
    removed_shard = np.searchsorted(firsts, removed, side="right") - 1
    for g, s, rs, rid, sim in zip(removed, removed_shard, rep_shard, rep_ids, similarity, strict=True):
        out[int(s)][int(g - firsts[s])] = {
            "rule": "fuzzy_duplicate",
            "duplicate_of": str(rid),
            "duplicate_of_shard": plans[int(rs)].name,
            "similarity": round(float(sim), 4),
        }
    return out


def dedup_fuzzy(config: DedupConfig) -> dict:
    """Remove near-duplicate documents across all shards with MinHash-LSH (see the module doc)."""
    step = "dedup_fuzzy"
    _check(config, step)
    plans = plan_shards(config.input_path, config.output_path)
    hasher = MinHasher(config.ngram_size, config.num_bands, config.rows_per_band, config.seed)
    params = {
        "ngram_size": config.ngram_size,
        "num_bands": config.num_bands,
        "rows_per_band": config.rows_per_band,
        "threshold": config.threshold,
        "seed": config.seed,
    }
    quarantine = Quarantine(step, config.output_path, config.shard_policy)
    infos = _all_done(plans)
    if infos is not None:
        quarantine.finish()
        return summarize(step, infos, parameters=params, resumed=True)

    work = mfs.join(config.output_path, WORK_DIR)
    prefixes = [mfs.join(work, "minhash", p.name) for p in plans]
    sizes = input_sizes([p.input_file for p in plans])
    phase1 = quarantine.map(
        _signature_task,
        [
            _SignatureTask(p, w, hasher, config.lsh_partitions, config.on_bad_record)
            for p, w in zip(plans, prefixes, strict=True)
        ],
        num_workers=config.num_workers,
        desc=f"{step}: signatures",
        costs=sizes,
        allowance=False,
    )
    counts = [info["read"] for info in phase1]
    firsts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    shards = [
        ShardBands(w + ".sig.npy", w + ".bands.npy", tuple(info["bounds"]), int(firsts[i]), counts[i])
        for i, (w, info) in enumerate(zip(prefixes, phase1, strict=True))
    ]
    # Edges depend on every shard, so they are always recomputed (cheap next to phase 1) and
    # never mixed with those of an earlier, interrupted run.
    run_dir = mfs.join(work, "lsh")
    mfs.remove(run_dir, recursive=True)
    parts = [mfs.join(run_dir, f"part-{p:05d}.npy") for p in range(config.lsh_partitions)]
    quarantine.map(
        _bucket_task,
        [(shards, p, out) for p, out in enumerate(parts)],
        num_workers=config.num_workers,
        desc=f"{step}: buckets",
        labels=[f"LSH partition {p} of {len(parts)}" for p in range(len(parts))],
        allowance=False,
    )
    edge_parts = [np.load(io.BytesIO(mfs.read_bytes(p)), allow_pickle=False) for p in parts]
    edges = np.concatenate(edge_parts) if edge_parts else np.empty((0, 2), dtype=np.int64)
    del edge_parts
    # Different bands (in different partitions) can propose the same pair: count it once.
    edges = np.unique(edges, axis=0) if edges.size else edges.reshape(0, 2)
    found = components(int(firsts[-1]), edges, shards, config.threshold)
    del edges
    mfs.remove(run_dir, recursive=True)
    removals = _removal_records(plans, shards, prefixes, found.representative)
    rep = found.representative
    removed = rep != np.arange(rep.size)
    infos = quarantine.map(
        _removal_filter_task,
        [(p, w, r, info) for p, w, r, info in zip(plans, prefixes, removals, phase1, strict=True)],
        num_workers=config.num_workers,
        desc=f"{step}: filter",
        costs=sizes,
        labels=[p.input_file for p in plans],
        allowance=False,
    )
    quarantine.finish()
    return summarize(
        step,
        infos,
        parameters=params,
        candidate_pairs=found.candidate_pairs,
        linked_pairs=found.linked_pairs,
        clusters_with_duplicates=int(np.unique(rep[removed]).size),
        documents_without_words=sum(info["without_words"] for info in phase1),
    )


# ---------------------------------------------------------------- exact


def _normalize_exact(text: str, normalize: bool) -> str:
    if not normalize:
        return text
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def _hash128(texts: list[str]) -> np.ndarray:
    out = np.empty((len(texts), 2), dtype=np.uint64)
    for i, t in enumerate(texts):
        h = xxhash.xxh3_128_intdigest(t)
        out[i, 0] = h >> 64
        out[i, 1] = h & 0xFFFFFFFFFFFFFFFF
    return out


def _paragraphs(text: str) -> list[str]:
    return text.split("\n")


def _exact_hash_task(task: tuple[ShardPlan, str, bool, bool, str]) -> int:
    plan, work, normalize, paragraph_level, on_bad_record = task
    params = f"normalize={normalize} paragraph_level={paragraph_level}"
    done = read_shard_done(work)
    if done is not None and done.get("params") == params:
        return done["read"]
    docs, stats = _read_all(plan, on_bad_record)
    arrays = {
        "doc_hash": _hash128([_normalize_exact(d["text"], normalize) for d in docs]),
        "ids": _ids_array([d["id"] for d in docs]),
    }
    if paragraph_level:
        para_texts, para_doc, para_idx = [], [], []
        for i, d in enumerate(docs):
            for j, para in enumerate(_paragraphs(d["text"])):
                norm = _normalize_exact(para, True)
                if norm:  # blank lines are layout, never duplicates
                    para_texts.append(norm)
                    para_doc.append(i)
                    para_idx.append(j)
        arrays["para_hash"] = _hash128(para_texts)
        arrays["para_doc"] = np.array(para_doc, dtype=np.int64)
        arrays["para_idx"] = np.array(para_idx, dtype=np.int64)
    _save_npz(work, **arrays)
    mark_shard_done(work, {"read": stats.read, "params": params})
    return stats.read


def _first_occurrence(hashes: np.ndarray) -> np.ndarray:
    """For each row, the index of the first row with the same (128-bit) hash."""
    if hashes.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    _, first, inverse = np.unique(hashes, axis=0, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)].astype(np.int64)


def _exact_filter_task(task: tuple[ShardPlan, dict[int, dict], dict[int, set[int]], int, str]) -> dict:
    plan, removals, drop_paragraphs, expected, on_bad_record = task

    def decide_one(index: int, doc: dict):
        record = removals.get(index)
        if record is not None:
            return None, record
        drop = drop_paragraphs.get(index)
        if drop:
            paras = _paragraphs(doc["text"])
            doc = {**doc, "text": "\n".join(p for j, p in enumerate(paras) if j not in drop)}
        return doc, None

    def decide(docs: list[dict]):
        return [decide_one(i, d) for i, d in enumerate(docs)]

    return _filter_unchanged(plan, decide, on_bad_record, expected)


def dedup_exact(config: DedupConfig) -> dict:
    """Remove documents (and optionally paragraphs) whose normalised text appeared earlier."""
    step = "dedup_exact"
    _check(config, step)
    plans = plan_shards(config.input_path, config.output_path)
    params = {"paragraph_level": config.paragraph_level, "normalize": config.normalize}
    quarantine = Quarantine(step, config.output_path, config.shard_policy)
    infos = _all_done(plans)
    if infos is not None:
        quarantine.finish()
        return summarize(step, infos, parameters=params, resumed=True)

    works = [_work_file(config, p, "exact") for p in plans]
    counts = quarantine.map(
        _exact_hash_task,
        [
            (p, w, config.normalize, config.paragraph_level, config.on_bad_record)
            for p, w in zip(plans, works, strict=True)
        ],
        num_workers=config.num_workers,
        desc=f"{step}: hashes",
        labels=[p.input_file for p in plans],
        allowance=False,
    )
    parts = [_load_npz(w) for w in works]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    shard_of = np.repeat(np.arange(len(plans)), counts)
    ids = np.concatenate([p["ids"] for p in parts])
    first = _first_occurrence(np.concatenate([p["doc_hash"] for p in parts]))

    removals: list[dict[int, dict]] = [{} for _ in plans]
    drops: list[dict[int, set[int]]] = [{} for _ in plans]

    def remove(g: int, rule: str, of: int) -> None:
        s = int(shard_of[g])
        removals[s][int(g - offsets[s])] = {
            "rule": rule,
            "duplicate_of": str(ids[of]),
            "duplicate_of_shard": plans[int(shard_of[of])].name,
            "similarity": 1.0,
        }

    doc_dup = first != np.arange(first.size)
    for dup_doc in np.flatnonzero(doc_dup):
        remove(int(dup_doc), "exact_duplicate", int(first[dup_doc]))

    paragraphs_removed = 0
    if config.paragraph_level:
        p_hash = np.concatenate([p["para_hash"] for p in parts])
        p_doc = np.concatenate([p["para_doc"] + offsets[i] for i, p in enumerate(parts)])
        p_idx = np.concatenate([p["para_idx"] for p in parts])
        # Paragraphs of removed documents neither count as first occurrences nor get removed.
        live = ~doc_dup[p_doc]
        p_hash, p_doc, p_idx = p_hash[live], p_doc[live], p_idx[live]
        p_first = _first_occurrence(p_hash)
        dup = np.flatnonzero(p_first != np.arange(p_first.size))
        paragraphs_removed = int(dup.size)
        nonblank = np.bincount(p_doc, minlength=first.size)
        dropped = np.bincount(p_doc[dup], minlength=first.size)
        emptied = set(np.flatnonzero((nonblank > 0) & (dropped == nonblank)).tolist())
        first_dup_of_doc: dict[int, int] = {}
        for k in dup:
            g = int(p_doc[k])
            first_dup_of_doc.setdefault(g, int(p_doc[p_first[k]]))
            if g not in emptied:
                s = int(shard_of[g])
                drops[s].setdefault(int(g - offsets[s]), set()).add(int(p_idx[k]))
        for g in sorted(emptied):
            remove(g, "exact_paragraph_duplicate", first_dup_of_doc[g])

    infos = quarantine.map(
        _exact_filter_task,
        [(p, r, d, c, config.on_bad_record) for p, r, d, c in zip(plans, removals, drops, counts, strict=True)],
        num_workers=config.num_workers,
        desc=f"{step}: filter",
        labels=[p.input_file for p in plans],
        allowance=False,
    )
    quarantine.finish()
    return summarize(step, infos, parameters=params, paragraphs_removed=paragraphs_removed)
