"""A launched run's record (`layout.LAUNCH_RECORD_FILE`, `{prefix}/launches/{run_id}/launch.json`),
one parser for `marin-lab launch --status/--follow` and the browser.

The supervisor rewrites it at each change (`marin_lab.cluster.launch_state`). A sound record is a
JSON object with a text `run_id`, `attempts` a list of objects each with an integer `attempt`,
`status`/`script`/`message` text and `max_restarts` an integer when present. Damage is one line
naming the file and the run.
"""

from __future__ import annotations

import json
from typing import Any

from marin_lab.store.errors import RecordError


class LaunchRecordDamage(RecordError):
    """A launch.json that cannot be read as a run's record (torn, or fields of the wrong type)."""

    def __init__(self, url: str, message: str):
        super().__init__(url, message)
        self.args = (message,)

    def __str__(self) -> str:
        return str(self.args[0])


def launch_record_damage(state: Any) -> str | None:
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
    restarts = state.get("max_restarts")
    if "max_restarts" in state and (not isinstance(restarts, int) or isinstance(restarts, bool)):
        return "`max_restarts` is not an integer"
    return None


def parse_launch_record(raw: bytes, url: str, run_id: str) -> dict[str, Any]:
    """The record of run `run_id` from its bytes; raises LaunchRecordDamage (one line naming
    `url`) when it is damaged."""
    try:
        state = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise LaunchRecordDamage(
            url,
            f"{url}: the record of run {run_id} is not valid JSON ({err}); it is "
            "damaged (a write cut short?): a running supervisor rewrites it at its next "
            "change",
        ) from None
    why = launch_record_damage(state)
    if why:
        raise LaunchRecordDamage(url, f"{url}: the record of run {run_id} is damaged: {why}")
    return state
