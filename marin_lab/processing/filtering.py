"""Shared plumbing of the document-filtering steps: dedup, heuristic and classifier filters.

Every filtering step has the same output layout, so the next step and the data browser read them
alike:

    {output_path}/data/{shard}              the kept documents, one shard per input shard
    {output_path}/data/{shard}.done         its completion marker, holding the shard's counts
    {output_path}/removed/{shard}.jsonl.zst one record per removed document:
                                            {"id", "shard", "rule", ...rule-specific fields}

and every step returns the same accounting: each document read is kept or removed by a named
rule, and each bad record skipped (`on_bad_record="skip"`) is counted by reason. `summarize`
checks that these add up, so a step never succeeds with documents silently lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from marin_lab.io import fs as mfs
from marin_lab.io.documents import ReadStats, list_shards, read_documents, write_documents
from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.shards import mark_shard_done, read_shard_done

logger = logging.getLogger(__name__)

__all__ = [
    "ShardPlan",
    "plan_shards",
    "relative_name",
    "filter_shard",
    "summarize",
    "Decision",
    "check_on_bad_record",
]

DATA_DIR = "data"
REMOVED_DIR = "removed"
ON_BAD_RECORD = ("raise", "skip")

# (kept document or None, removal record or None); exactly one of the two is set.
Decision = tuple[dict | None, dict | None]


@dataclass(frozen=True)
class ShardPlan:
    """Where one input shard's outputs go."""

    input_file: str
    """The input shard (URL)."""
    name: str
    """Its path relative to the input folder (kept for the output)."""
    output_file: str
    """The kept documents: `{output_path}/data/{name}`."""
    removed_file: str
    """The removal records: `{output_path}/removed/{name without extension}.jsonl.zst`."""


def relative_name(input_path: str, shard: str) -> str:
    """`shard`'s path below `input_path` (its file name when `input_path` is the shard itself)."""
    _, root = mfs.fs_and_path(input_path)
    _, path = mfs.fs_and_path(shard)
    root = root.rstrip("/")
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    return path.rsplit("/", 1)[-1]


def _stem(name: str) -> str:
    for ext in (".jsonl.gz", ".jsonl.zst", ".jsonl"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def plan_shards(input_path: str, output_path: str) -> list[ShardPlan]:
    """One plan per input shard, in sorted order (raises NoShardsError when there are none)."""
    plans = []
    for shard in list_shards(input_path):
        name = relative_name(input_path, shard)
        plans.append(
            ShardPlan(
                input_file=shard,
                name=name,
                output_file=mfs.join(output_path, DATA_DIR, name),
                removed_file=mfs.join(output_path, REMOVED_DIR, _stem(name) + ".jsonl.zst"),
            )
        )
    return plans


def check_on_bad_record(value: str, step: str) -> None:
    if value not in ON_BAD_RECORD:
        raise ProcessingError(
            f"{step}: on_bad_record={value!r} is not one of {ON_BAD_RECORD}; use 'raise' to stop "
            f"at the first bad line or 'skip' to count and skip bad lines."
        )


def filter_shard(plan: ShardPlan, decide: Callable[[list[dict]], list[Decision]], *, on_bad_record: str) -> dict:
    """Run `decide(documents)` over one shard and write kept documents and removal records.

    `decide` sees the whole shard at once (so a classifier can score in batches) and returns one
    decision per document. A shard that is already done is not read again: its counts come back
    from the marker.
    """
    done = read_shard_done(plan.output_file)
    if done is not None:
        return done
    stats = ReadStats()
    docs = list(read_documents(plan.input_file, on_bad_record=on_bad_record, stats=stats))
    decisions = decide(docs)
    if len(decisions) != len(docs):
        raise ProcessingError(
            f"{plan.input_file}: {len(docs)} documents but {len(decisions)} decisions (a bug in the filter)"
        )
    kept: list[dict] = []
    removed: list[dict] = []
    by_rule: dict[str, int] = {}
    for doc, (keep, record) in zip(docs, decisions, strict=True):
        if keep is not None:
            kept.append(keep)
            continue
        if record is None or "rule" not in record:
            raise ProcessingError(
                f"{plan.input_file}: document {doc.get('id')!r} was dropped without a removal "
                f"record naming its rule (a bug in the filter)"
            )
        record = {"id": doc["id"], "shard": plan.name, **record}
        removed.append(record)
        by_rule[record["rule"]] = by_rule.get(record["rule"], 0) + 1
    # Removal records first, data second, marker last: a marker means both are complete.
    write_documents(plan.removed_file, removed)
    write_documents(plan.output_file, kept)
    info = {
        "shard": plan.name,
        "read": stats.read,
        "kept": len(kept),
        "removed": dict(sorted(by_rule.items())),
        "skipped": stats.skipped,
        "skip_reasons": dict(sorted(stats.skip_reasons.items())),
        "skip_examples": list(stats.examples),
    }
    mark_shard_done(plan.output_file, info)
    return info


def summarize(step: str, shard_infos: Sequence[dict | None], *, left_out: list[dict] | None = None, **extra) -> dict:
    """The step's return value: totals over shards, checked to account for every document.

    `left_out`: the bad shards a step with a shard policy left out within its allowance (their
    infos are None); listed as `bad_shards` so the record says what the output lacks."""
    infos: list[dict] = [info for info in shard_infos if info is not None]
    totals = {"read": 0, "kept": 0, "skipped": 0}
    removed: dict[str, int] = {}
    skip_reasons: dict[str, int] = {}
    examples: list[str] = []
    for info in infos:
        accounted = info["kept"] + sum(info["removed"].values())
        if accounted != info["read"]:
            raise ProcessingError(
                f"{step}: shard {info['shard']!r} read {info['read']} documents but accounts for "
                f"{accounted} (kept {info['kept']}, removed {info['removed']}); delete its "
                f"output and marker and rerun"
            )
        for key in totals:
            totals[key] += info[key]
        for rule, n in info["removed"].items():
            removed[rule] = removed.get(rule, 0) + n
        for reason, n in info["skip_reasons"].items():
            skip_reasons[reason] = skip_reasons.get(reason, 0) + n
        examples.extend(info.get("skip_examples", [])[: max(0, 5 - len(examples))])
    result = {
        "step": step,
        "shards": len(infos),
        "input_records": totals["read"] + totals["skipped"],
        "documents_read": totals["read"],
        "kept": totals["kept"],
        "removed": dict(sorted(removed.items())),
        "removed_total": sum(removed.values()),
        "skipped_bad": totals["skipped"],
        "skip_reasons": dict(sorted(skip_reasons.items())),
        "skip_examples": examples,
        **({"bad_shards": left_out} if left_out is not None else {}),
        **extra,
    }
    logger.info(
        "%s: %d shards, %d documents read: kept %d, removed %d %s, skipped %d bad records",
        step,
        result["shards"],
        result["documents_read"],
        result["kept"],
        result["removed_total"],
        result["removed"],
        result["skipped_bad"],
    )
    return result
