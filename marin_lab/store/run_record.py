"""A run record (`{experiments}/{script}-{hash8}/runs/{started}-{run id}.json`) as a type, with one parser.

`execution/run/run_history.py` writes one per run of an experiment, at its start and again at its
end, through `RunDoc.to_json()`; `marin-lab status` (`execution/record/experiments.list_runs`) and
the browser's experiment page parse it with `parse_run_record`:

    {"schema": 1, "run": id, "experiment": "{script}-{hash8}", "started": T, "ended": T | null,
     "outcome": "running" | "succeeded" | "failed" | "interrupted" | "error",
     "command_line": [...], "driver": ..., "backend": ..., "script": ..., "git": {...},
     "process": {"host": ..., "pid": ..., "pid_start": ...},
     "counts": {"executed": n, "reused": n, ...},
     "steps": [{"identity": ..., "name": ..., "decision": "run" | "skip" | ..., "reason": ..., "outcome": ...}]}

Damage (not UTF-8, not JSON, not an object) is one `RecordError` naming the file. A known field of
the wrong type is read as absent (kept in `extra`), and a step entry that is not an object is left
out: a run's history is informative, so what can be shown is shown.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from marin_lab.store.errors import RecordError

SCHEMA = 1

_LAYOUT: tuple[tuple[str, tuple[type, ...]], ...] = (
    ("schema", (int,)),
    ("run", (str,)),
    ("experiment", (str,)),
    ("started", (str,)),
    ("ended", (str,)),
    ("outcome", (str,)),
    ("command_line", (list,)),
    ("driver", (str,)),
    ("backend", (str,)),
    ("script", (str,)),
    ("git", (dict,)),
    ("process", (dict,)),
    ("counts", (dict,)),
    ("steps", (list,)),
)


@dataclasses.dataclass
class RunDoc:
    """One run of an experiment: when, how it was started, and what it did with each step."""

    run: str | None = None
    experiment: str | None = None
    started: str | None = None
    ended: str | None = None
    """None while the run goes on (or its driver died)."""
    outcome: str | None = "running"
    command_line: list[Any] | None = None
    driver: str | None = None
    backend: str | None = None
    script: str | None = None
    git: dict[str, Any] | None = None
    process: dict[str, Any] | None = None
    """The driver's host, pid and pid start time: whether it is provably gone (`state.lease`)."""
    counts: dict[str, Any] = dataclasses.field(default_factory=dict)
    """How many steps had each outcome (written at the end)."""
    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    schema: int | None = SCHEMA
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Fields this version does not know (or of the wrong type), kept as they were."""

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key, _ in _LAYOUT} | self.extra

    @property
    def executed(self) -> list[str | None]:
        """The identities of the steps this run ran to SUCCESS."""
        return [_text(s.get("identity")) for s in self.steps if s.get("outcome") == "executed"]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def parse_run_record(raw: bytes, url: str) -> RunDoc:
    """A run record from its bytes; raises RecordError naming `url` when it is damaged."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise RecordError(url, f"unreadable (UnicodeDecodeError: not UTF-8 at byte {err.start})") from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise RecordError(url, f"unreadable ({type(err).__name__}: not valid JSON)") from None
    if not isinstance(data, dict):
        raise RecordError(url, f"is {type(data).__name__}, not a JSON object")
    known = {k for k, _ in _LAYOUT}
    extra = {k: v for k, v in data.items() if k not in known}
    kwargs: dict[str, Any] = {}
    for key, types in _LAYOUT:
        value = data.get(key)
        if key in data and (value is None or (isinstance(value, types) and not isinstance(value, bool))):
            kwargs[key] = value
        elif key in data:
            extra[key] = value
    kwargs["counts"] = kwargs.get("counts") or {}
    kwargs["steps"] = [s for s in kwargs.get("steps") or [] if isinstance(s, dict)]
    kwargs.setdefault("outcome", None)
    kwargs.setdefault("schema", None)
    return RunDoc(**kwargs, extra=extra)
