"""`marin-lab forget EXPERIMENT [--prefix P] [--yes]`: drop an abandoned experiment's record.

An experiment record is what keeps its steps' outputs from `marin-lab gc`. Forgetting one removes
the record (`{prefix}/experiments/{script}-{hash8}.json`) and its run history beside it, so the
outputs that no other experiment names become unreferenced, and gc collects them once they are
older than its `--older_than`. Outputs another experiment still names stay referenced. An
experiment is named by its id (`{script}-{hash8}`, as `marin-lab status` lists it) or by its
script's name (every recorded version of that script). Lists only, unless `--yes`.
"""

from __future__ import annotations

import argparse
from typing import Any

from marin_lab.execution.record.experiments import ListedExperiment, list_experiments, runs_dir_of
from marin_lab.flags import add_prefix_arguments
from marin_lab.gc.garbage import GcError
from marin_lab.io.fs import fs_and_path, remove
from marin_lab.store.layout import default_prefix


def experiment_id(listed: ListedExperiment) -> str:
    """`{script}-{hash8}`: the record's file name without `.json`."""
    return listed.url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".json")


def _script_name(listed: ListedExperiment) -> str:
    return experiment_id(listed).rsplit("-", 1)[0]


def find_experiments(prefix: str, name: str) -> list[ListedExperiment]:
    """The records `name` names: the one with that id, else every record of the script `name`
    (`my_first`, `my_first.py` or a path to it)."""
    listed = list_experiments(prefix)
    by_id = [e for e in listed if experiment_id(e) == name.removesuffix(".json")]
    if by_id:
        return by_id
    script = name.rstrip("/").rsplit("/", 1)[-1].removesuffix(".py")
    return [e for e in listed if _script_name(e) == script]


def outputs_freed(prefix: str, forgotten: list[ListedExperiment]) -> tuple[list[str], int]:
    """(outputs that no remaining experiment names, how many stay named by another one)."""
    gone = {e.url for e in forgotten}
    kept = {
        s["output_path"].rstrip("/")
        for e in list_experiments(prefix)
        if e.url not in gone
        for s in e.steps
        if isinstance(s, dict) and isinstance(s.get("output_path"), str)
    }
    named = {
        s["output_path"].rstrip("/")
        for e in forgotten
        for s in e.steps
        if isinstance(s, dict) and isinstance(s.get("output_path"), str)
    }
    return sorted(named - kept), len(named & kept)


def forget(forgotten: list[ListedExperiment]) -> None:
    """Remove the records and their run histories."""
    for e in forgotten:
        runs_folder = runs_dir_of(e.url).rsplit("/", 1)[0]
        fs, path = fs_and_path(runs_folder)
        if fs.exists(path):
            remove(runs_folder, recursive=True)
        remove(e.url)


def _cmd_forget(args: argparse.Namespace) -> int:
    prefix = default_prefix(args.prefix)
    chosen = find_experiments(prefix, args.experiment)
    if not chosen:
        known = ", ".join(experiment_id(e) for e in list_experiments(prefix)[:5]) or "none"
        raise GcError(
            f"no experiment {args.experiment!r} under {prefix} (recorded: {known}); give an id as "
            "`marin-lab status` lists it, or a script's name"
        )
    freed, shared = outputs_freed(prefix, chosen)
    for e in chosen:
        print(f"forget {experiment_id(e)}  ({e.created or '?'}; {len(e.steps)} steps)  {e.url}")
    print(
        f"{len(freed)} output(s) no other experiment names become collectable by `marin-lab gc`"
        + (f"; {shared} stay, named by another experiment" if shared else "")
    )
    if args.dry_run or not args.yes:
        print("nothing forgotten; pass --yes to forget " + ("them" if len(chosen) > 1 else "it"))
        return 0
    forget(chosen)
    print(
        f"forgot {len(chosen)} experiment(s); `marin-lab gc --older_than 0s --yes` deletes the outputs now, "
        "plain `marin-lab gc` once they are older than its limit"
    )
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "forget", help="drop an abandoned experiment's record so gc can collect the outputs only it named"
    )
    p.add_argument("experiment", help="the experiment's id (as `marin-lab status` lists it) or its script's name")
    add_prefix_arguments(p)
    p.add_argument("--dry_run", action="store_true", help="list what would be forgotten (the default without --yes)")
    p.add_argument("--yes", action="store_true", help="forget it (default: list only)")
    p.set_defaults(func=_cmd_forget)
