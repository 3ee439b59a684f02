"""The `marin-lab` command: status, explain, verify, reproduce, browse, compile, cluster."""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import re
import sys
from collections.abc import Sequence

from marin_lab.browser.command import add_parser as add_browse_parser
from marin_lab.cluster.launch_cli import add_parser as add_launch_parser
from marin_lab.evaluation.evals_cli import add_parser as add_evals_parser
from marin_lab.evaluation.generate_cli import add_parser as add_generate_parser
from marin_lab.execution import ExecutorMainConfig
from marin_lab.execution.errors import MarinLabError
from marin_lab.execution.executor import Executor
from marin_lab.execution.main import capture_steps
from marin_lab.execution.record.experiments import (
    ListedRun,
    describe_status,
    list_experiments,
    list_runs,
    run_state,
    step_statuses,
)
from marin_lab.execution.record.provenance import compare_manifests, manifest
from marin_lab.execution.review.baseline import RecordIndex, last_run_of_plan
from marin_lab.execution.review.cost import ExperimentCost, experiment_cost, read_record_quietly
from marin_lab.execution.review.prices import PriceTable, load_prices
from marin_lab.explain import explain_step
from marin_lab.flags import add_bool_flag, add_prefix_arguments, resolve_prefix_arguments
from marin_lab.gc import add_forget_parser
from marin_lab.gc import add_parser as add_gc_parser
from marin_lab.io.fs import join
from marin_lab.io.secrets import redact_logs
from marin_lab.reproduce import ReproduceError, reproduce
from marin_lab.reproduce.rerun_shards import add_parser as add_rerun_shards_parser
from marin_lab.store.errors import RecordError
from marin_lab.store.experiment_record import ExperimentRecord
from marin_lab.store.layout import default_prefix
from marin_lab.store.step_record import read_step_record


def _cmd_status(args: argparse.Namespace) -> int:
    args.prefix = _prefix(args)
    prices = load_prices(args.prices) if args.cost or args.prices else None
    experiments = list_experiments(args.prefix)
    if not experiments:
        print(f"no experiments recorded under {args.prefix}")
        return 0
    if prices is not None:
        print(prices.describe())
    damaged = 0
    for listed in experiments:
        exp = listed.record
        if exp is None:
            damaged += 1
            print(
                f"{listed.url}  CORRUPT experiment record: {listed.damage}; its steps cannot be listed "
                "(rerun the experiment to rewrite it)"
            )
            continue
        statuses = step_statuses(exp)
        counts: dict[str, int] = {}
        for _, st in statuses:
            counts[st] = counts.get(st, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        print(
            f"{listed.url}  ({exp.created or '?'}; {len(statuses)} step{'' if len(statuses) == 1 else 's'}: {summary})"
        )
        if exp.description:
            print(f"    {exp.description}")
        runs = list_runs(listed.url, limit=3)
        if runs:
            print("    runs (newest first): " + "; ".join(_run_line(r) for r in runs))
        costs = _status_costs(exp, statuses, prices)
        for i, (step, st) in enumerate(statuses):
            print(
                f"    {st:<11} {step.get('identity', '?')}{_artifact_label(step)}"
                + (f"  {costs.steps[i].text}" if costs else "")
            )
            if costs and costs.steps[i].goodput_text:
                print(f"    {'':<11}   {costs.steps[i].goodput_text}")
            if step.get("waiting_for"):
                print(f"    {'':<11}   {step['waiting_for']}")
            if step.get("driver_gone_since"):
                print(f"    {'':<11}   {describe_status(step, st)}: the next run takes it over")
            if step.get("damage"):
                damaged += 1
                print(f"    {'':<11}   damaged: {step['damage']} (treated as not done: the next run redoes it)")
        if costs:
            print(f"    {costs.text}")
            if costs.goodput_text:
                print(f"    {costs.goodput_text}")
    return 1 if damaged else 0


def _status_costs(exp: ExperimentRecord, statuses: list, prices: PriceTable | None) -> ExperimentCost | None:
    """With --cost: each step's recorded cost and the experiment's (execution/review/cost.py)."""
    if prices is None:
        return None
    return experiment_cost(
        exp.driver,
        [(str(step.get("identity", "?")), read_record_quietly(step.get("output_path"))) for step, _ in statuses],
        prices,
    )


def _run_line(listed: ListedRun) -> str:
    """One run briefly: `2026-01-02T03:04:05 succeeded (2 executed, 3 reused)`."""
    run = listed.record
    if run is None:
        return f"damaged run record ({listed.damage})"
    done = ", ".join(f"{n} {k}" for k, n in run.counts.items() if isinstance(n, int) and n)
    return f"{(run.started or '?')[:19]} {run_state(run)}" + (f" ({done})" if done else "")


def _artifact_label(step: dict) -> str:
    """'  = name@version (fingerprint f)' for a name@version artifact's step (marin_lab.marin.lazy)."""
    config = (step.get("version") or {}).get("config") if isinstance(step.get("version"), dict) else None
    identity = config.get("identity") if isinstance(config, dict) else None
    if isinstance(identity, dict) and identity.get("artifact"):
        return f"  = {identity['artifact']} (fingerprint {identity.get('fingerprint')})"
    return ""


def _cmd_explain(args: argparse.Namespace) -> int:
    if not os.path.isfile(args.script):
        raise MarinLabError(
            f"{args.script}: no such experiment file; give the path of a Python file "
            "that calls executor_main, e.g. experiments/quickstart.py"
        )
    steps, _ = capture_steps(args.script, args.script_args)
    executor = Executor(ExecutorMainConfig(prefix=_prefix(args), backend="local"), script=args.script)
    plan = executor.plan(steps)
    for read in executor.unchecked_reads[:1]:
        print(f"egress: bucket regions not checked ({read.reason}); the run checks them before it starts")
    unreadable = executor.regions.cannot_read(executor.prefix)
    if unreadable is not None:  # no credentials or network: explain against no records, without waiting
        print(f"records under {executor.prefix} not read ({unreadable}): every step is shown as new")
        index = RecordIndex(executor.prefix, list_names=lambda url: [], read=lambda url: None)
    else:
        index = RecordIndex(executor.prefix)
    last_run = None
    if unreadable is None:
        last_run = last_run_of_plan(plan, args.script)
        if last_run is not None:
            print(f"compared with this experiment's last run ({last_run.describe()})")
        else:
            print(
                f"no earlier run of {args.script} is recorded under {executor.prefix}: each step is compared "
                "with the latest recorded version of its name, from any experiment"
            )
    pattern = re.compile(args.step) if args.step else None
    shown = 0
    seen: set[str] = set()
    for ps in plan.steps:
        if pattern and not (pattern.search(ps.name) or pattern.search(ps.identity)):
            continue
        recorded = index.record(ps.output_path)
        if recorded is not None and recorded.identity in (None, ps.identity) and not args.all:
            continue
        for line in explain_step(plan, ps, index, seen=seen, last_run=last_run):
            print(line)
        shown += 1
    if shown == 0:
        print(f"every selected step is recorded under {executor.prefix} with its current version: nothing changed")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    path = args.path.rstrip("/")
    if "://" not in path and not os.path.isabs(path) and not os.path.exists(path):
        # A step named as the browser and `status` show it: relative to the prefix.
        path = join(_prefix(args), path)
    try:
        info = read_step_record(path)
    except RecordError as err:
        print(f"{err}: the step record is damaged; rerun the step to rewrite it", file=sys.stderr)
        return 2
    if info is None or info.manifest is None:
        print(f"{path}: no finished step record (.executor_info with a manifest) here", file=sys.stderr)
        return 2
    problem = _manifest_problem(info.manifest)
    if problem:
        print(
            f"{path}/.executor_info: the recorded manifest is damaged ({problem}); rerun the step to rewrite it",
            file=sys.stderr,
        )
        return 2
    problems = compare_manifests(info.manifest, manifest(path))
    if problems:
        print(f"{path}: {len(problems)} difference(s) from the recorded manifest:")
        for p in problems:
            print(f"  {p}")
        return 1
    print(f"{path}: OK ({info.manifest.get('count', 0)} files match the recorded sizes and sha256)")
    return 0


def _manifest_problem(recorded: object) -> str | None:
    """What is wrong with a recorded manifest's shape, or None."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("files"), list):
        return "not an object with a `files` list"
    for i, f in enumerate(recorded["files"]):
        if not isinstance(f, dict) or not isinstance(f.get("path"), str):
            return f"files[{i}] has no `path`"
        if "link" not in f and not (isinstance(f.get("size"), int) and isinstance(f.get("sha256"), str)):
            return f"files[{i}] ({f['path']}) has no integer `size` and string `sha256`"
    return None


def _cmd_reproduce(args: argparse.Namespace) -> int:
    try:
        report = reproduce(args.target, into=args.into, steps=args.steps, deep=args.deep, backend=args.backend)
    except ReproduceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report.table())
    return 0 if report.ok else 1


def _prefix(args: argparse.Namespace) -> str:
    resolve_prefix_arguments(args)  # main() has; a caller of build_parser().parse_args() may not have
    return default_prefix(args.prefix)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="marin-lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("status", help="experiments under a prefix and the status of their steps")
    add_prefix_arguments(p)
    p.add_argument(
        "--cost",
        action="store_true",
        help="each step's accelerator-hours and cost, each experiment's, and what reuse saved",
    )
    p.add_argument(
        "--prices",
        help="a price table (JSON, or TOML named *.toml) over the default list prices; "
        'implies --cost (docs/executor.md, "Cost")',
    )
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("explain", help="why steps of an experiment file are new: field-level diffs")
    p.add_argument("script", help="an experiment file, e.g. experiments/quickstart.py")
    p.add_argument("--step", help="regex over step names")
    p.add_argument("--prefix", help="default: $MARIN_PREFIX, else marin_store at the project root")
    add_bool_flag(p, "--all", "also list steps whose version is already recorded")
    p.add_argument("script_args", nargs="*", help="arguments passed to the script (after --)")
    p.set_defaults(func=_cmd_explain)

    p = sub.add_parser("verify", help="recompute a finished step's manifest and compare with its record")
    p.add_argument("path", help="the step's output path, or its path under the prefix (e.g. tokenized/docs-1a2b3c4d)")
    p.add_argument("--prefix", help="default: $MARIN_PREFIX, else marin_store at the project root")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser(
        "reproduce",
        help="run a recorded experiment again from its stored script into a scratch "
        "prefix and compare every artifact with the record (exit 1 on a difference)",
    )
    p.add_argument("target", help="an experiment record ({prefix}/experiments/NAME-HASH.json) or a step's output path")
    p.add_argument("--into", help="scratch prefix (default: a new temporary folder); never the original prefix")
    p.add_argument("--steps", help="regex over step names (default: every step)")
    p.add_argument(
        "--deep",
        action="store_true",
        help="recompute every dependency too, instead of reading it from the original prefix",
    )
    p.add_argument("--backend", default="local", choices=("local", "ray"))
    p.set_defaults(func=_cmd_reproduce)

    add_browse_parser(sub)
    add_launch_parser(sub)
    add_gc_parser(sub)
    add_forget_parser(sub)
    add_rerun_shards_parser(sub)
    add_generate_parser(sub)
    add_evals_parser(sub)

    # Listed for --help only: main() hands `compile ...` and `cluster ...` to marin_lab.cluster.cli.
    sub.add_parser(
        "compile",
        help="compile each training step for its TPU topology on this machine (libtpu): "
        "memory per chip vs HBM, FLOPs, collectives (ICI/DCN); exit 1 if one does not fit",
        add_help=False,
    )
    sub.add_parser("cluster", help="TPU cluster commands (render, up, status, down)", add_help=False)
    return parser


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each command's own parser, by name."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _check_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """An unknown command is a usage error naming the closest one (`statsu` -> `status`)."""
    if not argv or argv[0].startswith("-"):
        return
    commands = _commands(parser)
    if argv[0] not in commands:
        close = difflib.get_close_matches(argv[0], list(commands), n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else f" (one of: {', '.join(commands)})"
        parser.error(f"unknown command '{argv[0]}'{hint}")


def _unknown_flags(parser: argparse.ArgumentParser, args: argparse.Namespace, unknown: Sequence[str]) -> None:
    """Arguments the command does not take: a usage error naming the closest flag (`--prefx` -> `--prefix`)."""
    command = _commands(parser)[args.command]
    names = [o[2:] for a in command._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for arg in unknown:
        if arg.startswith("--"):
            close = difflib.get_close_matches(arg[2:].split("=", 1)[0], names, n=1, cutoff=0.6)
            if close:
                hints.append(f"{arg}: did you mean --{close[0]}?")
    command.error(f"unrecognized arguments: {' '.join(unknown)}" + (f" ({'; '.join(hints)})" if hints else ""))


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    redact_logs()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("cluster", "compile"):  # TPU commands: their own parsers, options and --help
        from marin_lab.cluster.cli import compile_main
        from marin_lab.cluster.cli import main as cluster_main

        return int((cluster_main if argv[0] == "cluster" else compile_main)(argv[1:]) or 0)
    extra: list[str] = []
    if argv and argv[0] in ("launch", "explain") and "--" in argv:  # the script's arguments, as --help says
        extra = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    parser = build_parser()
    _check_command(parser, argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _unknown_flags(parser, args, unknown)
    resolve_prefix_arguments(args)
    if extra:
        args.script_args = [*args.script_args, *extra]
    try:
        code = args.func(args)
        # Flushed here, not at exit: a reader that went away (`| head`) is then a BrokenPipeError
        # caught below, not one Python reports as ignored while shutting down.
        sys.stdout.flush()
        return code
    except MarinLabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `marin-lab status | head`: the reader has all it wanted
        # Python would report the pipe again when it flushes stdout at exit; point it at nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
