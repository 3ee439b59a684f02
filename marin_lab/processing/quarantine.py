"""Bad shards are quarantined, never waited on forever: a data step's side of it.

`map_shards` stops a step at the first failing shard. On a fleet that is wrong both ways: one
shard whose input crashes the parser (or runs out of memory, or never ends) holds every worker
until someone looks (Marin #4575: one shard held 3,000 workers for 12 hours), and a step whose
workers all die waits forever (Marin #3598). So a step may give a `ShardPolicy`, and the shard
engine (`processing/shards.py`, `run_shards(policy=...)`) then runs each shard attempt in a
process of its own (processing/attempts.py), so an attempt can be timed out and killed alone,
and gives each shard a budget:

- an exception, or the worker killed (by a signal, or by the out-of-memory killer), or over
  `time_limit_s`: a failure, retried `retries` times;
- a preemption (the Ray node lost): retried from its own larger budget, as the executor does.

A shard that spends its budget is *bad*: each attempt's error is kept, the other shards finish
(their outputs and completion markers stay), and at the end the step raises `BadShardsError`
naming every bad shard and the command that redoes only them (finished shards are skipped on a
rerun by their markers) -- or, within the step's declared `max_bad_shards`, returns with the bad
ones listed so the step's record says what was left out. Nothing waits without a bound: each
attempt has its time limit, each shard its budget, and a worker that dies is an attempt spent.

This module is the step's side. A data step holds one `Quarantine` for its whole run (a dedup
step maps three times): it passes the step's policy (or none) to the engine, sums what was left
out across its phases, and owns the bad-shard report `{output_path}/.bad_shards.json` -- written
when the step fails for bad shards, read by `marin-lab rerun-shards` (reproduce/rerun_shards.py),
removed when the step ends well. The policy's names are exported here too, where a step's
config imports them from.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import shlex
from collections.abc import Callable, Sequence
from typing import Any

from marin_lab.io import fs as mfs
from marin_lab.processing.attempts import classify_ray_error
from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.shards import (
    BadShardsError,
    ShardOutcome,
    ShardPolicy,
    check_policy,
    run_shards,
)
from marin_lab.store.bad_shards import bad_shards_url, read_bad_shards
from marin_lab.store.errors import RecordError
from marin_lab.store.layout import BAD_SHARDS_FILE

logger = logging.getLogger(__name__)

__all__ = [
    "REPORT_FILE",
    "BadShardsError",
    "Quarantine",
    "ShardOutcome",
    "ShardPolicy",
    "check_policy",
    "classify_ray_error",
    "read_report",
    "report_url",
    "rerun_command",
]

REPORT_FILE = BAD_SHARDS_FILE
"""In a step's output folder while the step is FAILED for bad shards: what `marin-lab rerun-shards` reads."""
report_url = bad_shards_url


def rerun_command(output_path: str) -> str:
    return f"marin-lab rerun-shards {shlex.quote(output_path)}"


def read_report(output_path: str) -> dict[str, Any] | None:
    """The bad-shard report of a step that FAILED for bad shards (`store.bad_shards` parses it);
    None when there is none. A damaged one is a ProcessingError naming the file."""
    try:
        return read_bad_shards(output_path)
    except RecordError as err:
        raise ProcessingError(str(err)) from None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class Quarantine:
    """One data step's shards under its `ShardPolicy`; None keeps `map_shards` (the first failing
    shard fails the step). Every sharded phase of the step maps through the same object, so the
    allowance is for the whole step, and `finish()` lists what was left out for its result."""

    def __init__(self, step: str, output_path: str, policy: ShardPolicy | None):
        if policy is not None:
            check_policy(policy, step)
        self.step, self.output_path, self.policy = step, output_path, policy
        self.left_out: list[dict[str, Any]] = []
        self.strict = False
        if policy is not None:
            try:
                previous = read_report(output_path)
            except ProcessingError as err:
                logger.warning("%s", err)
                previous = None
            # `marin-lab rerun-shards` asked for every shard: SUCCESS only when none is left out.
            self.strict = bool(previous and previous.get("rerun_requested"))

    def map(
        self,
        fn: Callable[[Any], Any],
        tasks: Sequence[Any],
        *,
        num_workers: int,
        desc: str,
        costs: Sequence[float] | None = None,
        labels: Sequence[str] | None = None,
        allowance: bool = True,
    ) -> list[Any]:
        """Results in task order; None for a shard left out within the allowance. `allowance=False`
        for a phase whose every shard the step needs (dedup's global phases)."""
        if self.policy is None:
            return run_shards(fn, tasks, num_workers=num_workers, desc=desc, costs=costs).results
        allowed = self.policy.max_bad_shards - len(self.left_out)
        note = ""
        if self.strict:
            allowed, note = 0, "; a rerun of bad shards must finish every shard"
        elif not allowance:
            allowed, note = 0, "; this phase needs every shard"
        policy = dataclasses.replace(self.policy, max_bad_shards=max(0, allowed))
        try:
            outcome = run_shards(
                fn,
                tasks,
                num_workers=num_workers,
                desc=desc,
                policy=policy,
                rerun=rerun_command(self.output_path),
                labels=labels,
                costs=costs,
                note=note,
            )
        except BadShardsError as err:
            self._write_report(desc, err)
            raise
        self.left_out.extend({**b, "phase": desc} for b in outcome.bad)
        return outcome.results

    def _write_report(self, desc: str, err: BadShardsError) -> None:
        report = {
            "step": self.step,
            "phase": desc,
            "output_path": self.output_path,
            "time": _now(),
            "total": err.total,
            "bad": err.bad,
            "left_out_before": self.left_out,
            "rerun": rerun_command(self.output_path),
            "message": str(err),
        }
        try:
            mfs.write_json(report_url(self.output_path), report)
        except Exception:  # the step fails with its message either way; only the report is lost
            logger.warning("%s: could not write %s", self.step, report_url(self.output_path), exc_info=True)

    def finish(self) -> list[dict[str, Any]]:
        """The bad shards left out (each with its attempts and phase); removes the report of an
        earlier failure, since the step now ends well."""
        if self.policy is not None:
            mfs.remove(report_url(self.output_path))
        return self.left_out
