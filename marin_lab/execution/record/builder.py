"""Building the records a run writes: each step's `.executor_info` and the experiment record.

`StepRecorder` holds one step's record while it runs (attempts, status history, timings) and
writes it, redacted whole, at the three moments the contract names: RUNNING (the first record),
FAILED, and SUCCESS (with result, environment, manifest), the SUCCESS status file coming after it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import Any

from marin_lab.execution.plan.hashing import lenient_value, unversioned_fingerprint
from marin_lab.execution.plan.planner import Plan, PlannedStep
from marin_lab.execution.plan.resources import describe_resources
from marin_lab.execution.record.artifacts import declaration
from marin_lab.execution.record.code_provenance import function_fingerprint
from marin_lab.execution.record.provenance import package_versions
from marin_lab.execution.record.usage import record_usage
from marin_lab.execution.state.status import Status, info_url, now_iso
from marin_lab.io.fs import write_json
from marin_lab.io.secrets import redact
from marin_lab.io.text import strip_ansi
from marin_lab.store.experiment_record import SCHEMA as EXPERIMENT_SCHEMA
from marin_lab.store.experiment_record import ExperimentRecord
from marin_lab.store.step_record import Attempt, StatusEvent, StepRecord, Timings

logger = logging.getLogger(__name__)

LOST = Status.LOST.value
"""The end of an attempt whose driver died mid-run (found when another driver takes the step over)."""
DRIVER_LOST = "driver lost"


def step_record(
    ps: PlannedStep,
    config: Any,
    *,
    code: dict[str, Any],
    experiment: str | None,
    driver: str,
    backend: str,
    previous: StepRecord | None,
    last_seen: str | None = None,
) -> StepRecord:
    """A step's record before its first attempt; the history of `previous` (the same identity's
    earlier runs) continues in it. An attempt left RUNNING there belonged to a driver that is
    gone (this driver holds the lease now): it ends, `LOST` with reason "driver lost", at
    `last_seen` (the old driver's last heartbeat, when known)."""
    same = previous is not None and previous.identity == ps.identity
    history = list(previous.status_history) if same and previous else []
    attempts = list(previous.attempts) if same and previous else []
    for i, old in enumerate(attempts):
        if old.status == Status.RUNNING.value and old.ended is None:
            ended = last_seen or now_iso()
            message = (
                f"driver lost: driver {old.driver} stopped before this attempt ended (last seen {ended}); "
                f"taken over by driver {driver}"
            )
            attempts[i] = dataclasses.replace(old, kind=DRIVER_LOST, ended=ended, status=LOST, error=message)
            history.append(StatusEvent(LOST, ended, old.attempt, old.driver, message))
    return StepRecord(
        name=ps.name,
        identity=ps.identity,
        hash=ps.hash,
        output_path=ps.output_path,
        fn=ps.fn_path,
        description=ps.step.description,
        version=ps.version,
        # Redacted with the rest of the record at each write (`StepRecorder._write`), not here too.
        config=lenient_value(config),
        unversioned=lenient_value(ps.scan.unversioned),
        config_fingerprint=unversioned_fingerprint(ps.scan.unversioned),
        dependencies=[{"name": d.name, "identity": d.identity, "output_path": d.output_path} for d in ps.dependencies],
        resources=describe_resources(ps.step.resources),
        reproducibility=declaration(ps.step.fn, config),
        git={"commit": code["commit"], "dirty": code["dirty"]},
        # The script's text and the diff live once, in the experiment record and beside it.
        code={
            "script": code["script"],
            "script_sha256": code["script_sha256"],
            "experiment": experiment,
            "function": function_fingerprint(ps.step.fn),
        },
        driver=driver,
        backend=backend,
        status_history=history,
        attempts=attempts,
    )


class StepRecorder:
    """One step's record while this driver runs it."""

    def __init__(self, record: StepRecord, driver: str):
        self.record = record
        self.driver = driver
        self.started = now_iso()
        self.url = info_url(record.output_path or "")

    def start_attempt(self) -> Attempt:
        attempt = Attempt(len(self.record.attempts) + 1, started=now_iso(), driver=self.driver)
        self.record.attempts.append(attempt)
        self.record.status_history.append(
            StatusEvent(Status.RUNNING.value, attempt.started, attempt.attempt, self.driver)
        )
        return attempt

    def attempt_started(self, attempt: Attempt, queued_s: float, *, write: bool = True) -> None:
        """The attempt's work began now, after `queued_s` waiting for resources: its time (and what
        it costs) counts from here, and the wait is kept beside it; `write`: the RUNNING record says
        so now (else the attempt's next record does)."""
        if queued_s >= 0.05:
            attempt.submitted = attempt.started
            attempt.queued_s = round(queued_s, 3)
            attempt.started = now_iso()
            self.record.status_history[-1] = dataclasses.replace(self.record.status_history[-1], time=attempt.started)
            if write:
                self.write_running()

    def attempt_placed(self, attempt: Attempt, hardware: dict[str, Any]) -> None:
        """The attempt's hardware is known while it runs: the RUNNING record lists it from now on."""
        attempt.hardware = hardware
        try:
            self.write_running()
        except Exception:  # noqa: BLE001 - a record that could not be updated must not stop the step
            logger.warning(
                "step record %s: could not add the attempt's hardware yet; it is written when the attempt ends",
                self.url,
                exc_info=True,
            )

    def attempt_failed(
        self, attempt: Attempt, kind: str, error: str, message: str, hardware: dict[str, Any] | None = None
    ) -> None:
        error, message = strip_ansi(error), strip_ansi(message)  # Ray colours its errors for terminals
        attempt.kind, attempt.ended, attempt.status, attempt.error = kind, now_iso(), Status.FAILED.value, error
        attempt.hardware = hardware or attempt.hardware  # the error's, else what was placed
        self.record.status_history.append(
            StatusEvent(Status.FAILED.value, attempt.ended, attempt.attempt, self.driver, message)
        )

    def attempt_cancelled(self, attempt: Attempt, message: str) -> None:
        attempt.kind, attempt.ended, attempt.status = "cancelled", now_iso(), Status.CANCELLED.value
        self.record.status_history.append(
            StatusEvent(Status.CANCELLED.value, attempt.ended, attempt.attempt, self.driver, message)
        )

    def attempt_succeeded(self, attempt: Attempt, hardware: dict[str, Any] | None = None) -> None:
        attempt.ended, attempt.status = now_iso(), Status.SUCCESS.value
        attempt.hardware = hardware or attempt.hardware
        self.record.status_history.append(
            StatusEvent(Status.SUCCESS.value, attempt.ended, attempt.attempt, self.driver)
        )

    def write_running(self) -> None:
        self.record.status = Status.RUNNING.value
        self.record.timings = Timings(self.started, None)
        # Not flushed to disk (no fsync): after a power loss a missing or torn first record only
        # means the step runs again (a damaged record is never reused).
        self._write(durable=False)

    def write_failed(self, attempt: Attempt, duration_s: float) -> None:
        self.record.status = Status.FAILED.value
        self.record.error = attempt.error
        self.record.timings = Timings(self.started, attempt.ended, round(duration_s, 3))
        self._write(durable=True)

    def write_cancelled(self, attempt: Attempt, duration_s: float) -> None:
        self.record.status = Status.CANCELLED.value
        self.record.timings = Timings(self.started, attempt.ended, round(duration_s, 3))
        self._write(durable=True)

    def write_success(
        self,
        attempt: Attempt,
        *,
        result: Any,
        environment: dict[str, Any],
        hardware: Any,
        manifest: dict[str, Any],
        duration_s: float,
    ) -> None:
        r = self.record
        r.status, r.error = Status.SUCCESS.value, None
        r.result, r.environment, r.hardware, r.manifest = lenient_value(result), environment, hardware, manifest
        r.timings = Timings(self.started, attempt.ended, round(duration_s, 3))
        self._write(durable=True)

    def _write(self, *, durable: bool) -> None:
        # What the attempts that ended held, chips x hours (cost.py); not hashed, like all of the record.
        self.record.usage = record_usage(self.record)
        # Redacted whole, not field by field: the version (a token in a versioned field), attempt
        # errors and status messages (a token echoed by an exception) are secrets' ways in too.
        write_json(self.url, redact(self.record.to_json()), durable=durable)


def experiment_record(
    plan: Plan,
    *,
    script: str,
    stem: str,
    ident: str,
    code: dict[str, Any],
    description: str | None,
    prefix: str,
    driver: str,
) -> ExperimentRecord:
    """The experiment record (`{prefix}/experiments/{script}-{hash8}.json`); redact its
    `to_json()` whole when writing it."""
    return ExperimentRecord(
        schema=EXPERIMENT_SCHEMA,
        script=relative_script(script),
        name=stem,
        hash=ident,
        description=description,
        created=now_iso(),
        command_line=list(sys.argv),
        git={"commit": code["commit"], "dirty": code["dirty"]},
        code=code,
        packages=package_versions(),
        prefix=prefix,
        driver=driver,
        steps=[
            {
                "name": s.name,
                "identity": s.identity,
                "output_path": s.output_path,
                "info_path": info_url(s.output_path),
                "fn": s.fn_path,
                "dependencies": [d.identity for d in s.dependencies],
                "version": s.version,
                "config": lenient_value(plan.resolve_config(s)),
            }
            for s in plan.steps
        ],
    )


def under_prefix(url: str | None, prefix: str) -> str | None:
    """`url` relative to `prefix` when inside it, so a copied prefix keeps its references."""
    if url and url.startswith(prefix.rstrip("/") + "/"):
        return url[len(prefix.rstrip("/")) + 1 :]
    return url


def relative_script(script: str | None) -> str | None:
    if not script:
        return None
    try:
        rel = os.path.relpath(script)
    except ValueError:
        return script
    return script if rel.startswith("..") else rel
