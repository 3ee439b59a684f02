"""The store layout: `{prefix}/{name}-{hash8}/` per step, `{prefix}/experiments/*.json` per run.

A step's output folder holds its outputs and three record files: `.executor_status` (the latest
status), `.executor_info` (the step record, with the status history) and `.executor_lease` (the
one-writer lease). The status a listing shows is one of `Status`, or `MISSING` (no status recorded:
never started, or its folder is gone) or `CORRUPT` (a record that cannot be read, treated as not
done); `marin_lab.store.status` parses the status bytes, `marin_lab.store.step_record` the record.
"""

from __future__ import annotations

import enum
import os
import re

from marin_lab.io.fs import join

DEFAULT_PREFIX = "./marin_store"
"""Where outputs go when neither `--prefix` nor a non-empty `$MARIN_PREFIX` says otherwise."""

STATUS_FILE = ".executor_status"
INFO_FILE = ".executor_info"
LEASE_FILE = ".executor_lease"
RECORD_FILES = (STATUS_FILE, INFO_FILE, LEASE_FILE)

# Inside a step's output folder, beside the record files:
METRICS_FILE = "metrics.jsonl"
"""A training step's metrics, one JSON object a line (`marin_lab.training.metrics` writes it)."""
ARTIFACT_RECORD_FILE = ".artifact.json"
"""Beside a name@version artifact's output: Marin's artifact record (`marin_lab.marin.artifact`)."""
RESULTS_FILE = "results.json"
"""An evaluation step's results."""
BAD_SHARDS_FILE = ".bad_shards.json"
"""In a data step's output folder while the step is FAILED for bad shards: which shards, and why
(`marin_lab.processing.quarantine` writes it; `marin_lab.store.bad_shards` parses it)."""
TASK_ITEMS_FILE = "task_items.json"
"""An evaluation tasks' items step's output: each task's items as the evaluation reads them, or why
it has none (`marin_lab.evaluation.task_items` writes it; `marin_lab.store.contamination` parses it)."""
CONTAMINATION_FILE = "contamination.json"
"""A decontaminate step's report: per task the contaminated item ids, per document its matches, and
what could not be checked (`marin_lab.store.contamination` writes and parses it)."""
LOGS_DIR = "logs"
"""Each attempt's captured output: `logs/attempt-{n}.log` (`step_log_url`); a launched run's driver
logs sit in the same shape under its launch folder (`launch_log_url`)."""
ATTEMPT_LOG = re.compile(r"attempt-(\d+)\.log")
"""A log file's name under `logs/`; group 1 is the attempt number."""


def attempt_log_name(attempt: int | str) -> str:
    return f"attempt-{attempt}.log"


def step_log_url(output_path: str, attempt: int) -> str:
    """`{output}/logs/attempt-{n}.log`: what attempt `n` of a step printed."""
    return join(output_path, LOGS_DIR, attempt_log_name(attempt))


LAUNCHES_DIR = "launches"
"""The folder under a prefix holding one folder per launched run (`marin-lab launch`)."""
LAUNCH_RECORD_FILE = "launch.json"
"""A launched run's record: its driver attempts and outcome (`marin_lab.cluster.launch_state`)."""


def launch_dir(prefix: str, run_id: str) -> str:
    """`{prefix}/launches/{run_id}`."""
    return join(prefix, LAUNCHES_DIR, run_id)


def launch_record_url(prefix: str, run_id: str) -> str:
    """`{prefix}/launches/{run_id}/launch.json`."""
    return join(launch_dir(prefix, run_id), LAUNCH_RECORD_FILE)


def launch_log_url(prefix: str, run_id: str, attempt: int | str) -> str:
    """`{prefix}/launches/{run_id}/logs/attempt-{n}.log`: driver attempt `n`'s output."""
    return join(launch_dir(prefix, run_id), LOGS_DIR, attempt_log_name(attempt))


EXPERIMENTS_DIR = "experiments"
"""The folder under a prefix that holds one record per experiment run (`{script}-{hash8}.json`)."""


class Status(str, enum.Enum):  # noqa: UP042 (a StrEnum's str() and format() differ from these)
    """Every status the executor writes: to `.executor_status`, to the step record's `status`,
    `status_history` and `attempts`, and as a step's outcome in a run (`StepOutcome.status`).
    Marin's outputs use the same words. The readers' own two, MISSING and CORRUPT, are below."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    DEP_FAILED = "DEP_FAILED"
    CANCELLED = "CANCELLED"
    """Stopped by an interrupt (Ctrl-C, SIGTERM): not a failure; the next run runs it again."""
    LOST = "LOST"
    """Never in `.executor_status`: an attempt whose driver died (the step record's `attempts` and
    `status_history`, written by the driver that takes it over), and a run's outcome for a step
    whose lease another driver took (this driver wrote nothing)."""


MISSING = "MISSING"
"""The status a listing shows for a step with no status file and no step record (never started,
or its folder is gone). Never written."""

CORRUPT = "CORRUPT"
"""The status of a step whose records are damaged: shown as such, and treated as not done. Never
written."""

SHOWN = (*(s.value for s in Status if s is not Status.LOST), MISSING, CORRUPT)
"""Every status a listing can show for a step (`marin-lab status`, the browser's badges)."""


def default_prefix(explicit: str | None = None) -> str:
    """The prefix to use: `explicit` if given, else `$MARIN_PREFIX` if set and not empty, else
    `marin_store` at the project root (`project_store`). Every command line (experiments, `marin-lab`,
    the browser) resolves it here."""
    return explicit or os.environ.get("MARIN_PREFIX") or project_store()


def project_store(start: str | None = None) -> str:
    """`marin_store` at the root of the project the working folder is in (the nearest folder up
    with a pyproject.toml or .git), else in the working folder; always absolute, so running from a
    subfolder such as experiments/ finds the same outputs as running from the root."""
    here = os.path.abspath(start or os.getcwd())
    folder = here
    while True:
        if any(os.path.exists(os.path.join(folder, mark)) for mark in ("pyproject.toml", ".git")):
            return os.path.join(folder, "marin_store")
        parent = os.path.dirname(folder)
        if parent == folder:
            return os.path.join(here, "marin_store")
        folder = parent


def status_url(output_path: str) -> str:
    return join(output_path, STATUS_FILE)


def info_url(output_path: str) -> str:
    return join(output_path, INFO_FILE)


def experiments_dir(prefix: str) -> str:
    return join(prefix.rstrip("/"), EXPERIMENTS_DIR)


def experiment_record_url(prefix: str, file_name: str) -> str:
    """`{prefix}/experiments/{file_name}`; `file_name` is `{script}-{hash8}.json`."""
    return join(experiments_dir(prefix), file_name)


RUNS_DIR = "runs"
"""Beside an experiment's record `{script}-{hash8}.json` (its latest run, kept for compatibility),
the folder `{script}-{hash8}/runs/` keeps one record per run: `{started}-{run id}.json`."""


def experiment_runs_dir(prefix: str, experiment_id: str) -> str:
    """`{prefix}/experiments/{experiment_id}/runs`, where `experiment_id` is `{script}-{hash8}`."""
    return join(experiments_dir(prefix), experiment_id, RUNS_DIR)


def run_record_name(started: str, run_id: str) -> str:
    """A run record's file name: its start time (sortable, no colons) and its id."""
    stamp = "".join(c for c in started[:19] if c.isalnum())  # 2026-01-02T03:04:05 -> 20260102T030405
    return f"{stamp}-{run_id}.json"


TMP_DIR = "tmp"
"""The scratch area under a prefix: temporary outputs that `marin-lab gc` expires by default."""


def tmp_path(name: str) -> str:
    """`tmp/{name}`: a scratch location relative to the prefix, e.g. a step's `override_output_path`
    (the planner puts it under the run's prefix). `marin-lab gc` deletes it once it is older than
    its limit (default 14 days), unless a live lease below it says a step still writes there."""
    parts = name.strip("/").split("/") if isinstance(name, str) else []
    if not parts or not all(parts) or any(p in (".", "..") for p in parts) or "://" in name or name.startswith("/"):
        raise ValueError(
            f"tmp_path({name!r}): give a relative name such as 'lr-probe/run-1' (no '..', no "
            "leading '/', no URL); it is placed under {prefix}/tmp/"
        )
    return f"{TMP_DIR}/{'/'.join(parts)}"


def tmp_url(prefix: str, name: str) -> str:
    """`{prefix}/tmp/{name}` (see `tmp_path`)."""
    return join(prefix.rstrip("/"), tmp_path(name))
