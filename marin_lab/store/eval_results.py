"""An evaluation's `results.json`: its format number, the document `evaluate_lm` writes, and one parser.

The document is lm-eval's own shape (`results`, `groups`, `configs`, `versions`, `n-shot`,
`higher_is_better`, `n-samples`) plus perplexity and bits per byte on token caches and our section
(docs/evaluation.md):

    {"results": {...}, ..., "perplexity": {"web": 12.3}, "bits_per_byte": {"web": 1.07}, "details": {...},
     "checkpoint": ".../checkpoints/step-000300", "step": 300,
     "marin_lab": {"format": 2, "model": {"checkpoint": ..., "step": 300, "train_path": ...},
                   "tasks": {"hellaswag": {"status": "ok", "split": "validation", "attempted": 400, "scored": 400,
                                           "metrics": {"acc": {"value": .., "low": .., "high": .., "method": "wilson",
                                                               "n": 400}}, "samples_file": "samples_hellaswag.jsonl",
                                           "contamination": {"checked": true, "fraction": 0.01, ...},
                                           ...}},
                   "reused_tasks": ["piqa"]}}

`parse_results` reads that (format 2) and lm-eval's own results.json without our section (format 0:
values and stderr only). Its bytes are a function of the values alone (`json_safe`): lm-eval's task
configs hold functions, written by qualified name, never as a repr with an address. A file that is
not JSON or not an object is one `RecordError`; within one, a NaN or a field of the wrong type is
read as missing, said in `notes`, and the rest is kept.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from marin_lab.io import fs as mfs
from marin_lab.store.errors import RecordError
from marin_lab.store.layout import RESULTS_FILE

RESULTS_FORMAT = 2
LM_EVAL_SECTIONS = ("results", "groups", "configs", "versions", "n-shot", "higher_is_better", "n-samples")
"""lm-eval's sections of results.json, in the order they are written."""


def json_safe(value: Any) -> Any:
    """`value` as plain JSON that is the same in every process (functions by qualified name)."""
    return json.loads(json.dumps(value, default=mfs.json_default))


def results_document(
    sections: dict[str, Any],
    *,
    perplexity: dict[str, Any],
    bits_per_byte: dict[str, Any],
    details: dict[str, Any],
    checkpoint: str,
    step: int,
    tasks: dict[str, Any],
    reused_tasks: list[str] | None = None,
) -> dict[str, Any]:
    """results.json's document: lm-eval's `sections` (absent ones empty), ours, and the `marin_lab` section
    (`reused_tasks`: those kept from an earlier attempt, when any)."""
    doc = {
        **{name: sections.get(name, {}) for name in LM_EVAL_SECTIONS},
        "perplexity": perplexity,
        "bits_per_byte": bits_per_byte,
        "details": details,
        "checkpoint": checkpoint,
        "step": step,
        "marin_lab": {
            "format": RESULTS_FORMAT,
            "model": {"checkpoint": checkpoint, "step": step, "train_path": train_path_of(checkpoint)},
            "tasks": tasks,
        },
    }
    if reused_tasks:
        doc["marin_lab"]["reused_tasks"] = list(reused_tasks)
    return doc


def write_results(output_path: str, results: dict[str, Any]) -> None:
    """results.json under `output_path`, its bytes a function of the values alone (`json_safe`)."""
    mfs.write_json(mfs.join(output_path, RESULTS_FILE), json_safe(results))


def train_path_of(checkpoint: str | None) -> str | None:
    """The training step's output path of a `{train}/checkpoints/step-N` checkpoint."""
    parts = (checkpoint or "").rstrip("/").split("/")
    return "/".join(parts[:-2]) if len(parts) >= 3 and parts[-2] == "checkpoints" else None


@dataclasses.dataclass
class TaskEntry:
    """One task of a results.json, as recorded (`metrics`: name -> value, low, high, method, n, stderr)."""

    task: str
    status: str = "ok"
    error: str | None = None
    metrics: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    attempted: int | None = None
    scored: int | None = None
    coverage: float | None = None
    limit: int | None = None
    capped: bool = False
    low_coverage: bool = False
    split: str | None = None
    default_split: str | None = None
    data_source: str | None = None
    num_fewshot: int | None = None
    samples_file: str | None = None
    limit_mode: str | None = None
    """How a capped task's items were picked: "sample" (seeded, random) or "first" (the first N; what
    a capped task recorded without this field did)."""
    sample_seed: int | None = None
    total_items: int | None = None
    """Items in the split scored (over a group's tasks), where recorded."""
    chance: float | None = None
    """What guessing scores (1 / number of choices, averaged over the items); None: not multiple choice."""
    chance_recorded: bool = False
    """Whether the file says (results written before it did not: readers work it out from the samples)."""
    contamination: dict[str, Any] | None = None
    """{checked, reason, contaminated_ids, unchecked_ids, fraction, clean, ...} (docs/evaluation.md,
    "Contamination"); None when the results predate it."""
    reused: bool = False
    """The task's samples and entry were kept from an earlier attempt of the same step."""


@dataclasses.dataclass
class EvalResults:
    format: int | None = None
    """2 (ours), 0 (lm-eval's without our section), None (neither: see `notes`)."""
    checkpoint: str | None = None
    step: int | None = None
    train_path: str | None = None
    tasks: dict[str, TaskEntry] = dataclasses.field(default_factory=dict)
    perplexity: dict[str, float | None] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)


def number(value: Any) -> float | None:
    """A finite number as a float; None for anything else (a bool, NaN, a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    v = number(value)
    return int(v) if v is not None else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _total(value: Any) -> int | None:
    """`total_items`: a number, or per task of a group {task: number} (summed)."""
    if isinstance(value, dict):
        counts = [_int(v) for v in value.values()]
        return sum(c for c in counts if c is not None) if counts and None not in counts else None
    return _int(value)


def _obj(data: Any, key: Any) -> dict[str, Any]:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def _finite_or_none(value: Any, where: str, notes: list[str]) -> Any:
    """`value` with every non-finite float replaced by None; the first few places are noted."""
    if isinstance(value, float) and not math.isfinite(value):
        if len(notes) < 5:
            notes.append(f"{where} is {value} (shown as missing)")
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v, f"{where}.{k}", notes) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v, f"{where}[{i}]", notes) for i, v in enumerate(value)]
    return value


def _metric(entry: Any, n: int | None, stderr: float | None) -> dict[str, Any] | None:
    if not isinstance(entry, dict) or number(entry.get("value")) is None:
        return None
    return {
        "value": float(entry["value"]),
        "low": number(entry.get("low")),
        "high": number(entry.get("high")),
        "method": _str(entry.get("method")),
        "n": _int(entry.get("n")) or n,
        "stderr": stderr,
    }


def _ids(value: Any) -> list[int] | None:
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return None
    return list(value)


def _contamination(value: Any, where: str, notes: list[str]) -> dict[str, Any] | None:
    """A task's `contamination` entry, checked for its shape: a damaged one is noted and read as
    not checked, never as clean."""
    if value is None:
        return None
    fraction = number(value.get("fraction")) if isinstance(value, dict) else None
    ids = _ids(value.get("contaminated_ids")) if isinstance(value, dict) else None
    unchecked = _ids(value.get("unchecked_ids", [])) if isinstance(value, dict) else None
    ok = (
        isinstance(value, dict)
        and isinstance(value.get("checked"), bool)
        and ids is not None
        and unchecked is not None
        and (not value["checked"] or (fraction is not None and 0.0 <= fraction <= 1.0))
    )
    if not ok:
        notes.append(f"{where}.contamination is damaged (read as not checked)")
        return {
            "checked": False,
            "reason": "the contamination entry in results.json is damaged",
            "contaminated_ids": [],
            "unchecked_ids": [],
            "fraction": None,
            "clean": None,
        }
    clean = value.get("clean")
    return {
        **value,
        "reason": _str(value.get("reason")),
        "contaminated_ids": ids,
        "unchecked_ids": unchecked,
        "fraction": fraction if value["checked"] else None,
        "clean": clean if isinstance(clean, dict) and value["checked"] else None,
    }


def read_results_document(output_path: str) -> dict[str, Any] | None:
    """The raw document of an earlier attempt's results.json in `output_path` (format 2), for a
    retry to keep its finished tasks; None when there is none or it is not ours or not readable."""
    url = mfs.join(output_path, RESULTS_FILE)
    try:
        data = json.loads(mfs.read_bytes(url).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    section = data.get("marin_lab") if isinstance(data, dict) else None
    if (
        not isinstance(section, dict)
        or section.get("format") != RESULTS_FORMAT
        or not isinstance(section.get("tasks"), dict)
    ):
        return None
    return data


def _ours(out: EvalResults, data: dict[str, Any]) -> None:
    section = data["marin_lab"]
    out.format = _int(section.get("format")) or RESULTS_FORMAT
    model = _obj(section, "model")
    out.checkpoint = _str(model.get("checkpoint")) or _str(data.get("checkpoint"))
    out.step = _int(model.get("step")) if _int(model.get("step")) is not None else _int(data.get("step"))
    out.train_path = _str(model.get("train_path")) or train_path_of(out.checkpoint)
    lm_results = _obj(data, "results")
    for name, entry in _obj(section, "tasks").items():
        if not isinstance(entry, dict):
            out.notes.append(f"marin_lab.tasks.{name} is not an object (skipped)")
            continue
        task = TaskEntry(
            task=str(name),
            status=_str(entry.get("status")) or "ok",
            error=_str(entry.get("error")),
            attempted=_int(entry.get("attempted")),
            scored=_int(entry.get("scored")),
            coverage=number(entry.get("coverage")),
            limit=_int(entry.get("limit")),
            capped=bool(entry.get("capped")),
            low_coverage=bool(entry.get("low_coverage")),
            split=_str(entry.get("split")),
            default_split=_str(entry.get("default_split")),
            data_source=_str(entry.get("data_source")),
            num_fewshot=_int(entry.get("num_fewshot")),
            samples_file=_str(entry.get("samples_file")),
            sample_seed=_int(entry.get("sample_seed")),
            total_items=_total(entry.get("total_items")),
            chance=number(entry.get("chance")),
            chance_recorded="chance" in entry,
            contamination=_contamination(entry.get("contamination"), f"marin_lab.tasks.{name}", out.notes),
            reused=entry.get("reused") is True,
        )
        if task.limit is not None or task.capped:
            task.limit_mode = "sample" if entry.get("limit_mode") == "sample" else "first"
        raw = _obj(lm_results, name)
        for metric, m in _obj(entry, "metrics").items():
            base, flt = (metric.split(",", 1) + ["none"])[:2]
            cell = _metric(m, task.scored, number(raw.get(f"{base}_stderr,{flt}")))
            if cell is not None:
                task.metrics[metric] = cell
        if task.status == "ok" and not task.metrics:
            out.notes.append(f"{name}: no metric recorded")
        out.tasks[str(name)] = task


def _lm_eval_only(out: EvalResults, data: dict[str, Any]) -> None:
    """lm-eval's own results.json without our section: its values and stderr."""
    out.format = 0
    out.checkpoint, out.step = _str(data.get("checkpoint")), _int(data.get("step"))
    out.train_path = train_path_of(out.checkpoint)
    n_samples = _obj(data, "n-samples")
    for name, raw in data["results"].items():
        if not isinstance(raw, dict):
            continue
        n = _int(_obj(n_samples, name).get("effective"))
        task = TaskEntry(task=str(name), attempted=n, scored=n)
        for key, value in raw.items():
            if "," not in key or "_stderr" in key or number(value) is None:
                continue
            metric, flt = key.split(",", 1)
            stderr = number(raw.get(f"{metric}_stderr,{flt}"))
            task.metrics[metric if flt == "none" else key] = _metric({"value": value}, n, stderr)  # type: ignore[assignment]
        out.tasks[str(name)] = task
    out.notes.append("lm-eval results without the marin_lab section: coverage and limit unknown")


def parse_results(raw: bytes, url: str) -> EvalResults:
    """A results.json from its bytes; RecordError naming `url` when it is not a JSON object."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise RecordError(url, f"not readable JSON ({type(err).__name__}: {str(err)[:160]}); nothing shown") from None
    if not isinstance(data, dict):
        raise RecordError(url, "not a JSON object; nothing shown")
    out = EvalResults()
    data = _finite_or_none(data, RESULTS_FILE, out.notes)
    if isinstance(data.get("marin_lab"), dict):
        _ours(out, data)
    elif isinstance(data.get("results"), dict):
        _lm_eval_only(out, data)
    else:
        out.notes.append(f"{url}: not format {RESULTS_FORMAT} or lm-eval's (no 'marin_lab' or 'results' section)")
    ppl = data.get("perplexity")
    if isinstance(ppl, dict):
        out.perplexity = {str(k): number(v) for k, v in ppl.items()}
    return out
