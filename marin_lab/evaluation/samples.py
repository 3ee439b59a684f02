"""An evaluation's samples files (`samples_{task}.jsonl`, lm-eval's `--log_samples` records), streamed.

- `item_values`: {doc_id: per-item value} of one metric, what a paired comparison joins on;
- `read_samples` / `sample_view`: a page of items as the sample viewer shows them (prompt, choices
  or generation, loglikelihoods, picked, gold), from a byte offset, filtered by right / wrong /
  disagreeing with another run.

A file is read line by line through the run's confinement with every count capped (`MAX_LINE_BYTES`,
`MAX_ITEMS`, `MAX_SCAN_BYTES`): a 1 GB file is never loaded whole, an over-long or broken line is
counted and skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from marin_lab.evaluation.results import EvalResultsError, EvalRun, samples_url
from marin_lab.evaluation.stats import binary_metric, chance_level
from marin_lab.io import confined
from marin_lab.store.eval_results import number

MAX_LINE_BYTES = 4 * 1024 * 1024
"""A samples line longer than this is skipped (counted): one item's prompt and choices fit easily."""
MAX_ITEMS = 200_000
"""At most this many items per task are read for a comparison (said when a task has more)."""
MAX_SCAN_BYTES = 512 * 1024 * 1024
"""At most this many bytes of one samples file are read for a comparison."""
MAX_PAGE_SCAN_BYTES = 32 * 1024 * 1024
"""At most this many bytes are read for one page of the sample viewer (the next page goes on)."""
MAX_CURSOR = 2**53
"""The largest cursor (a byte offset into a samples file) a page is read from."""


def _lines(
    run: EvalRun, url: str, offset: int = 0, max_bytes: int | None = None, state: dict[str, Any] | None = None
) -> Iterator[tuple[int, bytes | None]]:
    """(byte offset, line) of each line from `offset`; None for a line over MAX_LINE_BYTES (skipped
    without being held). Stops after `max_bytes` (default MAX_SCAN_BYTES) and then sets
    state["stopped_at"] to the offset where reading stopped."""
    limit = MAX_SCAN_BYTES if max_bytes is None else max_bytes
    with confined.open_file(url, run.confinement) as f:
        if offset:
            try:
                f.seek(offset)
            except (OSError, ValueError, OverflowError):
                raise EvalResultsError(
                    f"cursor={offset} lies beyond the end of {url.rsplit('/', 1)[-1]}: give 0, or a page's next_cursor"
                ) from None
        pos, read = offset, 0
        while True:
            if read >= limit:
                if state is not None:
                    state["stopped_at"] = pos
                return
            line = f.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            start = pos
            pos += len(line)
            read += len(line)
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while read < limit:  # skip the rest of an over-long line, a chunk at a time
                    rest = f.readline(MAX_LINE_BYTES)
                    pos += len(rest)
                    read += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
                yield start, None
                continue
            yield start, line


def _item_value(rec: dict[str, Any], metric: str) -> float | None:
    base, flt = (metric.split(",", 1) + ["none"])[:2]
    if str(rec.get("filter", "none")) != flt:
        return None
    return number(rec.get(base)) if not isinstance(rec.get(base), bool) else float(rec[base])


def item_values(
    run: EvalRun, task: str, metric: str, hashes: dict[Any, str] | None = None
) -> tuple[dict[Any, float], list[str]]:
    """{doc_id: per-item value} of `metric` in the task's samples file, and notes (missing file,
    skipped lines, the cap reached); `hashes`, when given, receives each item's `doc_hash`
    (lm-eval's hash of the document) where the line has one."""
    url = samples_url(run, task)
    out: dict[Any, float] = {}
    notes: list[str] = []
    bad = 0
    state: dict[str, Any] = {}
    try:
        for _, line in _lines(run, url, state=state):
            if len(out) >= MAX_ITEMS:
                notes.append(f"{task}: only the first {MAX_ITEMS} items of {url} compared")
                break
            rec = _parse(line)
            if rec is None:
                bad += 1
                continue
            doc_id, value = rec.get("doc_id"), _item_value(rec, metric)
            if value is None or isinstance(doc_id, (dict, list)):
                continue
            key = (rec.get("task"), doc_id) if "task" in rec else doc_id
            out[key] = value
            if hashes is not None and isinstance(rec.get("doc_hash"), str):
                hashes[key] = rec["doc_hash"]
    except FileNotFoundError:
        return {}, [f"{task}: no samples file {url.rsplit('/', 1)[-1]} in {run.key}"]
    except confined.RefusedPathError as err:
        return {}, [f"{task}: {url}: skipped, not read ({err})"]
    except OSError as err:
        return {}, [f"{task}: {url}: unreadable ({type(err).__name__})"]
    if "stopped_at" in state:
        notes.append(f"{task}: only the first {MAX_SCAN_BYTES // (1024 * 1024)} MB of {url} compared")
    if bad:
        notes.append(f"{task}: {bad} line(s) of {url.rsplit('/', 1)[-1]} in {run.key} unreadable or too long, skipped")
    return out, notes


def chance_from_samples(run: EvalRun, task: str) -> float | None:
    """The task's chance level from its samples file, for results written before results.json
    recorded it (`stats.chance_level`); None when the file is missing, damaged or not multiple choice."""
    url = samples_url(run, task)
    records: list[dict[str, Any]] = []
    try:
        for _, line in _lines(run, url):
            rec = _parse(line)
            if rec is None or len(records) >= MAX_ITEMS:
                return None
            records.append({"arguments": rec.get("arguments")})
    except (OSError, EvalResultsError, confined.RefusedPathError):
        return None
    return chance_level(records)


def _parse(line: bytes | None) -> dict[str, Any] | None:
    if line is None:
        return None
    try:
        rec = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return rec if isinstance(rec, dict) else None


def read_samples(
    run: EvalRun,
    task: str,
    *,
    cursor: int = 0,
    limit: int = 25,
    show: str = "all",
    other: EvalRun | None = None,
    metric: str | None = None,
) -> dict[str, Any]:
    """A page of the task's samples as the sample viewer shows them, from byte offset `cursor`.

    show: all | right | wrong | disagree (with `other`: the items where the two runs' values of the
    metric differ). Returns {items, next_cursor, scanned, notes}; a page stops after `limit` items
    or MAX_SCAN_BYTES read, so a filter that matches nothing in a 1 GB file still answers.
    """
    if show not in ("all", "right", "wrong", "disagree"):
        raise EvalResultsError(f"show={show!r}: one of all, right, wrong, disagree")
    if isinstance(cursor, bool) or not isinstance(cursor, int) or not 0 <= cursor <= MAX_CURSOR:
        raise EvalResultsError(
            f"cursor={cursor!r} is not a byte offset of the samples file: give 0, or a page's next_cursor"
        )
    tr = run.tasks.get(task)
    if tr is None:
        raise EvalResultsError(f"{run.key} has no task {task!r}")
    name = tr.primary(metric)
    others: dict[Any, float] = {}
    notes: list[str] = []
    if show == "disagree":
        if other is None:
            raise EvalResultsError("show=disagree needs a second run to compare with")
        if name is None:
            raise EvalResultsError(f"{task}: no metric to compare on")
        others, notes = item_values(other, task, name)
    items: list[dict[str, Any]] = []
    next_cursor: int | None = None
    scanned = 0
    url = samples_url(run, task)
    state: dict[str, Any] = {}
    try:
        for pos, line in _lines(run, url, cursor, MAX_PAGE_SCAN_BYTES, state):
            if len(items) >= limit:
                next_cursor = pos
                break
            scanned += 1
            rec = _parse(line)
            if rec is None:
                items.append({"bad": True, "offset": pos})
                continue
            view = sample_view(rec, name)
            if show == "right" and view["correct"] is not True:
                continue
            if show == "wrong" and view["correct"] is not False:
                continue
            if show == "disagree":
                key = (rec.get("task"), rec.get("doc_id")) if "task" in rec else rec.get("doc_id")
                if (
                    isinstance(key, (dict, list))
                    or key not in others
                    or view["value"] is None
                    or others[key] == view["value"]
                ):
                    continue
                view["other_value"] = others[key]
            items.append(view)
        else:
            next_cursor = state.get("stopped_at")
            if next_cursor is not None:
                notes.append(
                    f"stopped after reading {MAX_PAGE_SCAN_BYTES // (1024 * 1024)} MB of "
                    f"{url.rsplit('/', 1)[-1]}; the next page reads on"
                )
    except FileNotFoundError:
        notes.append(f"{task}: no samples file {url.rsplit('/', 1)[-1]} in {run.key}")
    if other is not None:
        views, more = _views(other, task, name, {_key(v): v for v in items if not v.get("bad")})
        notes.extend(more)
        for v in items:
            if not v.get("bad"):
                v["other"] = views.get(_key(v))
    return {
        "task": task,
        "metric": name,
        "items": items,
        "next_cursor": next_cursor,
        "scanned": scanned,
        "notes": notes,
    }


def _key(view: dict[str, Any]) -> Any:
    return (view["task"], view["doc_id"]) if view.get("task") else view.get("doc_id")


def _views(run: EvalRun, task: str, metric: str | None, keys: dict[Any, Any]) -> tuple[dict[Any, Any], list[str]]:
    """The other run's view of the items `keys` names (its picks beside this run's), read as a
    comparison reads a file (at most MAX_SCAN_BYTES)."""
    out: dict[Any, Any] = {}
    url = samples_url(run, task)
    try:
        for _, line in _lines(run, url):
            if len(out) >= len(keys):
                break
            rec = _parse(line)
            if rec is None:
                continue
            view = sample_view(rec, metric)
            key = _key(view)
            if not isinstance(key, (dict, list)) and key in keys:
                out[key] = {
                    k: view[k]
                    for k in ("picked", "picked_by", "picked_raw", "picked_norm", "value", "correct", "generation")
                } | {"loglikelihoods": view["loglikelihoods"], "normalised": view["normalised"]}
    except FileNotFoundError:
        return out, [f"{task}: no samples file {url.rsplit('/', 1)[-1]} in {run.key}"]
    except (OSError, confined.RefusedPathError) as err:
        return out, [f"{task}: {url}: not read ({type(err).__name__})"]
    return out, []


MAX_TEXT = 20_000
"""Characters of a prompt or choice a sample view carries (the rest is cut, said by `cut`)."""


def _text(value: Any) -> str:
    s = value if isinstance(value, str) else json.dumps(value, default=str)
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT] + f"… [{len(s) - MAX_TEXT} more characters]"


def _requests(rec: dict[str, Any]) -> list[list[Any]]:
    """lm-eval's `arguments` as a list of argument lists (it writes a list, or a dict
    {"gen_args_0": {"arg_0": ..., "arg_1": ...}} in newer versions)."""
    args = rec.get("arguments")
    if isinstance(args, dict):
        return [
            list(v.values()) if isinstance(v, dict) else [v]
            for _, v in sorted(args.items(), key=lambda kv: _idx(kv[0]))
        ]
    if isinstance(args, list):
        return [a if isinstance(a, list) else [a] for a in args]
    return []


def _idx(key: str) -> int:
    m = re.search(r"(\d+)$", key)
    return int(m.group(1)) if m else 0


def _loglikelihood(resp: Any) -> float | None:
    while isinstance(resp, list) and resp:
        resp = resp[0]
    if isinstance(resp, str):
        try:
            resp = float(resp)
        except ValueError:
            return None
    return number(resp)


def sample_view(rec: dict[str, Any], metric: str | None) -> dict[str, Any]:
    """One item for the viewer: prompt, choices (or the generation), loglikelihoods, picked, gold."""
    reqs = _requests(rec)
    prompt = reqs[0][0] if reqs and reqs[0] else rec.get("doc")
    choices: list[str] = []
    lls: list[float | None] = []
    generation = None
    resps = rec.get("filtered_resps") if isinstance(rec.get("filtered_resps"), list) else rec.get("resps")
    if reqs and all(len(r) >= 2 and isinstance(r[1], str) for r in reqs):
        choices = [_text(r[1]) for r in reqs]
        lls = [_loglikelihood(x) for x in (resps or [])][: len(choices)]
    elif isinstance(resps, list) and resps:
        first = resps[0]
        while isinstance(first, list) and first:
            first = first[0]
        generation = _text(first)
    value = _item_value(rec, metric) if metric else None
    gold = _gold(rec.get("target"))
    conts = [str(r[1]) for r in reqs] if choices else []
    norm, picked_raw, picked_norm = _normalised(lls, conts, gold, value if metric == "acc_norm" else None)
    by = "norm" if metric and metric.split(",", 1)[0] == "acc_norm" else "raw"
    return {
        "doc_id": rec.get("doc_id") if not isinstance(rec.get("doc_id"), (dict, list)) else _text(rec.get("doc_id")),
        "task": rec.get("task") if isinstance(rec.get("task"), str) else None,
        "prompt": _text(prompt),
        "choices": choices,
        "loglikelihoods": lls,
        "normalised": norm,
        "generation": generation,
        "picked": picked_norm if by == "norm" else picked_raw,
        "picked_by": by if lls else None,
        "picked_raw": picked_raw,
        "picked_norm": picked_norm,
        "gold": gold,
        "value": value,
        "correct": None if value is None else value >= 1.0 if metric and binary_metric(metric) else None,
        "metric": metric,
    }


def _argmax(xs: list[float | None]) -> int | None:
    if not xs or any(x is None for x in xs):
        return None
    return max(range(len(xs)), key=lambda i: xs[i])  # type: ignore[arg-type, return-value]


def _normalised(
    lls: list[float | None], conts: list[str], gold: Any, norm_value: float | None
) -> tuple[list[float | None], int | None, int | None]:
    """(log-likelihood per character of each choice, the raw argmax, the per-character argmax): what
    lm-eval's acc and acc_norm pick. lm-eval divides by the length of the choice without the
    target delimiter (" " before every continuation, by default); where the item's recorded
    acc_norm says otherwise (a task whose choices carry their own space), by the whole continuation."""
    raw = _argmax(lls)
    if not conts or len(conts) != len(lls) or any(x is None for x in lls):
        return [], raw, None

    def per_char(strip: bool) -> list[float | None]:
        texts = [c[1:] if strip else c for c in conts]
        return [None if not t else float(ll) / len(t) for ll, t in zip(lls, texts, strict=True)]  # type: ignore[arg-type]

    strip = all(c.startswith(" ") for c in conts)
    norm = per_char(strip)
    picked = _argmax(norm)
    if strip and norm_value is not None and isinstance(gold, int) and (picked == gold) != (norm_value >= 1.0):
        norm = per_char(False)
        picked = _argmax(norm)
    return norm, raw, picked


def _gold(target: Any) -> Any:
    if isinstance(target, (int, float)) and not isinstance(target, bool):
        return target
    return _text(target) if target is not None else None
