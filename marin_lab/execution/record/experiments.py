"""Experiment records (`{prefix}/experiments/*.json`): listing a prefix's, and the status of each
of their steps as `marin-lab status` and `marin-lab gc` list them. One record is read and parsed by
`store.experiment_record` (`read_experiment_record`, re-exported here); a listing holds the typed
records (`ExperimentRecord`) with the URL each was read from."""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Sequence
from typing import Any

from marin_lab.execution.errors import RecordError
from marin_lab.execution.state.lease import DRIVER_GONE, provably_gone, running_driver_gone
from marin_lab.io.fs import fs_and_path, join
from marin_lab.store.experiment_record import ExperimentRecord, read_experiment_record
from marin_lab.store.layout import CORRUPT, MISSING, RUNS_DIR, experiments_dir
from marin_lab.store.reader import read_file
from marin_lab.store.run_record import RunDoc, parse_run_record
from marin_lab.store.status import listed_status

__all__ = [
    "ListedExperiment",
    "ListedRun",
    "describe_status",
    "list_experiments",
    "list_runs",
    "read_experiment_record",
    "records_folder",
    "run_state",
    "runs_dir_of",
    "step_statuses",
]


@dataclasses.dataclass(frozen=True)
class ListedExperiment:
    """One file of `{prefix}/experiments/`: where it is and its record, or why it could not be read."""

    url: str
    record: ExperimentRecord | None
    """None when the file is damaged (then `damage` says why) or was removed while listing."""
    damage: str | None = None
    """The parser's reason, naming the field when one is wrong (e.g. that `steps` is not a list)."""

    @property
    def steps(self) -> list[Any]:
        """The record's step entries (objects, as written); none for a damaged record."""
        return self.record.steps if self.record is not None else []

    @property
    def created(self) -> str | None:
        return self.record.created if self.record is not None else None


def records_folder(prefix: str, output_paths: Sequence[str]) -> str:
    """Where a run's experiment record goes: `{prefix}/experiments` when any step lives under the
    prefix; when every step is pinned outside it (`override_output_path`), `experiments/` in the
    deepest folder that holds all their output folders, so that the record lies with its steps and
    not in a store none of them is in. Steps pinned with nothing in common but the root of the
    filesystem (or on different buckets or filesystems) keep the prefix's folder."""
    prefix = prefix.rstrip("/") or "/"
    under = prefix if prefix.endswith("/") else prefix + "/"
    if not output_paths or any(p == prefix or p.startswith(under) for p in output_paths):
        return experiments_dir(prefix)
    common = _common_parent(output_paths)
    return experiments_dir(prefix if common is None else common)


def _common_parent(paths: Sequence[str]) -> str | None:
    """The deepest folder holding every path's parent folder, or None when that is a filesystem root
    or the paths are on different filesystems or buckets."""
    protocols = {p.split("://", 1)[0] if "://" in p else "" for p in paths}
    if len(protocols) != 1:
        return None
    (protocol,) = protocols
    head = f"{protocol}://" if protocol else ""
    parents = [posixpath.dirname(p[len(head) :].rstrip("/")) for p in paths]
    if not protocol and not all(p.startswith("/") for p in parents):
        return None
    split = [[part for part in p.split("/") if part] for p in parents]
    common: list[str] = []
    for parts in zip(*split, strict=False):
        if any(part != parts[0] for part in parts):
            break
        common.append(parts[0])
    if not common:
        return None
    return head + ("/" if not protocol else "") + "/".join(common)


def list_experiments(prefix: str) -> list[ListedExperiment]:
    """Experiment records under `prefix`, newest first (by their `created`; damaged ones last)."""
    folder = experiments_dir(prefix)
    fs, path = fs_and_path(folder)
    try:
        names = sorted(p for p in fs.ls(path, detail=False) if p.endswith(".json"))
    except FileNotFoundError:
        return []
    protocol = folder.split("://", 1)[0] + "://" if "://" in folder else ""
    out = []
    for name in names:
        url = join(folder, name.rsplit("/", 1)[-1]) if protocol else name
        try:
            record = read_experiment_record(url)
        except RecordError as err:
            out.append(ListedExperiment(url, None, err.why if err.field is None else f"`{err.field}` {err.why}"))
            continue
        if record is None:
            out.append(ListedExperiment(url, None, "unreadable (FileNotFoundError: removed while listing)"))
        else:
            out.append(ListedExperiment(url, record))
    out.sort(key=lambda e: e.created or "", reverse=True)
    return out


def step_statuses(experiment: ExperimentRecord) -> list[tuple[dict[str, Any], str]]:
    """(step entry, its status) per step; an entry that names no step is CORRUPT, with `damage`
    saying which entry, and a damaged status file is CORRUPT with `damage` saying why."""
    result = []
    for i, step in enumerate(experiment.steps):
        if not isinstance(step, dict) or not isinstance(step.get("output_path"), str):
            entry = {"identity": f"steps[{i}]", "damage": f"steps[{i}] has no output_path"}
            result.append((entry, CORRUPT))
            continue
        st = listed_status(step["output_path"])
        if "damage" in st:
            step = {**step, "damage": st["damage"]}
        gone = running_driver_gone(step["output_path"], st)
        if gone:  # RUNNING, but nobody runs it: `RUNNING, driver gone since T`
            step = {**step, "driver_gone_since": gone}
        if st.get("status") == "WAITING" and isinstance(st.get("waiting_for"), str):
            step = {**step, "waiting_for": st["waiting_for"]}  # submitted, queued for resources
        result.append((step, str(st.get("status", MISSING))))
    return result


def runs_dir_of(experiment_url: str) -> str:
    """`{experiments}/{script}-{hash8}/runs` for the experiment record `{script}-{hash8}.json`."""
    base = experiment_url[: -len(".json")] if experiment_url.endswith(".json") else experiment_url
    return join(base, RUNS_DIR)


@dataclasses.dataclass(frozen=True)
class ListedRun:
    """One file of an experiment's `runs/` folder: its record, or why it could not be read."""

    url: str
    record: RunDoc | None
    damage: str | None = None


def list_runs(experiment_url: str, limit: int = 200) -> list[ListedRun]:
    """The run records of an experiment (`store.run_record`), newest first, at most `limit`. An
    experiment recorded before run records existed has none."""
    folder = runs_dir_of(experiment_url)
    fs, path = fs_and_path(folder)
    try:
        names = sorted(
            (p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False) if p.endswith(".json")), reverse=True
        )[:limit]
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for name in names:
        url = join(folder, name)
        try:
            raw = read_file(url)
            if raw is not None:
                out.append(ListedRun(url, parse_run_record(raw, url)))
        except OSError as err:
            out.append(ListedRun(url, None, f"unreadable ({type(err).__name__})"))
        except RecordError as err:
            out.append(ListedRun(url, None, err.why))
    return out


def describe_status(step: dict[str, Any], status: str) -> str:
    """A step's status as listings show it: `RUNNING, driver gone since T` for an orphan."""
    gone = step.get("driver_gone_since")
    return f"{status}, {DRIVER_GONE} since {gone}" if gone and status == "RUNNING" else status


def run_state(run: RunDoc) -> str:
    """A run record's outcome as readers show it: `running, driver gone` for a run whose driver
    died without finishing its record (judged on the driver's own host only)."""
    outcome = run.outcome or "?"
    if outcome == "running" and provably_gone(run.process):
        return f"running, {DRIVER_GONE}"
    return outcome
