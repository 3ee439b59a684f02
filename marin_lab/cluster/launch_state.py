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

from marin_lab.io.fs import write_json
from marin_lab.store.launch_record import LaunchRecordDamage, parse_launch_record
from marin_lab.store.layout import LAUNCH_RECORD_FILE, LAUNCHES_DIR, launch_dir, launch_log_url, launch_record_url
from marin_lab.store.reader import read_file

LAUNCHES = LAUNCHES_DIR
STATE_FILE = LAUNCH_RECORD_FILE
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


# The names are the store's (marin_lab.store.layout).
run_folder = launch_dir
state_url = launch_record_url
attempt_log_url = launch_log_url


class LaunchRecordError(ValueError):
    """A launch.json that cannot be read as a run's record (torn, or fields of the wrong type)."""


def read_state(prefix: str, run_id: str) -> dict[str, Any] | None:
    """The run's record (`store.launch_record` parses it); None when there is none;
    `LaunchRecordError` (one line) when it is damaged."""
    url = state_url(prefix, run_id)
    raw = read_file(url)
    if raw is None:
        return None
    try:
        return parse_launch_record(raw, url, run_id)
    except LaunchRecordDamage as err:
        raise LaunchRecordError(str(err)) from None


def write_state(prefix: str, state: dict[str, Any]) -> None:
    state["updated"] = now_iso()
    write_json(state_url(prefix, state["run_id"]), state)


def summary_lines(state: dict[str, Any]) -> list[str]:
    """`launch --status`: the run, then one line per driver attempt."""
    restarts = max(len(state.get("attempts", [])) - 1, 0)
    lines = [
        f"{state['run_id']}: {state.get('status', '?')} ({state.get('script', '?')}; "
        f"{restarts} restart(s) of {state.get('max_restarts', '?')} allowed)"
    ]
    if state.get("message"):
        lines.append(f"  {state['message']}")
    for a in state.get("attempts", []):
        end = a.get("ended") or "..."
        where = f" on {a['node']}" if a.get("node") else ""
        reason = f": {a['reason']}" if a.get("reason") else ""
        lines.append(
            f"  attempt {a['attempt']}: {a.get('outcome', '?')}{where} {a.get('started', '?')} -> {end}{reason}"
        )
    return lines
