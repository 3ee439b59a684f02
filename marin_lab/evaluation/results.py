"""Evaluation runs: every evaluation step under a prefix, each read as an `EvalRun`.

- `find_eval_runs(prefix)`: the output folders holding a `results.json`, found from the experiment
  records' steps (`{prefix}/experiments/*.json`) and, for steps no record lists, the prefix's
  folders two levels deep (`{prefix}/{name}-{hash}/`, `{prefix}/{group}/{name}-{hash}/`).
- `load_run(path)`: one evaluation: its results.json parsed by the store's one parser
  (`marin_lab.store.eval_results`), per task its metrics with intervals (`stats`: those the file
  records, else computed from value, n and stderr), coverage and flags; the evaluated model (its
  training step's name and path, the checkpoint's step). What is damaged or missing (NaN, bad
  JSON, no samples file) becomes one line in `notes`; the rest is shown.

Every file is read through the project's one reader for files others wrote (`marin_lab.io.confined`):
a named pipe, socket or device is skipped from its stat (said in `notes`), never opened, so one FIFO
cannot hang the table; given a `confinement` (the browser passes its roots), a file whose real path
leaves it is not read either. The samples files are streamed by `evaluation.samples`; the tables
(`marin-lab evals`, the browser's pages) are `evaluation.tables`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

from marin_lab.errors import MarinLabError
from marin_lab.evaluation import stats
from marin_lab.execution.errors import RecordError
from marin_lab.io import confined
from marin_lab.io.fs import fs_and_path, join, normalize_prefix
from marin_lab.store.eval_results import TaskEntry, parse_results
from marin_lab.store.experiment_record import read_experiment_record
from marin_lab.store.layout import RESULTS_FILE, experiments_dir
from marin_lab.store.reader import Reader
from marin_lab.store.step_record import read_step_record

MAX_RESULTS_BYTES = 64 * 1024 * 1024
"""A results.json larger than this is not parsed (lm-eval's configs section is kilobytes per task)."""
MAX_RUNS = 2000


class EvalResultsError(MarinLabError):
    """What `marin-lab evals` was asked cannot be answered (no such run, a bad regex)."""


@dataclasses.dataclass
class TaskResult(TaskEntry):
    """A task of a run, its metrics with intervals (`load_run`)."""

    def primary(self, metric: str | None = None) -> str | None:
        """The metric shown for this task: `metric` when it has it, else `stats.primary_metric`'s."""
        return stats.primary_metric(self.metrics, metric)

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
            "limit": self.limit,
            "limit_mode": self.limit_mode,
            "sample_seed": self.sample_seed,
            "total_items": self.total_items,
            "split": self.split,
            "default_split": self.default_split,
            "chance": self.chance if stats.binary_metric(name) else None,
            "contaminated": stats.contaminated_fraction(self.contamination),
        }
        cell["at_chance"] = stats.at_chance(cell)
        cell["cap_text"] = stats.cap_text(cell)
        cell["text"] = stats.fmt_cell(cell)
        return cell

    def line(self, metric: str | None = None) -> str:
        """The task in one line: its metric, value, interval, chance, split and how its items were picked."""
        return stats.task_line(self.task, self.cell(metric))

    @classmethod
    def of(cls, entry: TaskEntry, ours: bool) -> TaskResult:
        """The task with an interval for every metric; in our format, its coverage flags recomputed
        from its counts."""
        tr = cls(**{f.name: getattr(entry, f.name) for f in dataclasses.fields(TaskEntry)})
        if ours and tr.attempted is not None and tr.scored is not None:
            cov = stats.coverage(tr.scored, tr.attempted, tr.limit)
            tr.coverage, tr.low_coverage = cov["coverage"], bool(cov["low_coverage"])
        tr.capped = tr.limit is not None or tr.capped
        tr.metrics = {}
        for metric, m in entry.metrics.items():
            if m["low"] is not None and m["high"] is not None:
                tr.metrics[metric] = {k: m[k] for k in ("value", "low", "high", "method", "n")}
            else:
                binary = stats.binary_metric(metric)
                tr.metrics[metric] = stats.aggregate_interval(m["value"], m["n"], m["stderr"], binary=binary)
        return tr


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


def _refused(url: str, err: confined.RefusedPathError) -> str:
    """The note for a file the reader would not read (a FIFO, a symlink out of the roots)."""
    return f"{url}: skipped, not read ({err})"


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
                run.model = dep.get("name") if isinstance(dep.get("name"), str) else None
        if run.model is None and run.train_path is None:
            deps = [d for d in record.dependencies if isinstance(d, dict) and isinstance(d.get("output_path"), str)]
            if len(deps) == 1:
                run.train_path = deps[0]["output_path"]
                run.model = deps[0].get("name") if isinstance(deps[0].get("name"), str) else None
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
        parsed = parse_results(confined.read_bounded(url, MAX_RESULTS_BYTES, confinement), url)
    except FileNotFoundError:
        run.notes.append(f"{url}: no results.json (the evaluation has not finished, or failed)")
        return run
    except confined.RefusedPathError as err:
        run.notes.append(_refused(url, err) + "; nothing shown")
        return run
    except RecordError as err:
        run.notes.append(str(err))
        return run
    except (confined.FileTooLargeError, OSError) as err:
        run.notes.append(f"{url}: not readable ({type(err).__name__}: {str(err)[:160]}); nothing shown")
        return run
    run.format, run.checkpoint, run.step, run.train_path = (
        parsed.format,
        parsed.checkpoint,
        parsed.step,
        parsed.train_path,
    )
    run.tasks = {name: TaskResult.of(entry, parsed.format != 0) for name, entry in parsed.tasks.items()}
    run.perplexity, run.notes = parsed.perplexity, parsed.notes
    for tr in run.tasks.values():
        if tr.status == "failed":
            run.notes.append(f"{tr.task}: failed ({tr.error or 'no reason recorded'})")
        elif run.format and tr.samples_file and not confined.exists(samples_url(run, tr.task), confinement):
            run.notes.append(
                f"{tr.task}: samples file {tr.samples_file} is missing (no per-item view or paired "
                "comparison for this task)"
            )
    _model_from_record(run)
    return run


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
    paths: dict[str, str] = {}  # the run's identity (its real path) -> the path it is listed by
    fs, root = fs_and_path(prefix)
    protocol = prefix.split("://", 1)[0] + "://" if "://" in prefix else ""
    # The listing's own paths first: a run reached both through a symlinked prefix (the listing)
    # and by the absolute path a record holds is one run, named as it lies under the prefix.
    for pattern in (f"{root}/*/{RESULTS_FILE}", f"{root}/*/*/{RESULTS_FILE}"):
        try:
            found = fs.glob(pattern)
        except OSError:
            found = []
        for hit in sorted(found)[:MAX_RUNS]:
            url = (protocol + hit) if protocol and not hit.startswith(protocol) else hit
            if _listed(url, confinement):
                folder = url.rsplit("/", 1)[0]
                paths.setdefault(_identity(folder), folder)
    for out in _recorded_outputs(prefix, confinement):
        if _listed(join(out, RESULTS_FILE), confinement):
            paths.setdefault(_identity(out.rstrip("/")), out.rstrip("/"))
    listed = sorted(paths.values())[:MAX_RUNS]
    return [load_run(p, _relative(prefix, p), confinement) for p in listed]


def _identity(path: str) -> str:
    """A run folder's identity: its real path on a local disk (symlinks resolved), else its URL."""
    if "://" in path and not path.startswith("file://"):
        return path.rstrip("/")
    return os.path.realpath(path.removeprefix("file://"))


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


def samples_url(run: EvalRun, task: str) -> str:
    tr = run.tasks.get(task)
    name = tr.samples_file if tr is not None and tr.samples_file else f"samples_{task}.jsonl"
    return join(run.path, name.rsplit("/", 1)[-1])  # a name, never a path out of the folder
