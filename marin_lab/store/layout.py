"""The store layout: `{prefix}/{name}-{hash8}/` per step, `{prefix}/experiments/*.json` per run.

A step's output folder holds its outputs and three record files: `.executor_status` (the latest
status), `.executor_info` (the step record, with the status history) and `.executor_lease` (the
one-writer lease). The status a listing shows is one of `Status`, or `MISSING` (no status recorded:
never started, or its folder is gone) or `CORRUPT` (a record that cannot be read, treated as not
done).
"""

from __future__ import annotations

import enum
import os

from marin_lab.io.fs import join

DEFAULT_PREFIX = "./marin_store"
"""Where outputs go when neither `--prefix` nor a non-empty `$MARIN_PREFIX` says otherwise."""

STATUS_FILE = ".executor_status"
INFO_FILE = ".executor_info"
LEASE_FILE = ".executor_lease"
RECORD_FILES = (STATUS_FILE, INFO_FILE, LEASE_FILE)

EXPERIMENTS_DIR = "experiments"
"""The folder under a prefix that holds one record per experiment run (`{script}-{hash8}.json`)."""


class Status(str, enum.Enum):
    """What the executor writes to `.executor_status`."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    DEP_FAILED = "DEP_FAILED"


MISSING = "MISSING"
"""The status a listing shows for a step with no status file (never started, or its folder is gone)."""

CORRUPT = "CORRUPT"
"""The status of a step whose records are damaged: shown as such, and treated as not done."""


def default_prefix(explicit: str | None = None) -> str:
    """The prefix to use: `explicit` if given, else `$MARIN_PREFIX` if set and not empty, else
    `./marin_store`. Every command line (experiments, `marin-lab`, the browser) resolves it here."""
    return explicit or os.environ.get("MARIN_PREFIX") or DEFAULT_PREFIX


def status_url(output_path: str) -> str:
    return join(output_path, STATUS_FILE)


def info_url(output_path: str) -> str:
    return join(output_path, INFO_FILE)


def experiments_dir(prefix: str) -> str:
    return join(prefix.rstrip("/"), EXPERIMENTS_DIR)


def experiment_record_url(prefix: str, file_name: str) -> str:
    """`{prefix}/experiments/{file_name}`; `file_name` is `{script}-{hash8}.json`."""
    return join(experiments_dir(prefix), file_name)
