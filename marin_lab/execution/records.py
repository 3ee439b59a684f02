"""Reading what the executor wrote: experiment files and step statuses under a prefix."""

from __future__ import annotations

from typing import Any

from marin_lab.execution.status import read_status
from marin_lab.io.fs import fs_and_path, join, read_json


def list_experiments(prefix: str) -> list[dict[str, Any]]:
    """Experiment records under `prefix`, newest first; each gets `_path` (its URL)."""
    folder = join(prefix.rstrip("/"), "experiments")
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
            record = read_json(url)
        except (ValueError, UnicodeDecodeError):
            record = {"created": "", "steps": [], "corrupt": True}
        record["_path"] = url
        out.append(record)
    out.sort(key=lambda r: str(r.get("created", "")), reverse=True)
    return out


def step_statuses(experiment: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    result = []
    for step in experiment.get("steps", []):
        st = read_status(step["output_path"])
        result.append((step, (st or {}).get("status", "NOT_STARTED")))
    return result

