"""`marin-lab rerun-shards STEP`: redo only the bad shards of a step that FAILED for them.

A data step under a `ShardPolicy` that ends with more bad shards than it allows is FAILED, its
finished shards kept with their completion markers, and its bad-shard report
(`{output_path}/.bad_shards.json`, processing/quarantine.py) names the bad ones. This command
runs that one step again through the executor -- its lease, attempts and records, SUCCESS last --
from the experiment's recorded script (the file itself when it still has the recorded sha256,
else the copy stored beside the experiment record), with:

- every other step reused (they are SUCCESS: the failed step's dependencies succeeded);
- the finished shards skipped by their markers, so only the bad ones run;
- no allowance: the report is marked first, so the step is SUCCESS only when every shard is then
  done; otherwise FAILED again, with a new report.

Why a command of its own rather than an executor flag: the failure names a step's output path,
and that is all it needs; the experiment, its script and its prefix come from the records.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import re
import shutil
import sys
import tempfile
import time
from typing import Any

from marin_lab.execution import ExecutorMainConfig
from marin_lab.execution.errors import MarinLabError
from marin_lab.execution.executor import Executor
from marin_lab.execution.main import capture_steps
from marin_lab.execution.state.lease import Lease
from marin_lab.execution.state.status import Status, read_status
from marin_lab.io.fs import join
from marin_lab.reproduce.target import RecordedExperiment, locate, read_script
from marin_lab.store.bad_shards import read_bad_shards, request_rerun, shard_names
from marin_lab.store.errors import RecordError
from marin_lab.store.layout import BAD_SHARDS_FILE, default_prefix
from marin_lab.store.step_record import read_step_record

__all__ = ["RerunError", "RerunResult", "add_parser", "rerun_shards"]


class RerunError(MarinLabError):
    """The step cannot be rerun shard by shard (not FAILED for bad shards, records missing)."""


@dataclasses.dataclass
class RerunResult:
    output_path: str
    status: str
    """SUCCESS, FAILED, or what the executor reported (LOST, DEP_FAILED)."""
    bad_before: list[str]
    message: str | None = None
    bad_after: list[str] = dataclasses.field(default_factory=list)


def rerun_shards(output_path: str, *, backend: str = "local") -> RerunResult:
    """Run the FAILED step at `output_path` again, redoing only its bad shards (module docstring)."""
    output_path = output_path.rstrip("/")
    report = _check_failed_for_bad_shards(output_path)
    bad_before = shard_names(report)
    try:
        rec = locate(output_path)
    except MarinLabError as err:
        raise RerunError(f"{output_path}: {err}") from None
    step_record = read_step_record(output_path)
    if step_record is None or not step_record.identity:
        raise RerunError(
            f"{output_path}: no step record (.executor_info) with an identity; rerun the experiment instead"
        )
    identity: str = step_record.identity
    workdir = tempfile.mkdtemp(prefix="marin-lab-rerun-")
    try:
        script = _script(rec, workdir)
        try:
            steps, description = capture_steps(script)
        except MarinLabError as err:
            raise RerunError(f"the recorded script {script} (from {rec.url}): {err}") from err
        except BaseException as err:  # the script no longer imports or runs here
            raise RerunError(
                f"the recorded script {script} (from {rec.url}) no longer runs here: {type(err).__name__}: {err}"
            ) from err
        executor = Executor(
            ExecutorMainConfig(prefix=rec.original, backend=backend),
            script=script,
            description=rec.record.description or description,
        )
        plan = executor.plan(steps)
        ps = plan.by_identity.get(identity)
        if ps is None:
            raise RerunError(
                f"the recorded script of {rec.url} no longer plans step {identity} (the helpers or a "
                "source changed since it ran; `marin-lab explain` shows which field); rerun the "
                "experiment instead"
            )
        request_rerun(output_path)
        outcome = executor.run(
            steps, run_only=[f"^{re.escape(ps.name)}$"], force_run_failed=True, raise_on_failure=False
        ).outcomes.get(identity)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    status = outcome.status if outcome is not None else "FAILED"
    try:
        after = read_bad_shards(output_path) if status != Status.SUCCESS.value else None
    except RecordError as err:  # the step ran; only what it left behind is unreadable
        return RerunResult(output_path, status, bad_before, f"{outcome.message if outcome else ''} ({err})".strip())
    return RerunResult(output_path, status, bad_before, outcome.message if outcome else None, shard_names(after))


def _check_failed_for_bad_shards(output_path: str) -> dict[str, Any]:
    st = read_status(output_path)
    status = (st or {}).get("status")
    if status is None:
        raise RerunError(
            f"{output_path}: no step status here; give a step's output path as `marin-lab status` "
            "lists it (e.g. tokenized/docs-1a2b3c4d under the prefix)"
        )
    if status == Status.RUNNING.value:
        holder = Lease(output_path, "rerun-shards").current_holder()
        if holder is not None and not holder.is_stale(time.time()):
            raise RerunError(f"{output_path} is RUNNING in driver {holder.holder}; wait for it to end")
    if status != Status.FAILED.value:
        raise RerunError(f"{output_path} is {status}, not FAILED: there are no bad shards to rerun")
    report = read_bad_shards(output_path)
    if report is None:
        raise RerunError(
            f"{output_path} FAILED, but not for bad shards (it has no {BAD_SHARDS_FILE}): its record and "
            "logs say why; fix that and rerun the experiment with --force_run_failed true"
        )
    return report


def _script(rec: RecordedExperiment, workdir: str) -> str:
    """The experiment file as recorded: the file itself when its sha256 still matches (so the
    experiment record keeps naming it), else the stored copy, placed in `workdir` under its name."""
    code = rec.record.code or {}
    recorded = code.get("script") or rec.record.script
    if isinstance(recorded, str) and os.path.isfile(recorded):
        with open(recorded, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() == rec.script_sha256:
                return recorded
    path = os.path.join(workdir, rec.script_name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(read_script(rec))
    return path


def _cmd(args: argparse.Namespace) -> int:
    path = args.path.rstrip("/")
    if "://" not in path and not os.path.isabs(path) and not os.path.exists(path):
        path = join(default_prefix(args.prefix), path)  # named as `marin-lab status` shows it
    result = rerun_shards(path, backend=args.backend)
    print(f"{result.output_path}: reran {len(result.bad_before)} bad shard(s): {', '.join(result.bad_before)}")
    if result.status == Status.SUCCESS.value:
        print(f"{result.output_path}: SUCCESS (every shard done)")
        return 0
    print(
        f"{result.output_path}: {result.status}" + (f" ({result.message})" if result.message else ""), file=sys.stderr
    )
    if result.bad_after:
        print(
            f"  still bad: {', '.join(result.bad_after)}; see {join(result.output_path, BAD_SHARDS_FILE)}",
            file=sys.stderr,
        )
    return 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "rerun-shards",
        help="run a step that FAILED for bad shards again, redoing only those shards "
        "(the others keep their outputs); SUCCESS only when every shard is done",
    )
    p.add_argument("path", help="the step's output path, or its path under the prefix (e.g. tokenized/docs-1a2b3c4d)")
    p.add_argument("--prefix", help="default: $MARIN_PREFIX, else ./marin_store")
    p.add_argument(
        "--backend",
        default="local",
        choices=("local", "ray"),
        help="where the step runs (default local; ray: shards become Ray tasks)",
    )
    p.set_defaults(func=_cmd)
