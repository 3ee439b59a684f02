"""The evaluation pages' API: leaderboard, paired comparison, samples, and scores during training.

Every number comes from marin_lab.evaluation's runs, tables and samples (what `marin-lab evals`
prints from), so a page shows what the command prints; the page formats nothing itself but dates.
Those readers are given the browser's roots, so it reads every results.json, samples file and record through the
same confined reader as every other page (`marin_lab.io.confined`): only evaluations inside the
roots are listed (an experiment record may name an output elsewhere), a file linked out of them is
never read, and a named pipe is refused from its stat. A run is named by its key (its path under
the prefix), never by a free path.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from marin_lab.browser.errors import BadRequestError, ForbiddenPathError, NotFoundError
from marin_lab.browser.metrics import read_metrics
from marin_lab.browser.records import Browser, read_listed_experiment
from marin_lab.browser.storage import child, file_info
from marin_lab.evaluation import results as R
from marin_lab.evaluation import samples as S
from marin_lab.evaluation import tables
from marin_lab.io.fs import join
from marin_lab.store.layout import EXPERIMENTS_DIR, METRICS_FILE, RESULTS_FILE

MAX_TRAINING_RUNS = 50
MAX_SERIES_PER_RUN = 32
EVAL_KEY = re.compile(r"^eval/(?P<task>[^/]+)/(?P<metric>.+)$")


_CACHE_S = 5.0
_cache: dict[str, tuple[float, list[R.EvalRun]]] = {}
_cache_lock = threading.Lock()


def _runs(b: Browser) -> list[R.EvalRun]:
    """The evaluations under the prefix, inside the roots; read again when older than a few seconds
    (the sample viewer's pages and a compare ask for them in quick succession)."""
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(b.prefix)
    if hit is not None and now - hit[0] < _CACHE_S:
        return hit[1]
    runs = R.find_eval_runs(b.prefix, b.roots)
    with _cache_lock:
        _cache[b.prefix] = (now, runs)
    return runs


def _run(runs: list[R.EvalRun], key: str | None, what: str) -> R.EvalRun:
    if not key:
        raise BadRequestError(f"{what}= is missing: give an evaluation's path under the prefix")
    try:
        return R.resolve_run(runs, key)
    except R.EvalResultsError as err:
        raise NotFoundError(str(err)) from None


def _bad(fn: Any, *args: Any, **kw: Any) -> Any:
    try:
        return fn(*args, **kw)
    except R.EvalResultsError as err:
        raise BadRequestError(str(err)) from None


def leaderboard(b: Browser, tasks: str | None, metric: str | None, rank_on: str | None) -> dict[str, Any]:
    runs = _runs(b)
    board = _bad(tables.leaderboard, runs, tasks, metric, rank_on)
    out = tables.leaderboard_json(board)
    out["rank_rule"] = tables.rank_rule(board)
    out["legend"] = tables.LEGEND + (
        "; a cell is coloured only where its interval lies wholly above (green) or below (red) another "
        "model's on the same task, never for a gap within noise"
    )
    out["prefix"] = b.prefix
    if not runs:
        out["empty"] = f"no evaluation (a step folder with results.json) under {b.prefix}"
    return out


def _confined_samples(b: Browser, *runs: R.EvalRun) -> None:
    """Refuse (403) when a samples file the answer would read resolves outside the roots (a symlink)
    or is no regular file (a named pipe): the answer would be built on a file the browser will not
    read. A missing one is a note in the answer."""
    for run in runs:
        for task in run.tasks:
            _readable(b, R.samples_url(run, task), f"{run.key}: the samples file of {task}")


def _readable(b: Browser, url: str, what: str) -> None:
    """Raise the 403 `url` earns when it may not be read (a link out of the roots, a named pipe);
    a missing file passes."""
    try:
        file_info(b.roots, url)
    except NotFoundError:
        return
    except ForbiddenPathError as err:
        raise type(err)(f"{what}: {err}") from None


def compare(b: Browser, a: str | None, bb: str | None, tasks: str | None, metric: str | None) -> dict[str, Any]:
    runs = _runs(b)
    ra, rb = _run(runs, a, "a"), _run(runs, bb, "b")
    _confined_samples(b, ra, rb)
    return _bad(tables.compare, ra, rb, tasks, metric)


def samples(
    b: Browser,
    run: str | None,
    task: str | None,
    show: str,
    other: str | None,
    cursor: int | None,
    limit: int,
    metric: str | None,
) -> dict[str, Any]:
    runs = _runs(b)
    r = _run(runs, run, "run")
    if not task:
        raise BadRequestError("task= is missing")
    o = _run(runs, other, "other") if other else None
    _confined_samples(b, *([r, o] if o is not None else [r]))
    page = _bad(S.read_samples, r, task, cursor=cursor or 0, limit=limit, show=show, other=o, metric=metric)
    page["run"] = {"key": r.key, "label": r.label, "path": r.path}
    if o is not None:
        page["other"] = {"key": o.key, "label": o.label}
    return page


def training(b: Browser, tasks: str | None) -> dict[str, Any]:
    """`eval/{task}/{metric}` series of every training run under the prefix that logged any, with
    their intervals (`bounds`) where the run logged `eval/{task}/{metric}_low` and `_high`."""
    pattern = _bad(tables.task_filter, tasks)
    paths: dict[str, str | None] = {}
    for run in _runs(b):
        if run.train_path:
            paths.setdefault(run.train_path.rstrip("/"), run.model)
    for entry in b.experiment_files():
        exp = read_listed_experiment(b.roots, child(b.prefix, EXPERIMENTS_DIR, entry["name"]))
        for step in exp.steps if exp is not None else []:
            if isinstance(step, dict) and isinstance(step.get("output_path"), str):
                paths.setdefault(
                    step["output_path"].rstrip("/"), step.get("name") if isinstance(step.get("name"), str) else None
                )
    out: list[dict[str, Any]] = []
    notes = []
    for path, name in sorted(paths.items()):
        if len(out) >= MAX_TRAINING_RUNS:
            notes.append(f"only the first {MAX_TRAINING_RUNS} training runs are shown")
            break
        if not b.roots.contains(path):
            continue
        first = read_metrics(b.roots, path)
        if first.get("state") != "ok":
            continue
        keys = [
            k
            for k in first.get("keys", [])
            if (m := EVAL_KEY.match(k)) and (pattern is None or pattern.search(m["task"]))
        ]
        if not keys:
            continue
        # eval/<task>/<metric>_low and _high are the interval of eval/<task>/<metric>: bounds, not series.
        bounded = [k for k in keys if not (k.endswith(("_low", "_high")) and k.rsplit("_", 1)[0] in keys)]
        series: dict[str, Any] = {}
        bounds: dict[str, dict[str, Any]] = {}
        for key in bounded[:MAX_SERIES_PER_RUN]:
            series[key] = read_metrics(b.roots, path, key).get("series", {}).get(key, [])
            for side in ("low", "high"):
                if f"{key}_{side}" in keys:
                    points = read_metrics(b.roots, path, f"{key}_{side}").get("series", {}).get(f"{key}_{side}", [])
                    bounds.setdefault(key, {})[side] = points
        if len(bounded) > MAX_SERIES_PER_RUN:
            notes.append(f"{path}: only {MAX_SERIES_PER_RUN} of its {len(bounded)} eval series")
        out.append(
            {
                "path": path,
                "name": name or path.rsplit("/", 1)[-1],
                "series": series,
                "bounds": bounds,
                "metrics_url": join(path, METRICS_FILE),
            }
        )
    return {"runs": out, "notes": notes}


def run_detail(b: Browser, path: str) -> dict[str, Any]:
    """The evaluation at a step folder (the step page's evaluation section); 403 when its results.json
    may not be read, as the file route answers for it."""
    folder = b.roots.resolve(path).rstrip("/")
    prefix = b.prefix.rstrip("/") + "/"
    key = folder[len(prefix) :] if folder.startswith(prefix) else folder
    _readable(b, join(folder, RESULTS_FILE), key)
    return tables.run_detail(R.load_run(folder, key, b.roots))
