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

from marin_lab.io.fs import read_json_or_none, write_json
from marin_lab.store.layout import LAUNCH_RECORD_FILE, LAUNCHES_DIR, launch_dir, launch_log_url, launch_record_url

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
    """The run's record; None when there is none; `LaunchRecordError` (one line) when it is damaged."""
    url = state_url(prefix, run_id)
    try:
        state = read_json_or_none(url)
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise LaunchRecordError(f"{url}: the record of run {run_id} is not valid JSON ({err}); it is damaged (a "
                                "write cut short?): a running supervisor rewrites it at its next change") from None
    if state is None:
        return None
    why = damage(state)
    if why:
        raise LaunchRecordError(f"{url}: the record of run {run_id} is damaged: {why}")
    return state


def damage(state: Any) -> str | None:
    """What makes `state` unusable as a run's record (None when it is sound)."""
    if not isinstance(state, dict):
        return f"expected a JSON object, found {type(state).__name__}"
    if not isinstance(state.get("run_id"), str):
        return "`run_id` is not text"
    attempts = state.get("attempts", [])
    if not isinstance(attempts, list):
        return "`attempts` is not a list"
    for i, a in enumerate(attempts):
        if not isinstance(a, dict) or not isinstance(a.get("attempt"), int) or isinstance(a.get("attempt"), bool):
            return f"attempts[{i}] is not an object with an integer `attempt`"
    for key in ("status", "script", "message"):
        if key in state and not isinstance(state[key], str | None):
            return f"`{key}` is not text"
    if "max_restarts" in state and (not isinstance(state["max_restarts"], int)
                                    or isinstance(state["max_restarts"], bool)):
        return "`max_restarts` is not an integer"
    return None


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
