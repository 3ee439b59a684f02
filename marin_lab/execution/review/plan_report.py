"""The dry run as a reviewer reads it: what would run and why, as text, Markdown or JSON.

The decisions come from decide.py; this module only formats them.

`python experiments/x.py --dry_run true --format markdown` prints a plan that can be posted on a
pull request: every step with its action (run, reused, wait, fail), the reason, the field-level
difference against its version in the experiment's last run (else the latest recorded version of
the same step: baseline.py), its resources and the estimate
its config gives (tokens, FLOPs, accelerator-hours), and totals over the steps that would run.
Planning reads only statuses and records under the prefix; it never runs anything. The Markdown
escapes every value it shows (HTML, table and code-span syntax), so a plan is safe to post; the JSON
holds the values exactly.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any

from marin_lab.execution.errors import ExecutorConfigError
from marin_lab.execution.plan.resources import describe_resources

FORMATS = ("text", "markdown", "json")
ACTION_LABELS = {"run": "run", "skip": "reused", "wait": "wait", "fail": "fail", "unselected": "not selected"}
_TOTALLED = ("tokens", "flops", "accelerator_hours")


def check_format(name: str) -> str:
    if name not in FORMATS:
        raise ExecutorConfigError(f"--format {name!r} is not known; use one of: {', '.join(FORMATS)}")
    return name


def _estimate(step: Any) -> dict[str, Any] | None:
    estimate = getattr(step.config, "plan_estimate", None)
    if not callable(estimate):
        return None
    try:
        return dict(estimate())
    except Exception as err:  # an estimate is informative only
        return {"unavailable": f"{type(err).__name__}: {err}"}


def unchecked_regions(unchecked: Sequence[Any]) -> list[dict[str, Any]]:
    """The buckets whose region a plan could not ask for (regions.UncheckedRead), each with why
    and the reads it leaves unchecked: the run checks them before it starts."""
    out: dict[str, dict[str, Any]] = {}
    for read in unchecked:
        for bucket in read.buckets:
            entry = out.setdefault(
                bucket, {"bucket": f"gs://{bucket}", "region": "unchecked", "reason": read.reason, "reads": []}
            )
            entry["reads"].append({"step": read.step, "input": read.input})
    return list(out.values())


def _unchecked_line(entry: dict[str, Any]) -> str:
    n = len(entry["reads"])
    return (
        f"region of {entry['bucket']} unchecked ({entry['reason']}): {n} read{'s' if n != 1 else ''} "
        "not checked for egress; the run checks them before it starts"
    )


def format_text(
    decisions: Sequence[Any], *, prefix: str, backend: str, unchecked: Sequence[Any] = (), costs: Any = None
) -> str:
    """The dry run's default output: one block per step (action, why, where, resources, estimate,
    cost when `costs` (cost.PlanCost) is given, and the field-level changes)."""
    counts: dict[str, int] = {}
    for d in decisions:
        counts[d.action] = counts.get(d.action, 0) + 1
    summary = ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
    lines = [
        f"Plan: {len(decisions)} step{'' if len(decisions) == 1 else 's'} under {prefix} (backend {backend}): {summary}"
    ]
    lines += [f"  egress: {_unchecked_line(entry)}" for entry in unchecked_regions(unchecked)]
    if costs is not None:
        lines += [f"  {costs.prices}"] + [f"  cost: {line}" for line in costs.lines()]
    pad = f"  {'':<10}   "
    for d in decisions:
        lines.append(f"  {d.action:<10} {d.step.identity}  ({d.reason})")
        lines.append(f"{pad}-> {d.step.output_path}")
        resources = describe_resources(d.step.step.resources)
        if resources:
            lines.append(f"{pad}resources: {_compact(resources)}")
        estimate = _estimate(d.step.step)
        if estimate is not None:
            lines.append(
                f"{pad}estimate: "
                + (
                    f"unavailable ({estimate['unavailable']})"
                    if set(estimate) == {"unavailable"}
                    else _compact(estimate)
                )
            )
        if costs is not None and d.step.identity in costs.steps:
            lines.append(f"{pad}cost: {costs.steps[d.step.identity].text}")
        for note in d.notes:
            lines.append(f"{pad}{note}")
    return "\n".join(lines)


def _compact(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def plan_report(
    decisions: Sequence[Any],
    *,
    prefix: str,
    backend: str,
    script: str | None,
    unchecked: Sequence[Any] = (),
    costs: Any = None,
) -> dict[str, Any]:
    """The plan as data: the JSON format, and what the Markdown is drawn from; with `costs`
    (cost.PlanCost), each step's recorded or estimated cost and the totals."""
    steps = []
    counts: dict[str, int] = {}
    totals: dict[str, float] = {}
    for d in decisions:
        ps = d.step
        counts[d.action] = counts.get(d.action, 0) + 1
        estimate = _estimate(ps.step)
        if d.action == "run" and estimate:
            for key in _TOTALLED:
                if isinstance(estimate.get(key), (int, float)):
                    totals[key] = totals.get(key, 0) + estimate[key]
        steps.append(
            {
                "name": ps.name,
                "identity": ps.identity,
                "action": d.action,
                "reason": d.reason,
                "forced": bool(getattr(d, "forced", False)),
                "changes": list(d.notes),
                "output_path": ps.output_path,
                "fn": ps.fn_path,
                "dependencies": [dep.identity for dep in ps.dependencies],
                "resources": describe_resources(ps.step.resources),
                "estimate": estimate,
            }
        )
        if costs is not None:
            steps[-1]["cost"] = costs.steps[ps.identity].to_json() if ps.identity in costs.steps else None
    report = {
        "script": os.path.relpath(script) if script and not os.path.relpath(script).startswith("..") else script,
        "prefix": prefix,
        "backend": backend,
        "counts": counts,
        "totals": totals,
        "steps": steps,
        "unchecked_regions": unchecked_regions(unchecked),
    }
    if costs is not None:
        report["cost"] = {**costs.summary(), "lines": costs.lines()}
    return report


def render_plan(report: dict[str, Any], fmt: str) -> str:
    if check_format(fmt) == "json":
        return json.dumps(report, indent=2, default=str)
    return to_markdown(report)


def _number(value: Any) -> str:
    if isinstance(value, float) and (value >= 1e6 or 0 < value < 1e-3):
        return f"{value:.3g}"
    if isinstance(value, (int, float)):
        return f"{value:,}"
    return str(value)


# --- Markdown that is safe to post ----------------------------------------------------------------
# A plan is posted on pull requests, and its cells hold values from the experiment (config values in
# the field-level changes, names, pinned paths, estimates). Every one goes through `_text` or `_code`,
# so none can open an HTML tag or comment (which would hide text), end a table row or cell, start a
# link definition, or leave its code span.

_LINE_BREAKS = re.compile(r"\r\n|\r|\n")
_TEXT_SPECIAL = re.compile(r"[\\`\[\]|]")  # emphasis (* _) is left: it shows, never hides
_BLOCK_START = re.compile(r"^(?:[#>+=-]|\d+(?=[.)]))")


def _text(value: Any) -> str:
    """`value` as Markdown text shown exactly as written, on one line, inside or outside a table."""
    text = _LINE_BREAKS.sub(" ", str(value))
    text = text.replace("&", "&amp;").replace("<", "&lt;")  # no tag, comment or entity of the value's own
    return _TEXT_SPECIAL.sub(lambda m: "\\" + m.group(0), text)


def _list_item(value: Any) -> str:
    """`_text`, and a leading character that would start a heading, quote or list escaped too."""
    text = _text(value)
    return _BLOCK_START.sub(lambda m: m.group(0) + "\\" if m.group(0)[0].isdigit() else "\\" + m.group(0), text)


def _code(value: Any, *, in_table: bool = True) -> str:
    """`value` as an inline code span: fenced by more backticks than it holds, one line, and its `|`
    escaped inside a table (GitHub splits cells before it reads code spans)."""
    text = _LINE_BREAKS.sub(" ", str(value))
    if in_table:
        text = text.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" ") and text.strip()):
        text = f" {text} "
    return f"{fence}{text}{fence}"


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{_text(k)}={_text(_number(v))}" for k, v in value.items())
    return _text(value or "")


def _action(action: Any) -> str:
    return _text(ACTION_LABELS.get(action, action))


def to_markdown(report: dict[str, Any]) -> str:
    counts = report["counts"]
    summary = ", ".join(f"{n} {_action(a)}" for a, n in sorted(counts.items()))
    title = _code(report["script"], in_table=False) if report["script"] else "experiment"
    n = sum(counts.values())
    lines = [
        f"## Plan for {title}: {n} step{'' if n == 1 else 's'} ({summary})",
        "",
        f"Prefix {_code(report['prefix'], in_table=False)}, backend {_code(report['backend'], in_table=False)}. "
        "Output paths are `{prefix}/{step}`.",
        "",
        "| Action | Step | Why | Resources | Estimate |",
        "|---|---|---|---|---|",
    ]
    for entry in report.get("unchecked_regions") or ():
        lines[4:4] = [f"**Egress:** {_text(_unchecked_line(entry))}.", ""]
    base = report["prefix"].rstrip("/") + "/"
    for s in report["steps"]:
        where = s["output_path"].removeprefix(base)
        shown = _code(s["identity"]) + ("" if where == s["identity"] else f" (at {_code(where)})")
        lines.append(
            f"| {_action(s['action'])} | {shown} | {_cell(s['reason'])} "
            f"| {_cell(s['resources'])} | {_cell(s['estimate'])} |"
        )
    if report["totals"]:
        lines += [
            "",
            "**Totals over the steps that would run:** "
            + ", ".join(f"{_text(k.replace('_', '-'))} {_text(_number(v))}" for k, v in report["totals"].items()),
        ]
    lines += _cost_markdown(report)
    changed = [s for s in report["steps"] if s["changes"]]
    if changed:
        lines += ["", "### What changed against earlier versions"]
        for s in changed:
            lines += ["", f"{_code(s['identity'], in_table=False)} ({_action(s['action'])}: {_text(s['reason'])})", ""]
            lines += [f"- {_list_item(note)}" for note in s["changes"]]
    return "\n".join(lines) + "\n"


def _cost_markdown(report: dict[str, Any]) -> list[str]:
    """The cost section: the totals, then each step whose cost is known (recorded or estimated)."""
    cost = report.get("cost")
    if not cost:
        return []
    lines = ["", "### Cost", "", f"{_text(cost['prices'])}.", ""]
    lines += [f"- {_list_item(line)}" for line in cost["lines"]]
    known = [s for s in report["steps"] if s.get("cost") and s["cost"]["accelerator_hours"] is not None]
    if known:
        lines += ["", "| Action | Step | Cost |", "|---|---|---|"]
        lines += [f"| {_action(s['action'])} | {_code(s['identity'])} | {_text(s['cost']['text'])} |" for s in known]
    return lines
