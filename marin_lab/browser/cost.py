"""An experiment's cost for the browser: each step's, the sum, and what its latest run saved by reuse.

The numbers and their text come from execution/review/cost.py, as `marin-lab status --cost` prints them;
only the reading differs: records are read here through the browser's confined storage.
"""

from __future__ import annotations

from typing import Any

from marin_lab.browser.errors import BadRequestError, NotFoundError
from marin_lab.browser.records import _EXPERIMENT_ID, Browser, _step_key, _steps_of, load_experiment
from marin_lab.browser.storage import child, load_json, parallel_map
from marin_lab.execution.errors import RecordError
from marin_lab.execution.review import cost
from marin_lab.store.layout import EXPERIMENTS_DIR, INFO_FILE
from marin_lab.store.step_record import StepRecord


def _record(browser: Browser, step_dir: str | None) -> StepRecord | None:
    if step_dir is None:
        return None
    loaded = load_json(browser.roots, child(step_dir, INFO_FILE))
    if loaded.state != "ok":
        return None
    try:
        return StepRecord.from_json(loaded.value, loaded.url)
    except RecordError:  # damaged: its cost is unknown, as the step page says why
        return None


def experiment_cost(browser: Browser, exp_id: str) -> dict[str, Any]:
    """`/api/experiments/{id}/cost`: per step (by key, in the experiment's order) and in total."""
    if not _EXPERIMENT_ID.fullmatch(exp_id or ""):
        raise BadRequestError(f"experiment id {exp_id!r} is not a file name under experiments/")
    loaded = load_experiment(browser.roots, child(browser.prefix, EXPERIMENTS_DIR, f"{exp_id}.json"))
    if loaded.state == "missing":
        raise NotFoundError(f"no experiment {exp_id!r} under {browser.prefix}/experiments/")
    out: dict[str, Any] = {"id": exp_id, "prices": browser.prices.describe(), **loaded.as_json()}
    if loaded.state != "ok":
        return {**out, "steps": [], "totals": None, "text": None}
    steps = _steps_of(loaded.value)
    records = parallel_map(lambda s: _record(browser, browser.step_dir(s)), steps, local=browser.local)
    driver = loaded.value.get("driver")
    summary = cost.experiment_cost(
        driver if isinstance(driver, str) else None,
        [(str(s.get("identity", "?")), r) for s, r in zip(steps, records, strict=True)],
        browser.prices,
    )
    rows = summary.to_json()
    for row, step in zip(rows["steps"], steps, strict=True):
        row["key"] = _step_key(step)
    return {**out, **rows}
