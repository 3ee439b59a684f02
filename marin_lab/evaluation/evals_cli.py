"""`marin-lab evals PREFIX [--tasks REGEX] [--format text|markdown|json] [--compare RUN_A RUN_B [--clean]]`,
`marin-lab evals --rescore PATH`.

Every evaluation under a prefix as a table (a row per evaluated model, a column per task: value and
95% interval, ranked on the lower bound), or the paired comparison of two of them. The numbers come
from marin_lab.evaluation.results, as the browser's evaluation pages do.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from marin_lab.evaluation import rescore, stats, tables
from marin_lab.evaluation.results import EvalResultsError, find_eval_runs, resolve_run
from marin_lab.store.layout import default_prefix

LEGEND = tables.LEGEND


def _table(headers: Sequence[str | list[str]], rows: list[list[str]], markdown: bool) -> str:
    """A table; a header may be several lines (a task, its metric, split and chance level)."""
    heads = [h if isinstance(h, list) else [h] for h in headers]
    if markdown:
        out = ["| " + " | ".join("<br>".join(h) for h in heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        return "\n".join(out)
    depth = max((len(h) for h in heads), default=1)
    widths = [max([len(x) for x in h] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    lines = [
        "  ".join((h[k] if k < len(h) else "").ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()
        for k in range(depth)
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    return "\n".join(lines)


def render_board(board: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(tables.leaderboard_json(board), indent=2, default=str, allow_nan=False)
    md = fmt == "markdown"
    headers: list[str | list[str]] = [
        "rank",
        "model",
        "run",
        *(tables.column_header(board["columns"][t]) for t in board["tasks"]),
        ["score", "mean low"],
    ]
    rows = []
    notes = []
    for r in board["rows"]:
        run = r["run"]
        rows.append(
            [
                str(r["rank"]),
                run.label,
                run.key,
                *(stats.fmt_cell(r["cells"].get(t)) for t in board["tasks"]),
                "n/a" if r["score"] is None else f"{100 * r['score']:.1f}",
            ]
        )
        notes += [f"{run.key}: {n}" for n in run.notes]
    parts = [_table(headers, rows, md), "", tables.rank_rule(board) + " (score: that mean, in points)", LEGEND]
    if notes:
        parts += ["", *(("- " if md else "") + n for n in notes)]
    return "\n".join(parts)


def render_compare(result: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result, indent=2, default=str, allow_nan=False)
    md = fmt == "markdown"
    a, b = result["a"], result["b"]
    headers = ["task", "metric", "A", "B", "B - A (95% interval)", "items", "verdict"]
    rows = []
    for task, e in result["tasks"].items():
        items = str(e["diff"]["n"]) if e["paired"] else "-"
        if e["paired"] and "left_out" in e:
            items += f" ({e['left_out']} left out)"
        rows.append([task, e["metric"], e["a_text"], e["b_text"], e["text"], items, e["sentence"]])
    parts = [
        f"A = {a['label']} ({a['key']})",
        f"B = {b['label']} ({b['key']})",
        "",
        _table(headers, rows, md),
        "",
        result["verdict"],
        result["method"],
    ]
    if result["notes"]:
        parts += ["", *(("- " if md else "") + n for n in result["notes"])]
    return "\n".join(parts)


def _number(cell: dict[str, Any] | None) -> str:
    if not cell or cell.get("value") is None:
        return "n/a"
    text = f"{cell['value']:.6g}"
    if cell.get("low") is not None and cell.get("high") is not None:
        text += f" ({cell['low']:.6g}-{cell['high']:.6g})"
    return text + f" n={cell.get('n')}"


def render_rescore(result: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result, indent=2, default=str, allow_nan=False)
    rows = [
        [
            r["task"],
            r["metric"],
            _number(r["stored"]),
            _number(r["rescored"]) if r["rescored"] else "-",
            r["note"] or ("same" if r["same"] else "DIFFERS"),
        ]
        for r in result["rows"]
    ]
    parts = [_table(["task", "metric", "stored", "from the samples", ""], rows, fmt == "markdown")]
    if result["differ"]:
        parts.append(f"{result['differ']} number(s) differ from results.json: its samples were changed after scoring")
    return "\n".join(parts)


def _cmd_rescore(args: argparse.Namespace) -> int:
    try:
        result = rescore.rescore(args.rescore)
    except rescore.RescoreError as err:
        print(f"error: --rescore: {err}", file=sys.stderr)
        return 1
    print(render_rescore(result, args.format))
    for line in result["errors"]:
        print(f"error: {line}", file=sys.stderr)
    return 1 if result["errors"] or result["differ"] else 0


def _cmd_evals(args: argparse.Namespace) -> int:
    if args.rescore:
        return _cmd_rescore(args)
    if args.clean and not args.compare:
        print("error: --clean compares two runs on their clean items: give --compare RUN_A RUN_B", file=sys.stderr)
        return 1
    prefix = default_prefix(args.prefix)
    try:
        tables.task_filter(args.tasks)
        tables.task_filter(getattr(args, "rank_on", None), "--rank_on")
        runs = find_eval_runs(prefix)
        if not runs:
            print(f"error: no evaluation (a folder with results.json) under {prefix}", file=sys.stderr)
            return 1
        if args.compare:
            a, b = (resolve_run(runs, s) for s in args.compare)
            compare = rescore.compare_clean if args.clean else tables.compare
            print(render_compare(compare(a, b, args.tasks, args.metric), args.format))
        else:
            print(render_board(tables.leaderboard(runs, args.tasks, args.metric, args.rank_on), args.format))
    except EvalResultsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: {prefix}: cannot read ({type(err).__name__}: {err})", file=sys.stderr)
        return 1
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "evals",
        help="evaluations under a prefix: a model x task table with 95%% intervals, "
        "ranked on the lower bound; or a paired comparison of two runs",
    )
    p.add_argument("prefix", nargs="?", help="default: $MARIN_PREFIX, else ./marin_store")
    p.add_argument("--tasks", help="regex over task names (default: every task)")
    p.add_argument("--metric", help="the metric to show (default per task: acc_norm, else acc, else exact_match...)")
    p.add_argument(
        "--rank_on",
        help="regex over task names the rank is formed on (default: the tasks most "
        "models have): the mean of their 95%% lower bounds",
    )
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN_A", "RUN_B"),
        help="two evaluations (output path, path under the prefix, or folder name): per task the "
        "paired difference B - A, its interval and a sentence",
    )
    p.add_argument(
        "--clean",
        action="store_true",
        help="with --compare: only the items clean in both runs (an item found in either model's training "
        "documents, or too short to check, is left out; each row says how many)",
    )
    p.add_argument(
        "--rescore",
        metavar="PATH",
        help="an evaluation's output folder: recompute its metrics, intervals and clean scores from its samples "
        "files (no model) beside the stored ones; exit 1 when a samples file is damaged or a number differs",
    )
    p.set_defaults(func=_cmd_evals)
