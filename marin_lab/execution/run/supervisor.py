"""Supervising each planned step: its lease, its attempts within their retry budgets, its records.

The executor (executor.py) plans, decides and schedules; for each step whose dependencies have
succeeded it calls `StepSupervisor.run`, in a driver thread, which

  1. takes the step's lease (or waits while another live driver holds it, then reuses its result),
  2. writes RUNNING and a first record,
  3. runs `fn(resolved_config)` on the backend (a worker process or a Ray task), retrying a
     preemption within one budget and a failure within another,
  4. writes the output manifest and the full record, then SUCCESS last, then releases the lease.

A supervisor that loses the lease cancels the step and writes nothing more. One whose `cancel`
event is set (the driver was interrupted: interrupt.py) cancels the step, records it CANCELLED
with the time, and releases the lease; a cancelled step is not a failure and runs again next time.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from marin_lab.environments import ensure_environment, run_in_step_environment
from marin_lab.execution.errors import (
    LeaseLostError,
    PreemptedError,
    RecordError,
    StepCancelledError,
    StepFailedError,
    StorageError,
)
from marin_lab.execution.plan.hashing import unversioned_fingerprint
from marin_lab.execution.plan.planner import Plan, PlannedStep
from marin_lab.execution.record.builder import StepRecorder, step_record
from marin_lab.execution.record.code_provenance import function_fingerprint
from marin_lab.execution.record.provenance import manifest
from marin_lab.execution.review.capacity import (
    DEFAULT_UNSCHEDULABLE_TIMEOUT_S,
    UnschedulableWatch,
    describe,
    node_request,
)
from marin_lab.execution.review.decide import rebuild_reason
from marin_lab.execution.run.backends import Guard
from marin_lab.execution.run.logs import log_exists
from marin_lab.execution.run.watch import StatusHeartbeat, failure_report, with_step_logs
from marin_lab.execution.state.lease import HOSTNAME, Lease
from marin_lab.execution.state.status import Status, read_status, write_status
from marin_lab.io.secrets import scrub_text
from marin_lab.io.text import strip_ansi
from marin_lab.store.step_record import read_step_record

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class StepOutcome:
    identity: str
    status: str
    """A `Status` value: SUCCESS, FAILED, DEP_FAILED, LOST (the lease went to another driver) or CANCELLED."""
    executed: bool = False
    message: str | None = None


@dataclasses.dataclass(frozen=True)
class StepSettings:
    """How a step's lease is kept and how often its attempts may be retried."""

    lease_timeout_s: float = 60.0
    heartbeat_s: float | None = None
    wait_poll_s: float = 1.0
    max_preemption_retries: int = 10
    max_failure_retries: int = 0
    unschedulable_timeout_s: float = DEFAULT_UNSCHEDULABLE_TIMEOUT_S
    """How long a submitted step may wait while no node of the cluster can hold it (capacity.py)."""
    cancel_grace_s: float = 10.0
    """How long a cancelled step's handle may take to end before the supervisor records it anyway."""
    waiting_after_s: float = 1.0
    """A submitted step whose work has not started after this long is shown waiting (and why)."""


@dataclasses.dataclass
class _Started:
    """When a submitted attempt's work began: queue time is neither duration nor cost."""

    submitted: float
    at: float | None = None

    @property
    def queued_s(self) -> float:
        return max((self.at if self.at is not None else self.submitted) - self.submitted, 0.0)


def step_lease(ps: PlannedStep, driver_id: str, settings: StepSettings) -> Lease:
    """The lease on a step's output path, as this driver holds (or checks) it."""
    return Lease(
        ps.output_path,
        driver_id,
        timeout_s=settings.lease_timeout_s,
        heartbeat_s=settings.heartbeat_s,
        step_name=ps.identity,
    )


class StepSupervisor:
    """Runs steps of one executor run on its backend; `code` gives the run's code provenance and
    `experiment` the experiment record's path under the prefix, both written into step records."""

    def __init__(
        self,
        *,
        settings: StepSettings,
        driver_id: str,
        backend: Any,
        backend_name: str,
        code: Callable[[], dict[str, Any]],
        experiment: str | None,
        cancel: threading.Event | None = None,
        run_id: str | None = None,
        forced: frozenset[str] = frozenset(),
    ):
        self.settings = settings
        self.cancel = cancel or threading.Event()
        """Set when the run is interrupted: running steps are cancelled, none is started."""
        self.run_id = run_id
        """The run (its record under experiments/{id}/runs/) written into terminal statuses."""
        self.forced = forced
        """Identities this run runs again after a SUCCESS (`--force_run`), unless another driver just ran them."""
        self.driver_id = driver_id
        self.backend = backend
        self.backend_name = backend_name
        self.code = code
        self.experiment = experiment
        self._working: dict[str, dict[str, float]] = {}
        """Steps of this run whose work has started, and what each asked of a node: what holds a waiting one."""
        self._working_lock = threading.Lock()

    def lease(self, ps: PlannedStep) -> Lease:
        return step_lease(ps, self.driver_id, self.settings)

    def run(self, plan: Plan, ps: PlannedStep) -> StepOutcome:
        """Run one step whose dependencies have succeeded; never raises for the step's own failure."""
        lease = self.lease(ps)
        waited_for = None
        while True:
            holder = lease.try_acquire()
            if holder is None:
                break
            # Another live driver runs it: wait for its result (SUCCESS is reused, FAILED reported).
            st = read_status(ps.output_path) or {}
            if st.get("status") == Status.SUCCESS.value:
                return StepOutcome(ps.identity, "SUCCESS", message=f"finished by {holder.holder}")
            if st.get("status") == Status.FAILED.value and waited_for:  # the driver we waited for failed it
                return StepOutcome(ps.identity, "FAILED", message=f"FAILED in driver {st.get('driver')}")
            if waited_for != holder.holder:
                logger.info("step '%s': RUNNING in driver %s; waiting for it", ps.identity, holder.holder)
                waited_for = holder.holder
            if self.cancel.wait(self.settings.wait_poll_s):
                return StepOutcome(ps.identity, "CANCELLED", message=f"interrupted while waiting for {holder.holder}")
        if self.cancel.is_set():  # interrupted before it started: nothing of this run to record
            lease.release()
            return StepOutcome(ps.identity, "CANCELLED", message="interrupted before it started")
        try:
            # Holding the lease: someone may have finished the step since it was decided.
            st = read_status(ps.output_path) or {}
            rerun = ps.identity in self.forced and not waited_for  # forced: not reused, unless just run elsewhere
            if st.get("status") == Status.SUCCESS.value and rebuild_reason(ps) is None and not rerun:
                return StepOutcome(ps.identity, "SUCCESS", message=f"finished by {waited_for}" if waited_for else None)
            if st.get("status") == Status.FAILED.value and waited_for:
                return StepOutcome(ps.identity, "FAILED", message=f"FAILED in driver {st.get('driver')}")
            if rerun and st.get("status") == Status.SUCCESS.value:
                logger.info(
                    "step '%s': forced by --force_run; running again over its SUCCESS of %s",
                    ps.identity,
                    st.get("time"),
                )
            return self._run_holding_lease(plan, ps, lease, st)
        finally:
            lease.release()

    def _run_holding_lease(self, plan: Plan, ps: PlannedStep, lease: Lease, st: dict[str, Any]) -> StepOutcome:
        """`st`: the step's status, read once this driver held the lease (no one else writes it since)."""
        try:
            previous = read_step_record(ps.output_path)
        except RecordError as err:  # history unreadable: start a fresh one rather than jam every rerun
            logger.warning("step '%s': its record is damaged (%s); starting a new one", ps.identity, err)
            previous = None
        config = plan.resolve_config(ps)
        last_seen = (st.get("heartbeat") or st.get("time")) if st.get("status") == Status.RUNNING.value else None
        recorder = StepRecorder(
            step_record(
                ps,
                config,
                code=self.code(),
                experiment=self.experiment,
                driver=self.driver_id,
                backend=self.backend_name,
                previous=previous,
                last_seen=last_seen,
            ),
            self.driver_id,
        )
        # A locked environment is built (once, cached by its lock hash) before the first attempt.
        fn, recorder.record.step_environment = self._step_function(ps)
        lease.start_heartbeats()
        preemptions = failures = 0
        # The run marked the step WAITING when it planned it (executor.py `_mark_waiting`): its first
        # submission leaves that status as it is instead of writing the same state again.
        marked_waiting = st.get("status") == Status.WAITING.value and st.get("driver") == self.driver_id
        while True:
            if self.cancel.is_set() and preemptions + failures == 0:
                return StepOutcome(ps.identity, "CANCELLED", message="interrupted before it started")
            attempt = recorder.start_attempt()
            if lease.lost.is_set():
                return StepOutcome(ps.identity, "LOST", message="lease lost before start")
            if self.cancel.is_set():  # interrupted between attempts
                return self._cancelled(ps, recorder, attempt, lease, 0.0)
            # RUNNING and the first record are not flushed to disk (fsync): after a power loss a
            # missing or torn one reads as not done or CORRUPT, and the step runs again.
            recorder.write_running()
            started = _Started(time.monotonic())

            def work_started(queued_s: float, ended: bool, attempt: Any = attempt) -> None:
                # Written here, in the driver's thread that owns the record: the attempt starts now.
                # An attempt that `ended` before it was seen starting has its record written next,
                # when its end is: not once more before.
                recorder.attempt_started(attempt, queued_s, write=not ended)
                write_status(
                    ps.output_path,
                    Status.RUNNING,
                    attempt=attempt.attempt,
                    driver=self.driver_id,
                    durable=False,
                    **({"queued_s": round(queued_s, 3)} if queued_s >= 0.05 else {}),
                )
                logger.info("step '%s': running (attempt %d) -> %s", ps.identity, attempt.attempt, ps.output_path)

            def ran_s(started: _Started = started) -> float:  # the attempt's work, its queue left out
                return time.monotonic() - (started.at if started.at is not None else time.monotonic())

            try:
                result, env = self._call(
                    ps,
                    fn,
                    config,
                    lease,
                    attempt.attempt,
                    on_hardware=functools.partial(recorder.attempt_placed, attempt),
                    started=started,
                    on_started=work_started,
                    announce_waiting=not (marked_waiting and attempt.attempt == 1),
                )
            except LeaseLostError:
                return StepOutcome(ps.identity, "LOST", message="lost the lease to another driver; stopped")
            except StepCancelledError:
                return self._cancelled(ps, recorder, attempt, lease, ran_s(), started.queued_s)
            except (PreemptedError, StepFailedError) as err:
                if self.cancel.is_set():  # it ended because of the interrupt: not the step's failure
                    return self._cancelled(ps, recorder, attempt, lease, ran_s(), started.queued_s)
                preempted = isinstance(err, PreemptedError)
                preemptions += preempted
                failures += not preempted
                kind = "preemption" if preempted else "failure"
                recorder.attempt_failed(
                    attempt,
                    kind,
                    getattr(err, "traceback_text", None) or f"{type(err).__name__}: {err}",
                    f"{kind}: {err}",
                    hardware=err.hardware,
                )
                budget_left = (
                    (preemptions <= self.settings.max_preemption_retries)
                    if preempted
                    else (failures <= self.settings.max_failure_retries and not getattr(err, "final", False))
                )
                if budget_left and not lease.lost.is_set() and not self.cancel.is_set():
                    logger.warning(
                        "step '%s': attempt %d %s (%s); retrying",
                        ps.identity,
                        attempt.attempt,
                        "preempted" if preempted else "failed",
                        err,
                    )
                    continue
                if not lease.still_held():
                    return StepOutcome(ps.identity, "LOST", message="lease lost; wrote nothing")
                duration = ran_s()
                recorder.write_failed(attempt, duration)
                message = strip_ansi(scrub_text((str(err).splitlines() or [type(err).__name__])[0]))
                # The error's first line stays with the status: a later run says why it stops here.
                self._terminal_status(
                    ps,
                    Status.FAILED,
                    attempt.attempt,
                    duration_s=round(duration, 3),
                    error=message[:500],
                    **_queued(started),
                )
                logger.error("%s", failure_report(ps.identity, attempt.attempt, err, ps.output_path))
                return StepOutcome(ps.identity, "FAILED", executed=True, message=message)
            duration = ran_s()
            hardware = env.pop("hardware", None)
            recorder.attempt_succeeded(attempt, hardware)
            files = manifest(ps.output_path)
            if not lease.still_held():  # lost while finishing: another driver owns the path now
                return StepOutcome(ps.identity, "LOST", message="lease lost while finishing; wrote nothing")
            # The full record is flushed to disk before SUCCESS is written: SUCCESS never outlives it.
            recorder.write_success(
                attempt, result=result, environment=env, hardware=hardware, manifest=files, duration_s=duration
            )
            # SUCCESS last: only after the outputs, the manifest and the record are in place.
            # What it wrote rides with the status too: the browser's graph reads statuses only; and the
            # function's fingerprint, so a later plan says when the function changed (decide.py).
            code = function_fingerprint(ps.step.fn)
            self._terminal_status(
                ps,
                Status.SUCCESS,
                attempt.attempt,
                duration_s=round(duration, 3),
                config_fingerprint=unversioned_fingerprint(ps.scan.unversioned),
                files=files["count"],
                bytes=files["total_bytes"],
                **({"code_fingerprint": code["sha256"]} if code else {}),
                **_queued(started),
            )
            logger.info(
                "step '%s': SUCCESS in %.1fs (%d files, %d bytes)",
                ps.identity,
                duration,
                files["count"],
                files["total_bytes"],
            )
            return StepOutcome(ps.identity, "SUCCESS", executed=True)

    def _cancelled(
        self,
        ps: PlannedStep,
        recorder: StepRecorder,
        attempt: Any,
        lease: Lease,
        duration: float,
        queued_s: float = 0.0,
    ) -> StepOutcome:
        """Record an interrupted attempt: the attempt and the step CANCELLED, with the time."""
        recorder.attempt_cancelled(attempt, "interrupted (Ctrl-C or SIGTERM to the driver)")
        if not lease.still_held():
            return StepOutcome(ps.identity, "LOST", message="lease lost while cancelling; wrote nothing")
        recorder.write_cancelled(attempt, duration)
        self._terminal_status(
            ps,
            Status.CANCELLED,
            attempt.attempt,
            duration_s=round(duration, 3),
            reason="interrupted",
            **({"queued_s": round(queued_s, 3)} if queued_s >= 0.05 else {}),
        )
        logger.warning("step '%s': CANCELLED after %.1fs (attempt %d)", ps.identity, duration, attempt.attempt)
        return StepOutcome(ps.identity, "CANCELLED", executed=True, message=f"cancelled at {attempt.ended}")

    def _step_function(self, ps: PlannedStep) -> tuple[Any, dict[str, Any] | None]:
        """The callable to run, and the locked environment's description when the step has one."""
        env = ps.step.environment
        if env is None:
            return ps.step.fn, None
        # Built here first (a bad requirement fails before anything is submitted), and again, from
        # cache or afresh, on whichever node runs the step (the driver's copy may not be there).
        python = ensure_environment(env)
        return functools.partial(run_in_step_environment, env, ps.step.fn), {
            "lock_hash": env.lock_hash(),
            "python": python,
            "requirements": list(env.requirements),
            "constraints": env.constraints,
        }

    def _call(
        self,
        ps: PlannedStep,
        fn: Any,
        config: Any,
        lease: Lease,
        attempt: int = 1,
        on_hardware: Callable[[dict[str, Any]], None] | None = None,
        started: _Started | None = None,
        on_started: Callable[[float, bool], None] | None = None,
        announce_waiting: bool = True,
    ) -> tuple[Any, dict[str, Any]]:
        """`on_started(queued_s, ended)` when the attempt's work is seen starting (`ended`: only once
        it was over); `announce_waiting`: write WAITING as it is submitted (False when the status
        already says so)."""
        started = started or _Started(time.monotonic())
        guard = Guard(driver_pid=os.getpid(), driver_host=HOSTNAME, lease_url=lease.url, holder=lease.holder)
        fn, log = with_step_logs(fn, ps.identity, ps.output_path, attempt, ps.step.resources)
        # The worker opens the step's log as its work starts: until then the step waits (for a
        # Ray worker with its resources, say). A step without a log of its own (a HardwareRunner
        # reports its own waits) or whose log is already there counts as started on submission.
        watch_start = log is not None and not log_exists(log)
        if announce_waiting:
            write_status(ps.output_path, Status.WAITING, attempt=attempt, driver=self.driver_id, durable=False)
        started.submitted = time.monotonic()
        handle = self.backend.submit(fn, config, step_name=ps.identity, resources=ps.step.resources, guard=guard)
        heartbeat: StatusHeartbeat | None = None
        nodes = getattr(self.backend, "live_nodes", None)
        unschedulable = (
            UnschedulableWatch(ps.identity, ps.step.resources, nodes, self.settings.unschedulable_timeout_s)
            if callable(nodes)
            else None
        )
        reported = False
        said_waiting: str | None = None
        polls = 0
        try:
            while True:
                pending = handle.pending_reason  # a HardwareRunner still waiting for its slices
                if started.at is None and pending is None and (not watch_start or self._work_started(log, polls)):
                    started.at = time.monotonic()
                    with self._working_lock:
                        self._working[ps.identity] = _request(ps.step.resources)
                    if on_started is not None:
                        on_started(started.queued_s, False)
                    heartbeat = StatusHeartbeat(ps.output_path, log, attempt=attempt, driver=self.driver_id)
                # A step that ends within its first poll has its whole time counted as queued (it
                # ended before it was seen starting). Shorter first polls (10, 20, 40 ms ...) were
                # tried: the driver then ended a Ray run before Ray had forwarded the workers' last
                # lines to its console (tests/unit/execution/test_quiet_console.py, 2 of 7 runs).
                if handle.wait(0.2):
                    break
                polls += 1
                if lease.lost.is_set():
                    handle.cancel()
                    raise LeaseLostError(f"step '{ps.identity}': lease lost")
                if self.cancel.is_set():
                    handle.cancel()
                    handle.wait(self.settings.cancel_grace_s)  # bounded: the record is written either way
                    raise StepCancelledError(f"step '{ps.identity}': cancelled by an interrupt")
                refused = unschedulable.poll() if unschedulable is not None else None
                if refused:
                    handle.cancel()
                    raise StepFailedError(refused, traceback_text=refused, final=True)
                if not reported and handle.placed_hardware is not None and on_hardware is not None:
                    reported = True  # written here, in the driver's thread that owns the record
                    on_hardware(handle.placed_hardware)
                if pending is not None:
                    if pending != said_waiting:
                        said_waiting = self._say_waiting(ps, attempt, said_waiting, pending)
                elif heartbeat is not None:
                    heartbeat.maybe_beat()
                elif time.monotonic() - started.submitted >= self.settings.waiting_after_s:
                    said_waiting = self._say_waiting(ps, attempt, said_waiting)
            if started.at is None:  # it ended before it was seen starting: its log says whether it did
                started.at = time.monotonic() if not watch_start or log_exists(log or "") else started.submitted
                if on_started is not None:
                    on_started(started.queued_s, True)
        finally:
            with self._working_lock:
                self._working.pop(ps.identity, None)
        if lease.lost.is_set():
            raise LeaseLostError(f"step '{ps.identity}': lease lost")
        return handle.result()

    def _work_started(self, log: str | None, polls: int) -> bool:
        # A local log is a stat away; an object store is asked about every 2 s.
        if log is None:
            return True
        if "://" in log and not log.startswith("file://") and polls % 10:
            return False
        return log_exists(log)

    def waiting_for(self, ps: PlannedStep) -> str:
        """What a submitted step waits for: what it asked, what is free, and which running steps hold the rest."""
        need = _request(ps.step.resources)
        text = f"waiting for {describe(need)}"
        available = getattr(self.backend, "available", None)
        free = available() if callable(available) else None
        if free is not None:
            text += f" ({describe({k: free.get(k, 0.0) for k in need})} free)"
        with self._working_lock:
            holders = [f"'{ident}' ({describe(req)})" for ident, req in self._working.items() if ident != ps.identity]
        if holders:
            text += "; held by running step" + ("s " if len(holders) > 1 else " ") + ", ".join(holders)
        return text

    def _say_waiting(self, ps: PlannedStep, attempt: int, said: str | None, why: str | None = None) -> str:
        """WAITING with why (a HardwareRunner's own reason, else `waiting_for`), in the status and on the
        console, whenever why changes."""
        why = why or self.waiting_for(ps)
        if why != said:
            logger.info("step '%s': %s", ps.identity, why)
            try:
                fields = {"attempt": attempt, "driver": self.driver_id, "waiting_for": why}
                write_status(ps.output_path, Status.WAITING, durable=False, **fields)
            except Exception as err:  # informative only: the step goes on waiting
                logger.warning("step '%s': could not record why it waits: %s", ps.identity, err)
        return why

    def _terminal_status(self, ps: PlannedStep, status: Status, attempt: int, **extra: Any) -> None:
        # Retried on its own: a flaky write here must not turn into a lost lease or vice versa.
        for delay in (0.0, 0.5, 2.0, 5.0):
            time.sleep(delay)
            try:
                if self.run_id:
                    extra.setdefault("run", self.run_id)
                write_status(ps.output_path, status, attempt=attempt, driver=self.driver_id, **extra)
                return
            except Exception:
                logger.warning("step '%s': writing %s failed; retrying", ps.identity, status.value, exc_info=True)
        raise StorageError(f"step '{ps.identity}': could not write status {status.value} to {ps.output_path}")


def _request(resources: Any) -> dict[str, float]:
    """What a step asks of one node, as Ray counts it (a task takes 1 CPU unless it says otherwise)."""
    need = node_request(resources) or {}
    if resources is None or isinstance(resources, dict):
        need.setdefault("CPU", 1.0)
    return need


def _queued(started: _Started) -> dict[str, float]:
    """The queue time a terminal status carries (left out when there was none to speak of)."""
    return {"queued_s": round(started.queued_s, 3)} if started.queued_s >= 0.05 else {}
