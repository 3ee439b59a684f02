"""The tables of evaluations: the leaderboard, the paired comparison of two runs, one run's detail.

`marin-lab evals` prints them and the browser's pages show them, from the same runs
(`evaluation.results`) and the same numbers and strings (`evaluation.stats`):

- `leaderboard`: rows (runs) x columns (tasks), ranked on the mean 95% lower bound; each column one
  metric for every row (`stats.primary_metric` over the rows', or `--metric`), its split where not
  the task's default, and its chance level; each cell says whether its interval lies wholly above or
  below another row's (`separation`, what the browser colours) and whether it is at chance;
- `compare`: per task both runs scored, the paired difference over the items both scored (joined
  on doc_id, `evaluation.samples.item_values`), and one verdict; a task whose items do not pair
  (another split, n-shot or data source, or doc_ids naming other documents) gets no verdict;
- `run_detail`: one run as its step page shows it.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from marin_lab.evaluation import stats
from marin_lab.evaluation.results import EvalResultsError, EvalRun, TaskResult
from marin_lab.evaluation.samples import chance_from_samples, item_values
from marin_lab.evaluation.stats import fmt_cell, fmt_diff

LEGEND = (
    "values in points (percent) for accuracies, with the 95% interval (Wilson for right/wrong metrics, "
    "lm-eval's stderr otherwise); each column names its metric, the split scored where it is not the "
    "task's default (papers quote the default), and its chance level (1 / the number of choices); "
    "at chance: the interval reaches it; "
    "* a seeded random sample of the task's items, ^ its first N items only (not a sample), ! coverage "
    f"below {stats.COVERAGE_FLOOR:.0%}"
)
"""What the marks and columns of a leaderboard mean, printed under it by `marin-lab evals` and the browser."""


def task_filter(regex: str | None, flag: str = "--tasks") -> re.Pattern[str] | None:
    if not regex:
        return None
    try:
        return re.compile(regex)
    except (re.error, OverflowError, RecursionError) as err:  # `a{99999999999}` overflows, not re.error
        raise EvalResultsError(f"{flag} {regex!r} is not a regular expression: {err}") from None


def fill_chance(run: EvalRun) -> EvalRun:
    """The run with each task's chance level: as recorded, else from its samples file (results
    written before results.json recorded it)."""
    for name, tr in run.tasks.items():
        if not tr.chance_recorded and tr.status == "ok":
            tr.chance = chance_from_samples(run, name)
            tr.chance_recorded = True
    return run


def run_detail(run: EvalRun) -> dict[str, Any]:
    """One evaluation as its step page shows it: the run, and per task its shown cell and every metric."""
    fill_chance(run)
    tasks = {}
    for name, tr in sorted(run.tasks.items()):
        tasks[name] = {
            "cell": tr.cell(),
            "line": tr.line(),
            "chance": tr.chance,
            "limit_mode": tr.limit_mode,
            "total_items": tr.total_items,
            "split": tr.split,
            "default_split": tr.default_split,
            "num_fewshot": tr.num_fewshot,
            "limit": tr.limit,
            "attempted": tr.attempted,
            "scored": tr.scored,
            "metrics": {m: {**c, "text": fmt_cell({**c, "metric": m})} for m, c in sorted(tr.metrics.items())},
        }
    return {"run": run.to_json(), "tasks": tasks}


def leaderboard(
    runs: list[EvalRun], tasks_regex: str | None = None, metric: str | None = None, rank_on: str | None = None
) -> dict[str, Any]:
    """Rows (one per evaluation with results) x columns (tasks), ranked on the lower bound.

    The rank tasks are those `rank_on` (a regex) names, else the shown tasks that the most rows have
    with an interval. A row's score is the mean of its 95% lower bounds over the rank tasks; rows
    lacking one of them rank below the rest, by the mean lower bound of the tasks they have.
    """
    pattern = task_filter(tasks_regex)
    rank_pattern = task_filter(rank_on, "--rank_on")
    known = sorted({name for run in runs for name in run.tasks})
    shown = [t for t in known if pattern is None or pattern.search(t)]
    if pattern is not None and known and not shown:
        close = difflib.get_close_matches(tasks_regex or "", known, n=3, cutoff=0.5)
        raise EvalResultsError(
            f"--tasks {tasks_regex!r} matches no evaluated task"
            + (f" (closest: {', '.join(close)})" if close else "")
            + f"; the tasks are {', '.join(known[:20])}"
        )
    columns = {t: _column(t, [r.tasks[t] for r in runs if t in r.tasks], metric) for t in shown}
    rows: list[dict[str, Any]] = []
    for run in runs:
        fill_chance(run)
        cells = {}
        for name, tr in run.tasks.items():
            if name in columns:
                cells[name] = tr.cell(columns[name]["metric"]) if columns[name]["metric"] else tr.cell()
        rows.append({"run": run, "cells": cells})
    for t, col in columns.items():
        chances = {r["cells"][t]["chance"] for r in rows if r["cells"].get(t) and r["cells"][t].get("chance")}
        col["chance"] = chances.pop() if len(chances) == 1 else None
        column_cells = [r["cells"].get(t) for r in rows]
        for c in column_cells:
            if c is not None:
                c["separation"] = stats.separation(c, column_cells)
    tasks = shown
    held = {t: sum(1 for r in rows if r["cells"].get(t) and r["cells"][t].get("low") is not None) for t in tasks}
    if rank_pattern is not None:
        rank_tasks = [t for t in tasks if rank_pattern.search(t)]
    else:
        most = max(held.values(), default=0)
        rank_tasks = [t for t in tasks if most and held[t] == most]
    for r in rows:
        r["score"] = stats.mean_lower_bound([r["cells"].get(t) for t in rank_tasks]) if rank_tasks else None
        own = [c for c in r["cells"].values() if c and c.get("low") is not None]
        r["own_score"] = stats.mean_lower_bound(own) if own else None
    rows.sort(
        key=lambda r: (r["score"] is not None, r["score"] or 0.0, r["own_score"] is not None, r["own_score"] or 0.0),
        reverse=True,
    )
    for i, r in enumerate(rows):
        r["rank"] = i + 1
    return {"tasks": tasks, "columns": columns, "rank_tasks": rank_tasks, "rows": rows}


def _column(task: str, results: list[TaskResult], metric: str | None) -> dict[str, Any]:
    """A task's column: the one metric every row shows (`metric`, else the primary metric of the
    metrics the rows report), and the split(s) scored where not the task's default."""
    names: set[str] = set()
    for tr in results:
        names.update(tr.metrics)
    name = stats.primary_metric(names, metric) if names else metric
    splits = sorted({tr.split for tr in results if tr.split})
    defaults = sorted({tr.default_split for tr in results if tr.default_split})
    note = ""
    if len(splits) > 1:
        note = "splits " + " / ".join(splits) + " (not comparable)"
    elif splits and defaults and splits != defaults:
        note = f"split {splits[0]}"  # the legend says a split is named only where it is not the default
    return {"task": task, "metric": name, "splits": splits, "split_note": note, "chance": None}


def column_header(col: dict[str, Any]) -> list[str]:
    """A column's header lines: the task, its metric, its split where not the default, its chance level."""
    lines = [col["task"], col["metric"] or "-"]
    if col["split_note"]:
        lines.append(col["split_note"])
    if col.get("chance") is not None:
        lines.append(f"chance {stats.points(col['chance'])}")
    return lines


def leaderboard_json(board: dict[str, Any]) -> dict[str, Any]:
    return {
        "tasks": board["tasks"],
        "columns": [{**board["columns"][t], "header": column_header(board["columns"][t])} for t in board["tasks"]],
        "rank_tasks": board["rank_tasks"],
        "rank_rule": rank_rule(board),
        "rows": [
            {"rank": r["rank"], "score": r["score"], "run": r["run"].to_json(), "cells": r["cells"]}
            for r in board["rows"]
        ],
    }


def rank_rule(board: dict[str, Any]) -> str:
    if not board["rank_tasks"]:
        return "no task has an interval: rows are in path order"
    columns = board.get("columns", {})
    over = [f"{t} {columns[t]['metric']}" if t in columns else t for t in board["rank_tasks"]]
    return (
        "ranked on the mean of the 95% lower bounds of "
        + ", ".join(over)
        + "; rows without all of them follow, by the mean lower bound of the tasks they have"
    )


def unpaired_reason(ta: TaskResult, tb: TaskResult) -> str | None:
    """Why two runs' items of a task are not the same questions, from what each run recorded (another
    split, n-shot or copy of the data); None when nothing recorded says so."""
    differ = [
        f"{what} {x} vs {y}"
        for what, x, y in (
            ("split", ta.split, tb.split),
            ("n-shot", ta.num_fewshot, tb.num_fewshot),
            ("data source", ta.data_source, tb.data_source),
        )
        if x is not None and y is not None and x != y
    ]
    return "not the same items (" + ", ".join(differ) + ")" if differ else None


def _hash_mismatch(ha: dict[Any, str], hb: dict[Any, str]) -> str | None:
    """Why items joined on doc_id are other documents: their lm-eval `doc_hash` differs."""
    both = [k for k in ha if k in hb]
    other = sum(1 for k in both if ha[k] != hb[k])
    if not other:
        return None
    return f"not the same items ({other} of {len(both)} doc_ids name other documents: their doc_hash differs)"


def compare(
    run_a: EvalRun,
    run_b: EvalRun,
    tasks_regex: str | None = None,
    metric: str | None = None,
    max_disagreements: int = 50,
) -> dict[str, Any]:
    """Per task both runs scored: the paired difference b - a of the task's metric over the items
    both scored (joined on doc_id), its interval, a sentence; and the overall verdict over the tasks
    whose items pair. A task whose items do not pair (another split, n-shot or data source recorded,
    or doc_ids naming other documents) gets no number and no verdict: `paired` is False and
    `unpaired` says why."""
    pattern = task_filter(tasks_regex)
    out_tasks: dict[str, Any] = {}
    notes: list[str] = []
    common = sorted(set(run_a.tasks) & set(run_b.tasks))
    known = sorted(set(run_a.tasks) | set(run_b.tasks))
    if pattern is not None and known and not any(pattern.search(t) for t in known):
        close = difflib.get_close_matches(tasks_regex or "", known, n=3, cutoff=0.5)
        raise EvalResultsError(
            f"--tasks {tasks_regex!r} matches no task of the two runs"
            + (f" (closest: {', '.join(close)})" if close else "")
            + f"; their tasks are {', '.join(known[:20])}"
        )
    fill_chance(run_a)
    fill_chance(run_b)
    for only, run in ((set(run_a.tasks) - set(run_b.tasks), run_a), (set(run_b.tasks) - set(run_a.tasks), run_b)):
        if only:
            notes.append(f"only {run.key} has {', '.join(sorted(only))}: not compared")
    for task in common:
        if pattern is not None and not pattern.search(task):
            continue
        ta, tb = run_a.tasks[task], run_b.tasks[task]
        name = ta.primary(metric) or tb.primary(metric)
        if name is None or name not in tb.metrics:
            notes.append(f"{task}: no metric both runs report")
            continue
        ca, cb = ta.cell(name), tb.cell(name)
        entry: dict[str, Any] = {"metric": name, "a": ca, "b": cb, "a_text": fmt_cell(ca), "b_text": fmt_cell(cb)}
        if (ta.split is None) != (tb.split is None) or (ta.num_fewshot is None) != (tb.num_fewshot is None):
            notes.append(
                f"{task}: one run does not record its split or n-shot ({ta.num_fewshot}/{ta.split} vs "
                f"{tb.num_fewshot}/{tb.split}): paired on doc_id as recorded"
            )
        why = unpaired_reason(ta, tb)
        if why is None:
            ha: dict[Any, str] = {}
            hb: dict[Any, str] = {}
            va, na = item_values(run_a, task, name, ha)
            vb, nb = item_values(run_b, task, name, hb)
            notes.extend(na + nb)
            why = _hash_mismatch(ha, hb)
        if why is not None:
            entry.update(
                paired=False,
                unpaired=why,
                diff=None,
                text="no verdict",
                sentence=f"no verdict on {task}: {why}",
                disagreements=[],
            )
            out_tasks[task] = entry
            continue
        diff = stats.paired_difference(va, vb)
        entry["paired"] = True
        entry["unpaired"] = None
        entry["diff"] = diff
        entry["sentence"] = stats.verdict({task: diff}, run_a.label, run_b.label)
        entry["text"] = fmt_diff(diff, stats.is_fraction(ca or {"metric": name}))
        entry["disagreements"] = [k for k in va if k in vb and va[k] != vb[k]][:max_disagreements]
        out_tasks[task] = entry
    diffs = {t: e["diff"] for t, e in out_tasks.items() if e["paired"]}
    unpaired = sorted(t for t, e in out_tasks.items() if not e["paired"])
    if diffs:
        sentence = stats.verdict(diffs, run_a.label, run_b.label)
    elif unpaired:
        sentence = "no task whose items pair"
    else:
        sentence = "no task both runs scored"
    if unpaired:
        whose = "its items do not" if len(unpaired) == 1 else "their items do not"
        sentence += f"; no verdict on {', '.join(unpaired)}: {whose} pair (see the row)"
    return {
        "a": run_a.to_json(),
        "b": run_b.to_json(),
        "tasks": out_tasks,
        "verdict": sentence,
        "notes": notes,
        "method": PAIRED_METHOD,
    }


PAIRED_METHOD = (
    "paired over the items both runs scored (joined on doc_id): the mean of B - A per item, in points "
    "for accuracies, and its 95% interval from Student's t on the per-item differences"
)
