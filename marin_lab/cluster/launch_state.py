"""The on-disk record of a launched run: `{prefix}/launches/{run_id}/`.

    launch.json        what was launched and every driver attempt, rewritten atomically by the
                       supervisor at each change (the one writer); read by `launch --status`,
                       `--follow` and the browser
    logs/attempt-1.log the driver's output of attempt 1 (stdout and stderr), rewritten while it runs
    logs/attempt-2.log ... (a step's log layout, so the browser's log view reads them)

The record lives under the prefix, not in the Ray cluster, so it outlives the cluster and the
terminal that launched the run, and the browser reads it with the prefix's other records.

Run states: STARTING, RUNNING (an attempt is running or waiting to be placed), SUCCEEDED,
FAILED (the experiment itself failed, or the restart budget is spent), STOPPED (by `--stop`).
Attempt outcomes: running, succeeded, failed (the driver exited with an error of its own), died
(killed by a signal, out of memory, or its node lost: restarted while the budget lasts), stopped.
"""

from __future__ import annotations

import datetime
from typing import Any

from marin_lab.io.fs import join, read_json_or_none, write_json

LAUNCHES = "launches"
STATE_FILE = "launch.json"
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


def run_folder(prefix: str, run_id: str) -> str:
    return join(prefix, LAUNCHES, run_id)


def state_url(prefix: str, run_id: str) -> str:
    return join(run_folder(prefix, run_id), STATE_FILE)


def attempt_log_url(prefix: str, run_id: str, attempt: int) -> str:
    return join(run_folder(prefix, run_id), "logs", f"attempt-{attempt}.log")


def read_state(prefix: str, run_id: str) -> dict[str, Any] | None:
    state = read_json_or_none(state_url(prefix, run_id))
    return state if isinstance(state, dict) else None


def write_state(prefix: str, state: dict[str, Any]) -> None:
    state["updated"] = now_iso()
    write_json(state_url(prefix, state["run_id"]), state)


def summary_lines(state: dict[str, Any]) -> list[str]:
    """`launch --status`: the run, then one line per driver attempt."""
    restarts = max(len(state.get("attempts", [])) - 1, 0)
    lines = [f"{state['run_id']}: {state.get('status', '?')} ({state.get('script', '?')}; "
             f"{restarts} restart(s) of {state.get('max_restarts', '?')} allowed)"]
    if state.get("message"):
        lines.append(f"  {state['message']}")
    for a in state.get("attempts", []):
        end = a.get("ended") or "..."
        where = f" on {a['node']}" if a.get("node") else ""
        reason = f": {a['reason']}" if a.get("reason") else ""
        lines.append(f"  attempt {a['attempt']}: {a.get('outcome', '?')}{where} {a.get('started', '?')} -> {end}"
                     f"{reason}")
    return lines
