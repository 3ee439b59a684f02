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
        except (ValueError, UnicodeDecodeError, RecursionError, OSError) as err:
            record = {"corrupt": f"unreadable ({type(err).__name__}: {err})"}
        if not isinstance(record, dict):
            record = {"corrupt": "not a JSON object"}
        elif "corrupt" not in record and not isinstance(record.get("steps"), list):
            record["corrupt"] = "`steps` is not a list"
        record["_path"] = url
        out.append(record)
    out.sort(key=lambda r: str(r.get("created", "")), reverse=True)
    return out


def step_statuses(experiment: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """(step entry, its status) per step; an entry that names no step is CORRUPT, with `damage`
    saying which entry, and a damaged status file is CORRUPT with `damage` saying why."""
    result = []
    steps = experiment.get("steps")
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        if not isinstance(step, dict) or not isinstance(step.get("output_path"), str):
            entry = {"identity": f"steps[{i}]", "damage": f"steps[{i}] has no output_path"}
            result.append((entry, "CORRUPT"))
            continue
        st = read_status(step["output_path"]) or {}
        if "damage" in st:
            step = {**step, "damage": st["damage"]}
        result.append((step, str(st.get("status", "NOT_STARTED"))))
    return result

