"""Reading evaluation outputs: every evaluation step under a prefix, its results.json and samples files.

One reader for `marin-lab evals` and the browser, so both show the same numbers:

- `find_eval_runs(prefix)`: the output folders holding a `results.json`, found from the experiment
  records' steps (`{prefix}/experiments/*.json`) and, for steps no record lists, the prefix's
  folders two levels deep (`{prefix}/{name}-{hash}/`, `{prefix}/{group}/{name}-{hash}/`).
- `load_run(path)`: one evaluation as an `EvalRun`: per task its metrics with intervals, coverage
  and flags; the evaluated model (its training step's name and path, the checkpoint's step). Both
  shapes are read: format 2 (lm-eval's sections plus `marin_lab`, docs/evaluation.md) and the older
  format 1 (`tasks: {name: {accuracy, accuracy_norm, n}}`, intervals from accuracy and n, with a
  note saying what that shape lacks). What is damaged or missing (NaN, bad JSON, no samples file)
  becomes one line in `notes`; the rest is shown.
- `item_values` / `read_samples`: the samples files, streamed line by line with every count capped
  (`MAX_LINE_BYTES`, `MAX_ITEMS`, `MAX_SCAN_BYTES`): a 1 GB file is never loaded whole.

Every file is read through the project's one reader for files others wrote (`marin_lab.io.confined`):
a named pipe, socket or device is skipped from its stat (said in `notes`), never opened, so one FIFO
cannot hang the table; given a `confinement` (the browser passes its roots), a file whose real path
leaves it is not read either.
- `leaderboard` and `compare`: the tables `marin-lab evals` prints and the browser's pages show.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections.abc import Iterator
from typing import Any

from marin_lab.errors import MarinLabError
from marin_lab.evaluation import stats
from marin_lab.execution.errors import RecordError
from marin_lab.io import confined
from marin_lab.io.fs import fs_and_path, join, normalize_prefix
from marin_lab.store.experiment_record import read_experiment_record
from marin_lab.store.layout import RESULTS_FILE, experiments_dir
from marin_lab.store.reader import Reader
from marin_lab.store.step_record import read_step_record

MAX_RESULTS_BYTES = 64 * 1024 * 1024
"""A results.json larger than this is not parsed (lm-eval's configs section is kilobytes per task)."""
MAX_LINE_BYTES = 4 * 1024 * 1024
"""A samples line longer than this is skipped (counted): one item's prompt and choices fit easily."""
MAX_ITEMS = 200_000
"""At most this many items per task are read for a comparison (said when a task has more)."""
MAX_SCAN_BYTES = 512 * 1024 * 1024
"""At most this many bytes of one samples file are read for a comparison."""
MAX_PAGE_SCAN_BYTES = 32 * 1024 * 1024
"""At most this many bytes are read for one page of the sample viewer (the next page goes on)."""
MAX_RUNS = 2000
MAX_CURSOR = 2**53
"""The largest cursor (a byte offset into a samples file) a page is read from."""
PRIMARY_METRICS = ("acc_norm", "acc", "exact_match", "f1", "mcc", "word_perplexity", "perplexity")
"""The metric a task's column shows, the first of these it has (lm-eval's usual headline metric:
acc_norm where a task reports it, as Marin's CORE_TASKS tables do; else acc, exact_match...)."""
LOWER_IS_BETTER = {"perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte"}


class EvalResultsError(MarinLabError):
    """What `marin-lab evals` was asked cannot be answered (no such run, a bad regex)."""


@dataclasses.dataclass
class TaskResult:
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

    def primary(self, metric: str | None = None) -> str | None:
        """The metric shown for this task: `metric` when it has it, else the first of PRIMARY_METRICS."""
        if metric:
            return metric if metric in self.metrics else None
        for name in PRIMARY_METRICS:
            if name in self.metrics:
                return name
        return next(iter(sorted(self.metrics)), None)

    def cell(self, metric: str | None = None) -> dict[str, Any] | None:
        name = self.primary(metric)
        if name is None:
            if self.status == "failed":
                return {
                    "status": "failed",
                    "error": self.error,
                    "value": None,
                    "low": None,
                    "high": None,
                    "text": "failed",
                }
            return None
        cell = {
            **self.metrics[name],
            "metric": name,
            "capped": self.capped,
            "low_coverage": self.low_coverage,
            "coverage": self.coverage,
            "status": self.status,
            "error": self.error,
        }
        cell["text"] = fmt_cell(cell)
        return cell


@dataclasses.dataclass
class EvalRun:
    path: str
    key: str
    """The run's path under the prefix (`evaluate/nano-1a2b3c4d`): how the CLI and pages name it."""
    name: str | None = None
    model: str | None = None
    train_path: str | None = None
    checkpoint: str | None = None
    step: int | None = None
    format: int | None = None
    tasks: dict[str, TaskResult] = dataclasses.field(default_factory=dict)
    perplexity: dict[str, float | None] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    confinement: confined.Confinement | None = dataclasses.field(default=None, repr=False, compare=False)
    """Where this run's files may be read (None: anywhere); its samples files are read the same way."""

    @property
    def reader(self) -> Reader:
        """The store's reader shape over this run's confinement (for its step records)."""
        return functools.partial(confined.read_record, confinement=self.confinement)

    @property
    def label(self) -> str:
        model = self.model or self.key
        return f"{model} @ step {self.step}" if self.step is not None else model

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "key": self.key,
            "name": self.name,
            "model": self.model,
            "label": self.label,
            "train_path": self.train_path,
            "checkpoint": self.checkpoint,
            "step": self.step,
            "format": self.format,
            "notes": self.notes,
            "perplexity": self.perplexity,
            "tasks": {t: dataclasses.asdict(r) for t, r in self.tasks.items()},
        }


# ---- reading one run ---------------------------------------------------------------------------


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


def _read_json_bounded(url: str, confinement: confined.Confinement | None) -> Any:
    try:
        raw = confined.read_bounded(url, MAX_RESULTS_BYTES, confinement)
    except confined.FileTooLargeError:
        raise ValueError(f"larger than {MAX_RESULTS_BYTES // (1024 * 1024)} MB, not read") from None
    return json.loads(raw.decode("utf-8"))


def _refused(url: str, err: confined.RefusedPathError) -> str:
    """The note for a file the reader would not read (a FIFO, a symlink out of the roots)."""
    return f"{url}: skipped, not read ({err})"


def _obj(data: Any, key: Any) -> dict[str, Any]:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    v = _num(value)
    return int(v) if v is not None else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _metric_entry(entry: Any, fallback_n: int | None, stderr: float | None, metric: str) -> dict[str, Any] | None:
    """A recorded interval, or one computed here when the record lacks its bounds."""
    if not isinstance(entry, dict) or _num(entry.get("value")) is None:
        return None
    value = float(entry["value"])
    n = _int(entry.get("n")) or fallback_n
    low, high = _num(entry.get("low")), _num(entry.get("high"))
    if low is not None and high is not None:
        return {"value": value, "low": low, "high": high, "method": _str(entry.get("method")), "n": n}
    return stats.aggregate_interval(value, n, stderr, binary=_binary_name(metric))


def _binary_name(metric: str) -> bool:
    base = metric.split(",", 1)[0]
    return base in ("acc", "acc_norm", "exact_match", "accuracy", "accuracy_norm") or base.startswith("acc")


def _format2(run: EvalRun, data: dict[str, Any]) -> None:
    section = data["marin_lab"]
    model = _obj(section, "model")
    run.checkpoint = _str(model.get("checkpoint")) or _str(data.get("checkpoint"))
    run.step = _int(model.get("step")) if _int(model.get("step")) is not None else _int(data.get("step"))
    run.train_path = _str(model.get("train_path")) or _train_path(run.checkpoint)
    tasks = _obj(section, "tasks")
    lm_results = _obj(data, "results")
    for name, entry in tasks.items():
        if not isinstance(entry, dict):
            run.notes.append(f"marin_lab.tasks.{name} is not an object (skipped)")
            continue
        tr = TaskResult(
            task=str(name),
            status=_str(entry.get("status")) or "ok",
            error=_str(entry.get("error")),
            attempted=_int(entry.get("attempted")),
            scored=_int(entry.get("scored")),
            coverage=_num(entry.get("coverage")),
            limit=_int(entry.get("limit")),
            split=_str(entry.get("split")),
            default_split=_str(entry.get("default_split")),
            data_source=_str(entry.get("data_source")),
            num_fewshot=_int(entry.get("num_fewshot")),
            samples_file=_str(entry.get("samples_file")),
        )
        if tr.attempted is not None and tr.scored is not None:
            cov = stats.coverage(tr.scored, tr.attempted, tr.limit)
            tr.coverage, tr.low_coverage = cov["coverage"], bool(cov["low_coverage"])
        else:
            tr.low_coverage = bool(entry.get("low_coverage"))
        tr.capped = tr.limit is not None or bool(entry.get("capped"))
        raw = _obj(lm_results, name)
        metrics = _obj(entry, "metrics")
        for metric, m in metrics.items():
            base, flt = (metric.split(",", 1) + ["none"])[:2]
            cell = _metric_entry(m, tr.scored, _num(raw.get(f"{base}_stderr,{flt}")), metric)
            if cell is not None:
                tr.metrics[metric] = cell
        if tr.status == "ok" and not tr.metrics:
            run.notes.append(f"{name}: no metric recorded")
        run.tasks[str(name)] = tr


def _format1(run: EvalRun, data: dict[str, Any]) -> None:
    run.checkpoint = _str(data.get("checkpoint"))
    run.step = _int(data.get("step"))
    run.train_path = _train_path(run.checkpoint)
    tasks = _obj(data, "tasks")
    for name, entry in tasks.items():
        if not isinstance(entry, dict):
            continue
        n = _int(entry.get("n"))
        tr = TaskResult(task=str(name), attempted=n, scored=n)
        for old, new in (("accuracy", "acc"), ("accuracy_norm", "acc_norm")):
            value = _num(entry.get(old))
            if value is not None:
                tr.metrics[new] = stats.aggregate_interval(value, n)
        run.tasks[str(name)] = tr
    if tasks:
        run.notes.append(
            "results of the older format 1: no samples files, coverage, limit or split recorded; "
            "intervals computed from accuracy and n"
        )


def _lm_eval_only(run: EvalRun, data: dict[str, Any]) -> None:
    """lm-eval's own results.json without our section: intervals from its values and stderr."""
    n_samples = _obj(data, "n-samples")
    for name, raw in data["results"].items():
        if not isinstance(raw, dict):
            continue
        ns = _obj(n_samples, name)
        n = _int(ns.get("effective"))
        tr = TaskResult(task=str(name), attempted=n, scored=n)
        for key, value in raw.items():
            if "," not in key or "_stderr" in key or _num(value) is None:
                continue
            metric, flt = key.split(",", 1)
            name_m = metric if flt == "none" else key
            tr.metrics[name_m] = stats.aggregate_interval(
                float(value), n, _num(raw.get(f"{metric}_stderr,{flt}")), binary=_binary_name(metric)
            )
        run.tasks[str(name)] = tr
    run.notes.append("lm-eval results without the marin_lab section: coverage and limit unknown")


def _train_path(checkpoint: str | None) -> str | None:
    if not checkpoint:
        return None
    parts = checkpoint.rstrip("/").split("/")
    if len(parts) >= 3 and parts[-2] == "checkpoints":
        return "/".join(parts[:-2])
    return None


def _model_from_record(run: EvalRun) -> None:
    """The run's step name, and the model's: the training step's name from the eval step's
    dependencies (the one whose output is the checkpoint's training run), else its record."""
    try:
        record = read_step_record(run.path, run.reader)
    except RecordError as err:
        run.notes.append(str(err))
        record = None
    if record is not None:
        run.name = record.name
        for dep in record.dependencies:
            if isinstance(dep, dict) and run.train_path and dep.get("output_path") == run.train_path:
                run.model = _str(dep.get("name"))
        if run.model is None and run.train_path is None:
            deps = [d for d in record.dependencies if isinstance(d, dict) and isinstance(d.get("output_path"), str)]
            if len(deps) == 1:
                run.train_path = deps[0]["output_path"]
                run.model = _str(deps[0].get("name"))
    if run.model is None and run.train_path:
        try:
            train = read_step_record(run.train_path, run.reader)
        except RecordError:
            train = None
        run.model = (train.name if train is not None and train.name else None) or run.train_path.rstrip("/").rsplit(
            "/", 1
        )[-1]


def load_run(path: str, key: str | None = None, confinement: confined.Confinement | None = None) -> EvalRun:
    """The evaluation at output folder `path` (never raises for bad content: see `notes`); its files
    are read inside `confinement` when one is given."""
    run = EvalRun(path=path, key=key or path.rstrip("/").rsplit("/", 1)[-1], confinement=confinement)
    url = join(path, RESULTS_FILE)
    try:
        data = _read_json_bounded(url, confinement)
    except FileNotFoundError:
        run.notes.append(f"{url}: no results.json (the evaluation has not finished, or failed)")
        return run
    except confined.RefusedPathError as err:
        run.notes.append(_refused(url, err) + "; nothing shown")
        return run
    except (ValueError, UnicodeDecodeError, RecursionError, OSError) as err:
        run.notes.append(f"{url}: not readable JSON ({type(err).__name__}: {str(err)[:160]}); nothing shown")
        return run
    if not isinstance(data, dict):
        run.notes.append(f"{url}: not a JSON object; nothing shown")
        return run
    data = _finite_or_none(data, RESULTS_FILE, run.notes)
    if isinstance(data.get("marin_lab"), dict):
        run.format = _int(data["marin_lab"].get("format")) or 2
        _format2(run, data)
    elif isinstance(data.get("tasks"), dict) or "perplexity" in data:
        run.format = 1
        _format1(run, data)
    elif isinstance(data.get("results"), dict):
        run.format = 0
        run.checkpoint, run.step = _str(data.get("checkpoint")), _int(data.get("step"))
        run.train_path = _train_path(run.checkpoint)
        _lm_eval_only(run, data)
    else:
        run.notes.append(f"{url}: neither format 1 nor format 2 (no 'marin_lab', 'tasks' or 'results' section)")
    ppl = data.get("perplexity")
    if isinstance(ppl, dict):
        run.perplexity = {str(k): _num(v) for k, v in ppl.items()}
    for tr in run.tasks.values():
        if tr.status == "failed":
            run.notes.append(f"{tr.task}: failed ({tr.error or 'no reason recorded'})")
        elif run.format and run.format >= 2 and tr.samples_file and not _exists(samples_url(run, tr.task), confinement):
            run.notes.append(
                f"{tr.task}: samples file {tr.samples_file} is missing (no per-item view or paired "
                "comparison for this task)"
            )
    _model_from_record(run)
    return run


def _exists(url: str, confinement: confined.Confinement | None) -> bool:
    """Whether a file that may be read is at `url` (a FIFO or a link out of the roots is not)."""
    return confined.exists(url, confinement)


# ---- finding runs ------------------------------------------------------------------------------


def _relative(prefix: str, path: str) -> str:
    p = prefix.rstrip("/") + "/"
    return path[len(p) :] if path.startswith(p) else path


def _listed(url: str, confinement: confined.Confinement | None) -> bool:
    """Whether a results.json at `url` makes a run to list: one inside the confinement (a named
    pipe too: its run is listed with a note saying the file was skipped)."""
    try:
        confined.file_info(url, confinement)
    except confined.SpecialFileError:
        return True
    except (MarinLabError, OSError, ValueError):
        return False
    return True


def _recorded_outputs(prefix: str, confinement: confined.Confinement | None) -> list[str]:
    """The output paths the experiment records under `prefix` list (damaged records skipped)."""
    folder = experiments_dir(prefix)
    fs, path = fs_and_path(folder)
    try:
        names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(path, detail=False) if p.endswith(".json"))
    except OSError:
        return []
    read = functools.partial(confined.read_record, confinement=confinement)
    out = []
    for name in names:
        try:
            record = read_experiment_record(join(folder, name), read)
        except RecordError:
            continue
        for step in record.steps if record is not None else []:
            output = step.get("output_path") if isinstance(step, dict) else None
            if isinstance(output, str) and output:
                out.append(output)
    return out


def find_eval_runs(prefix: str, confinement: confined.Confinement | None = None) -> list[EvalRun]:
    """Every evaluation under `prefix` (a folder holding results.json), loaded, in path order; with
    a `confinement`, only those whose results.json may be read inside it."""
    prefix = normalize_prefix(prefix)
    paths: dict[str, None] = {}
    for out in _recorded_outputs(prefix, confinement):
        if _listed(join(out, RESULTS_FILE), confinement):
            paths[out.rstrip("/")] = None
    fs, root = fs_and_path(prefix)
    protocol = prefix.split("://", 1)[0] + "://" if "://" in prefix else ""
    for pattern in (f"{root}/*/{RESULTS_FILE}", f"{root}/*/*/{RESULTS_FILE}"):
        try:
            found = fs.glob(pattern)
        except OSError:
            found = []
        for hit in sorted(found)[:MAX_RUNS]:
            url = (protocol + hit) if protocol and not hit.startswith(protocol) else hit
            if _listed(url, confinement):
                paths[url.rsplit("/", 1)[0]] = None
    return [load_run(p, _relative(prefix, p), confinement) for p in sorted(paths)[:MAX_RUNS]]


def run_detail(run: EvalRun) -> dict[str, Any]:
    """One evaluation as its step page shows it: the run, and per task its shown cell and every metric."""
    tasks = {}
    for name, tr in sorted(run.tasks.items()):
        tasks[name] = {
            "cell": tr.cell(),
            "split": tr.split,
            "default_split": tr.default_split,
            "num_fewshot": tr.num_fewshot,
            "limit": tr.limit,
            "attempted": tr.attempted,
            "scored": tr.scored,
            "metrics": {m: {**c, "text": fmt_cell({**c, "metric": m})} for m, c in sorted(tr.metrics.items())},
        }
    return {"run": run.to_json(), "tasks": tasks}


def resolve_run(runs: list[EvalRun], spec: str) -> EvalRun:
    """The run `spec` names: its output path, its path under the prefix, or its folder name."""
    s = spec.rstrip("/")
    for test in (
        lambda r: r.path == s,
        lambda r: r.key == s,
        lambda r: r.key.rsplit("/", 1)[-1] == s,
        lambda r: r.name == s,
    ):
        hits = [r for r in runs if test(r)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise EvalResultsError(
                f"{spec!r} names {len(hits)} evaluations ({', '.join(r.key for r in hits[:4])}); "
                "give the path under the prefix"
            )
    known = ", ".join(r.key for r in runs[:8]) or "none"
    raise EvalResultsError(f"no evaluation {spec!r} under the prefix (evaluations: {known})")


def task_filter(regex: str | None, flag: str = "--tasks") -> re.Pattern[str] | None:
    if not regex:
        return None
    try:
        return re.compile(regex)
    except (re.error, OverflowError, RecursionError) as err:  # `a{99999999999}` overflows, not re.error
        raise EvalResultsError(f"{flag} {regex!r} is not a regular expression: {err}") from None


# ---- samples -----------------------------------------------------------------------------------


def samples_url(run: EvalRun, task: str) -> str:
    tr = run.tasks.get(task)
    name = tr.samples_file if tr is not None and tr.samples_file else f"samples_{task}.jsonl"
    return join(run.path, name.rsplit("/", 1)[-1])  # a name, never a path out of the folder


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
    return _num(rec.get(base)) if not isinstance(rec.get(base), bool) else float(rec[base])


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
        return {}, [f"{task}: " + _refused(url, err)]
    except OSError as err:
        return {}, [f"{task}: {url}: unreadable ({type(err).__name__})"]
    if "stopped_at" in state:
        notes.append(f"{task}: only the first {MAX_SCAN_BYTES // (1024 * 1024)} MB of {url} compared")
    if bad:
        notes.append(f"{task}: {bad} line(s) of {url.rsplit('/', 1)[-1]} in {run.key} unreadable or too long, skipped")
    return out, notes


def _parse(line: bytes | None) -> dict[str, Any] | None:
    if line is None:
        return None
    try:
        rec = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return rec if isinstance(rec, dict) else None


# ---- the tables ----------------------------------------------------------------------------------


def leaderboard(
    runs: list[EvalRun], tasks_regex: str | None = None, metric: str | None = None, rank_on: str | None = None
) -> dict[str, Any]:
    """Rows (one per evaluation with results) x columns (tasks), ranked on the lower bound.

    The rank tasks are those `rank_on` (a regex) names, else the shown tasks that the most rows have
    with an interval. A row's score is the mean of its 95% lower bounds over the rank tasks; rows
    lacking one of them rank below the rest, by the mean lower bound of the tasks they have.
    """
    pattern = task_filter(tasks_regex)
    rank_pattern = task_filter(rank_on, "--rank_on")
    rows: list[dict[str, Any]] = []
    all_tasks: set[str] = set()
    for run in runs:
        cells = {}
        for name, tr in run.tasks.items():
            if pattern is not None and not pattern.search(name):
                continue
            cells[name] = tr.cell(metric)
            all_tasks.add(name)
        rows.append({"run": run, "cells": cells})
    tasks = sorted(all_tasks)
    held = {t: sum(1 for r in rows if r["cells"].get(t) and r["cells"][t].get("low") is not None) for t in tasks}
    if rank_pattern is not None:
        rank_tasks = [t for t in tasks if rank_pattern.search(t)]
    else:
        most = max(held.values(), default=0)
        rank_tasks = [t for t in tasks if most and held[t] == most]
    for r in rows:
        r["score"] = stats.mean_lower_bound([r["cells"].get(t) for t in rank_tasks]) if rank_tasks else None
        own = [c for c in r["cells"].values() if c and c.get("low") is not None]
        r["own_score"] = stats.mean_lower_bound(own) if own else None
    rows.sort(
        key=lambda r: (r["score"] is not None, r["score"] or 0.0, r["own_score"] is not None, r["own_score"] or 0.0),
        reverse=True,
    )
    for i, r in enumerate(rows):
        r["rank"] = i + 1
    return {"tasks": tasks, "rank_tasks": rank_tasks, "rows": rows}


def leaderboard_json(board: dict[str, Any]) -> dict[str, Any]:
    return {
        "tasks": board["tasks"],
        "rank_tasks": board["rank_tasks"],
        "rank_rule": rank_rule(board),
        "rows": [
            {"rank": r["rank"], "score": r["score"], "run": r["run"].to_json(), "cells": r["cells"]}
            for r in board["rows"]
        ],
    }


def rank_rule(board: dict[str, Any]) -> str:
    if not board["rank_tasks"]:
        return "no task has an interval: rows are in path order"
    return (
        "ranked on the mean of the 95% lower bounds over "
        + ", ".join(board["rank_tasks"])
        + "; rows without all of them follow, by the mean lower bound of the tasks they have"
    )


def unpaired_reason(ta: TaskResult, tb: TaskResult) -> str | None:
    """Why two runs' items of a task are not the same questions, from what each run recorded (another
    split, n-shot or copy of the data); None when nothing recorded says so."""
    differ = [
        f"{what} {x} vs {y}"
        for what, x, y in (
            ("split", ta.split, tb.split),
            ("n-shot", ta.num_fewshot, tb.num_fewshot),
            ("data source", ta.data_source, tb.data_source),
        )
        if x is not None and y is not None and x != y
    ]
    return "not the same items (" + ", ".join(differ) + ")" if differ else None


def _hash_mismatch(ha: dict[Any, str], hb: dict[Any, str]) -> str | None:
    """Why items joined on doc_id are other documents: their lm-eval `doc_hash` differs."""
    both = [k for k in ha if k in hb]
    other = sum(1 for k in both if ha[k] != hb[k])
    if not other:
        return None
    return f"not the same items ({other} of {len(both)} doc_ids name other documents: their doc_hash differs)"


def compare(
    run_a: EvalRun,
    run_b: EvalRun,
    tasks_regex: str | None = None,
    metric: str | None = None,
    max_disagreements: int = 50,
) -> dict[str, Any]:
    """Per task both runs scored: the paired difference b - a of the task's metric over the items
    both scored (joined on doc_id), its interval, a sentence; and the overall verdict over the tasks
    whose items pair. A task whose items do not pair (another split, n-shot or data source recorded,
    or doc_ids naming other documents) gets no number and no verdict: `paired` is False and
    `unpaired` says why."""
    pattern = task_filter(tasks_regex)
    out_tasks: dict[str, Any] = {}
    notes: list[str] = []
    common = sorted(set(run_a.tasks) & set(run_b.tasks))
    for only, run in ((set(run_a.tasks) - set(run_b.tasks), run_a), (set(run_b.tasks) - set(run_a.tasks), run_b)):
        if only:
            notes.append(f"only {run.key} has {', '.join(sorted(only))}: not compared")
    for task in common:
        if pattern is not None and not pattern.search(task):
            continue
        ta, tb = run_a.tasks[task], run_b.tasks[task]
        name = ta.primary(metric) or tb.primary(metric)
        if name is None or name not in tb.metrics:
            notes.append(f"{task}: no metric both runs report")
            continue
        ca, cb = ta.cell(name), tb.cell(name)
        entry: dict[str, Any] = {"metric": name, "a": ca, "b": cb, "a_text": fmt_cell(ca), "b_text": fmt_cell(cb)}
        if (ta.split is None) != (tb.split is None) or (ta.num_fewshot is None) != (tb.num_fewshot is None):
            notes.append(
                f"{task}: one run does not record its split or n-shot ({ta.num_fewshot}/{ta.split} vs "
                f"{tb.num_fewshot}/{tb.split}): paired on doc_id as recorded"
            )
        why = unpaired_reason(ta, tb)
        if why is None:
            ha: dict[Any, str] = {}
            hb: dict[Any, str] = {}
            va, na = item_values(run_a, task, name, ha)
            vb, nb = item_values(run_b, task, name, hb)
            notes.extend(na + nb)
            why = _hash_mismatch(ha, hb)
        if why is not None:
            entry.update(
                paired=False,
                unpaired=why,
                diff=None,
                text="no verdict",
                sentence=f"no verdict on {task}: {why}",
                disagreements=[],
            )
            out_tasks[task] = entry
            continue
        diff = stats.paired_difference(va, vb)
        entry["paired"] = True
        entry["unpaired"] = None
        entry["diff"] = diff
        entry["sentence"] = stats.verdict({task: diff}, run_a.label, run_b.label)
        entry["text"] = fmt_diff(diff, _is_fraction(ca or {"metric": name}))
        entry["disagreements"] = [k for k in va if k in vb and va[k] != vb[k]][:max_disagreements]
        out_tasks[task] = entry
    diffs = {t: e["diff"] for t, e in out_tasks.items() if e["paired"]}
    unpaired = sorted(t for t, e in out_tasks.items() if not e["paired"])
    if diffs:
        sentence = stats.verdict(diffs, run_a.label, run_b.label)
    elif unpaired:
        sentence = "no task whose items pair"
    else:
        sentence = "no task both runs scored"
    if unpaired:
        whose = "its items do not" if len(unpaired) == 1 else "their items do not"
        sentence += f"; no verdict on {', '.join(unpaired)}: {whose} pair (see the row)"
    return {
        "a": run_a.to_json(),
        "b": run_b.to_json(),
        "tasks": out_tasks,
        "verdict": sentence,
        "notes": notes,
        "method": PAIRED_METHOD,
    }


PAIRED_METHOD = (
    "paired over the items both runs scored (joined on doc_id): the mean of B - A per item, in points "
    "for accuracies, and its 95% interval from Student's t on the per-item differences"
)


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
    return {
        "task": task,
        "metric": name,
        "items": items,
        "next_cursor": next_cursor,
        "scanned": scanned,
        "notes": notes,
    }


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
    return _num(resp)


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
    picked = None
    if lls and all(x is not None for x in lls):
        picked = max(range(len(lls)), key=lambda i: lls[i])  # type: ignore[arg-type, return-value]
    value = _item_value(rec, metric) if metric else None
    return {
        "doc_id": rec.get("doc_id") if not isinstance(rec.get("doc_id"), (dict, list)) else _text(rec.get("doc_id")),
        "task": _str(rec.get("task")),
        "prompt": _text(prompt),
        "choices": choices,
        "loglikelihoods": lls,
        "generation": generation,
        "picked": picked,
        "gold": _gold(rec.get("target")),
        "value": value,
        "correct": None if value is None else value >= 1.0 if metric and _binary_name(metric) else None,
        "metric": metric,
    }


def _gold(target: Any) -> Any:
    if isinstance(target, (int, float)) and not isinstance(target, bool):
        return target
    return _text(target) if target is not None else None


# ---- formatting (the CLI prints these strings; the browser shows the same ones) ------------------


def _is_fraction(cell: dict[str, Any]) -> bool:
    return cell.get("method") == stats.WILSON or _binary_name(str(cell.get("metric", "")))


def fmt_value(cell: dict[str, Any] | None, key: str = "value") -> str:
    if not cell or cell.get(key) is None:
        return "n/a"
    v = float(cell[key])
    return f"{100 * v:.1f}" if _is_fraction(cell) else f"{v:.4g}"


def fmt_cell(cell: dict[str, Any] | None) -> str:
    """ "31.0 (22.4-41.0)" for a fraction (in points), "12.3 (11.9-12.7)" otherwise; marks: * capped,
    ! low coverage, "failed" for a failed task."""
    if not cell:
        return "-"
    if cell.get("status") == "failed":
        return "failed"
    text = fmt_value(cell)
    if cell.get("low") is not None and cell.get("high") is not None:
        text += f" ({fmt_value(cell, 'low')}-{fmt_value(cell, 'high')})"
    marks = ("*" if cell.get("capped") else "") + ("!" if cell.get("low_coverage") else "")
    return text + marks


def fmt_diff(diff: dict[str, Any], fraction: bool = True) -> str:
    if diff.get("mean") is None:
        return "n/a"
    scale = 100.0 if fraction else 1.0
    text = f"{scale * diff['mean']:+.1f}" if fraction else f"{diff['mean']:+.4g}"
    if diff.get("low") is not None:
        text += (
            f" ({scale * diff['low']:+.1f} to {scale * diff['high']:+.1f})"
            if fraction
            else f" ({diff['low']:+.4g} to {diff['high']:+.4g})"
        )
    return text
