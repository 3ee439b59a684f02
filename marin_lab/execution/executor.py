"""The executor: plan an experiment, decide what to run, schedule it, record the run.

A run is a loop in the driver. The plan (plan.py) gives every step its identity and output path;
deciding (decide.py) reads the stored statuses and says run, skip, wait or fail for each. Steps
whose dependencies have succeeded are then started, up to `max_concurrent` at once, each in a
driver thread where a `StepSupervisor` (supervisor.py) takes its lease, runs its attempts and writes
its records; a failure marks everything downstream DEP_FAILED. All state lives in storage, so a
driver killed at any moment is restarted by running it again.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import heapq
import json
import logging
import os
import sys
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from marin_lab.execution.config import ExecutorMainConfig
from marin_lab.execution.errors import (
    ExecutorConfigError,
    ExperimentFailedError,
    RunInterruptedError,
    StorageError,
    UnschedulableError,
)
from marin_lab.execution.plan.planner import Plan, PlannedStep, build_plan, gc_paused
from marin_lab.execution.plan.resources import describe_resources, validate_resources
from marin_lab.execution.plan.step import ExecutorStep
from marin_lab.execution.record.builder import (
    experiment_record,
    relative_script,
    under_prefix,
)
from marin_lab.execution.record.code_provenance import git_state, store_script
from marin_lab.execution.record.experiments import records_folder
from marin_lab.execution.record.usage import declared_accelerator
from marin_lab.execution.review.baseline import LastRun, RecordIndex, experiment_hash, last_run_of_plan
from marin_lab.execution.review.capacity import check as check_capacity
from marin_lab.execution.review.capacity import known_cluster
from marin_lab.execution.review.capacity import unschedulable_timeout_s as resolve_unschedulable_timeout
from marin_lab.execution.review.cost import PlanCost, estimate_plan
from marin_lab.execution.review.decide import Decision, decide_one, read_statuses, with_missing_sources
from marin_lab.execution.review.plan_report import check_format, format_text, plan_report, render_plan
from marin_lab.execution.review.prices import PriceTable, load_prices
from marin_lab.execution.review.regions import CrossRegionRead, Regions, UncheckedRead, check_egress
from marin_lab.execution.run.backends import make_backend
from marin_lab.execution.run.interrupt import Interrupt
from marin_lab.execution.run.run_history import RunRecord, new_run_id
from marin_lab.execution.run.supervisor import StepOutcome, StepSettings, StepSupervisor, step_lease
from marin_lab.execution.state.lease import Lease, new_driver_id
from marin_lab.execution.state.status import Status, now_iso, read_status, status_url, write_status
from marin_lab.io.conditional import ConflictError, conditional_file
from marin_lab.io.fs import atomic_write_bytes, fs_and_path, is_local, join, normalize_prefix, remove, write_json
from marin_lab.io.secrets import redact, redact_logs
from marin_lab.store.layout import DEFAULT_PREFIX, default_prefix, experiments_dir
from marin_lab.store.step_record import StepRecord

__all__ = ["DEFAULT_PREFIX", "Decision", "Executor", "RunReport", "StepOutcome", "default_prefix"]

logger = logging.getLogger(__name__)

# What Marin's Executor shows after a run; marin_lab.marin.executor.Executor has them.
_MARIN_VIEW = frozenset({"steps", "output_paths", "configs", "versions", "version_strs", "dependencies"})


@dataclasses.dataclass
class RunReport:
    plan: Plan
    decisions: list[Decision]
    outcomes: dict[str, StepOutcome]
    experiment_path: str | None

    @property
    def executed(self) -> list[str]:
        return [i for i, o in self.outcomes.items() if o.executed and o.status == "SUCCESS"]

    @property
    def failed(self) -> list[str]:
        return [i for i, o in self.outcomes.items() if o.status in ("FAILED", "DEP_FAILED", "LOST")]

    @property
    def cancelled(self) -> list[str]:
        return [i for i, o in self.outcomes.items() if o.status == "CANCELLED"]


class Executor:
    """Runs experiments (DAGs of ExecutorSteps) under a prefix. See the module docstring."""

    def __init__(
        self,
        config: ExecutorMainConfig | None = None,
        *,
        description: str | None = None,
        script: str | None = None,
        regions: Regions | None = None,
        prices: PriceTable | None = None,
    ):
        """An executor with `config`'s settings (`executor_main`'s flags; all defaults when None).
        `script` defaults to the running program (`sys.argv[0]`); `regions` answers bucket-region
        lookups for the egress guard; `prices` replaces the table `config.prices` names."""
        config = config or ExecutorMainConfig()
        self.config = config
        self.prefix = normalize_prefix(config.prefix or default_prefix())
        # Where experiment records go (Marin's name); default {prefix}/experiments, where the browser
        # looks, or beside the steps when every one is pinned outside the prefix (records_folder).
        self.executor_info_base_path = config.executor_info_base_path or experiments_dir(self.prefix)
        self._records_pinned = config.executor_info_base_path is not None
        self.executor_info_path: str | None = None
        self.backend_name = config.backend
        if config.backend not in ("local", "ray"):
            raise ExecutorConfigError(f"--backend {config.backend!r} is not known; use 'local' or 'ray'")
        if config.max_concurrent is not None and config.max_concurrent < 1:
            raise ExecutorConfigError(f"--max_concurrent must be at least 1, got {config.max_concurrent}")
        self.max_concurrent = config.max_concurrent or max(os.cpu_count() or 1, 4)
        self.force_run_failed = config.force_run_failed
        self.force_run = list(config.force_run or ())
        """Regexes over step names (`--force_run`): matching steps run again even after a SUCCESS."""
        self._forced: set[str] = set()
        self.step_settings = StepSettings(
            lease_timeout_s=config.lease_timeout_s,
            heartbeat_s=config.heartbeat_s,
            wait_poll_s=config.wait_poll_s,
            max_preemption_retries=config.max_preemption_retries,
            max_failure_retries=config.max_failure_retries,
            unschedulable_timeout_s=resolve_unschedulable_timeout(config.unschedulable_timeout_s),
        )
        self._checked_records: dict[str, StepRecord] = {}
        """The step records `decide` read to check each SUCCESS, by output path."""
        self._record_index: RecordIndex | None = None
        """The records `decide` read for explain, kept for the same plan's cost estimate."""
        self.prices = prices or load_prices(config.prices)
        """What the dry run prices accelerator-hours at (--prices FILE over the default list prices)."""
        self.ray_address = config.ray_address
        self.description = description
        self.script = script if script is not None else _script_path()
        # Object stores pay a round trip per read: status reads and WAITING writes go concurrently there.
        self._remote = "://" in self.prefix and not self.prefix.startswith("file://")
        self.driver_id = new_driver_id()
        self._code: dict[str, Any] | None = None
        # Egress guard (regions.py): checked on every plan, before anything runs.
        self.allow_cross_region = list(config.allow_cross_region or ())
        self.transfer_budget_bytes = config.transfer_budget_bytes
        self.regions = regions or Regions()
        self.cross_region_reads: list[CrossRegionRead] = []
        self.unchecked_reads: list[UncheckedRead] = []
        """Bucket reads the last plan could not place (no credentials or network); a run checks them."""
        self.last_plan: Plan | None = None
        """The plan of the last `plan()` or `run()` call."""
        self.cancel = threading.Event()
        """Set by the first SIGINT/SIGTERM during a run (interrupt.py), or by a caller: running
        steps are cancelled and recorded CANCELLED, and the run raises RunInterruptedError."""
        self.run_id: str | None = None
        """The id of the current (or last) run: its record is under {experiments}/{script}-{hash}/runs/."""
        self.run_record_path: str | None = None
        self.interrupt_signal: int | None = None
        """The signal that interrupted the last run (SIGINT, SIGTERM), if one did."""

    def __getattr__(self, name: str) -> Any:
        # Reached only for a missing attribute: Marin code reading its executor's view of the plan.
        if name in _MARIN_VIEW and not hasattr(type(self), name):
            raise AttributeError(
                f"Executor.{name} is Marin's view of the last plan; use marin_lab.marin.executor.Executor, "
                "which has it (docs/coming_from_marin.md), or read executor.last_plan"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ---------------------------------------------------------------------------------------
    # planning and deciding

    def plan(self, steps: Sequence[ExecutorStep], *, strict_regions: bool = False) -> Plan:
        """Plan `steps`. A plan needs no credentials: bucket regions it cannot ask for are left
        unchecked (`unchecked_reads`); `strict_regions` (a real run) checks every one or refuses."""
        with gc_paused():
            plan = build_plan(steps, self.prefix)
            for ps in plan.uncommon_steps():
                if ps.step.resources is not None:
                    validate_resources(ps.name, ps.step.resources, ps.step.config)
            egress = check_egress(
                plan,
                self.regions,
                allow=self.allow_cross_region,
                budget_bytes=self.transfer_budget_bytes,
                strict=strict_regions,
            )
        self.cross_region_reads, self.unchecked_reads = egress.allowed, egress.unchecked
        self.last_plan = plan
        return plan

    def select(self, plan: Plan, run_only: Sequence[str] | None) -> list[PlannedStep]:
        """The steps a run considers: see `Plan.select`."""
        return plan.select(run_only)

    def decide(self, plan: Plan, selected: Sequence[PlannedStep], *, explain: bool = True) -> list[Decision]:
        """Run, skip, wait, fail or unselected for every planned step (decide.py)."""
        chosen = {s.identity for s in selected}
        # A dry run without credentials or network reads nothing under a bucket prefix (bounded: one ask).
        unreadable = self._prefix_unreadable() if explain else None
        if unreadable is not None:
            why = unreadable.split(":", 1)[0]
            return [
                with_missing_sources(
                    Decision(
                        ps, "run", f"status not read: cannot reach {self.prefix} without credentials or network ({why})"
                    )
                )
                if ps.identity in chosen
                else Decision(ps, "unselected", "not selected by --run_only")
                for ps in plan.steps
            ]
        states = read_statuses(plan.steps)
        statuses = {ident: state.status for ident, state in states.items()}
        # The records a SUCCESS was checked against are read once: reuse notes and the dry run's cost use them.
        self._checked_records = {
            ps.output_path: record for ps in plan.steps if (record := states[ps.identity].record) is not None
        }
        index = RecordIndex(self.prefix) if explain else None
        if index is not None:
            for path, record in self._checked_records.items():
                index.remember(path, record)
        self._record_index = index  # the dry run's cost estimate reads the same records (plan_costs)
        # A new step is compared with this experiment's last run, as `marin-lab explain` compares it.
        # (Read only when a step is new: the experiment records are read whole.)
        new = any((statuses.get(ps.identity) or {}).get("status") is None for ps in plan.steps if ps.identity in chosen)
        last_run = last_run_of_plan(plan, self.script) if explain and new else None
        return [
            with_missing_sources(self._decide_one(ps, statuses.get(ps.identity), index, last_run))
            if ps.identity in chosen
            else Decision(ps, "unselected", "not selected by --run_only")
            for ps in plan.steps
        ]

    def _decide_one(
        self, ps: PlannedStep, st: dict[str, Any] | None, index: RecordIndex | None, last_run: LastRun | None = None
    ) -> Decision:
        return decide_one(
            ps,
            st,
            lease=self._lease,
            force_run_failed=self.force_run_failed,
            index=index,
            forced=ps.identity in self._forced,
            last_run=last_run,
            record=self._checked_records.get(ps.output_path),
        )

    def _warn_if_new_prefix(self, decisions: Sequence[Decision]) -> None:
        """One line when every step of several will run in a prefix, named by --prefix or
        $MARIN_PREFIX, that holds no experiment yet: a typo there (or a different working folder)
        planning to redo it all. The default store's first run says nothing."""
        if not (self.config.prefix or os.environ.get("MARIN_PREFIX")):
            return  # the default store: an empty one is a first run, not a typo
        runs = [d for d in decisions if d.action == "run"]
        if len(runs) < 2 or len(runs) < sum(1 for d in decisions if d.action != "unselected"):
            return
        if self._prefix_unreadable() is not None:
            return  # the plan already says it cannot read there; listing it would wait on the same credentials
        try:
            fs, path = fs_and_path(experiments_dir(self.prefix))
            empty = not fs.exists(path) or not fs.ls(path)
        except Exception:  # an unreadable prefix is reported where it is written
            return
        if empty:
            logger.warning(
                "prefix %s holds no experiments: all %d steps will run (check --prefix or "
                "$MARIN_PREFIX if you meant to reuse earlier outputs)",
                self.prefix,
                len(runs),
            )

    # ---------------------------------------------------------------------------------------
    # the dry run

    def format_plan(self, decisions: Sequence[Decision]) -> str:
        return format_text(
            decisions,
            prefix=self.prefix,
            backend=self.backend_name,
            unchecked=self.unchecked_reads,
            costs=self._shown_costs(decisions),
        )

    def _shown_costs(self, decisions: Sequence[Decision]) -> PlanCost | None:
        """The text plan's costs: every step's with --cost, else only steps on accelerators (a CPU
        step's price says nothing worth a line), and none at all when no step uses one."""
        costs = self.plan_costs(decisions)
        if self.config.cost:
            return costs
        accelerated = {
            d.step.identity
            for d in decisions
            if declared_accelerator(describe_resources(d.step.step.resources))[0] not in ("cpu", None)
        }
        if not accelerated & set(costs.steps):
            return None
        return dataclasses.replace(costs, steps={k: v for k, v in costs.steps.items() if k in accelerated})

    def _prefix_unreadable(self) -> str | None:
        """Why a plan cannot read under a bucket prefix (no credentials or network), else None; the
        bucket is asked once (Regions keeps the answer)."""
        return self.regions.cannot_read(self.prefix) if self._remote else None

    def plan_costs(self, decisions: Sequence[Decision]) -> PlanCost:
        """What the steps that would run are estimated to cost, and what reuse saves (cost.py)."""
        unreadable = self._prefix_unreadable() is not None
        index = None if unreadable else (self._record_index or RecordIndex(self.prefix))
        return estimate_plan(decisions, self.prices, index)

    # ---------------------------------------------------------------------------------------
    # running

    def run(
        self,
        steps: Sequence[ExecutorStep],
        *,
        run_only: Sequence[str] | None = None,
        dry_run: bool = False,
        raise_on_failure: bool = True,
        force_run_failed: bool | None = None,
        force_run: Sequence[str] | None = None,
        plan_format: str = "text",
    ) -> RunReport:
        """Review `steps` (plan, decide, check capacity), then print the review (`dry_run`) or
        execute it. See `review` and `execute`."""
        check_format(plan_format)
        if force_run_failed is not None:
            self.force_run_failed = force_run_failed
        if force_run is not None:
            self.force_run = list(force_run)
        redact_logs()  # whatever configured logging, no secret reaches a handler from here on
        plan, decisions = self.review(steps, run_only=run_only, dry_run=dry_run)
        if dry_run:
            self.print_review(decisions, plan_format)
            return RunReport(plan, decisions, {}, None)
        return self.execute(plan, decisions, raise_on_failure=raise_on_failure)

    def review(
        self, steps: Sequence[ExecutorStep], *, run_only: Sequence[str] | None = None, dry_run: bool = True
    ) -> tuple[Plan, list[Decision]]:
        """What a run would do with every step, and why: the plan, then a decision per step. For a
        real run (`dry_run=False`) the regions are checked strictly, the prefix must be writable and
        a step no node can hold is refused; a dry run notes them instead."""
        plan = self.plan(steps, strict_regions=not dry_run)
        selected = self.select(plan, run_only)
        self._forced = plan.forced(self.force_run)
        probe = self._probe_prefix(dry_run)
        try:
            decisions = self.decide(plan, selected, explain=dry_run)
        finally:  # an unwritable prefix is the error raised, whatever reading the statuses raised
            if probe is not None:
                probe.result()
        decisions = self._check_capacity(decisions, refuse=not dry_run)
        self._warn_if_new_prefix(decisions)
        return plan, decisions

    def print_review(self, decisions: Sequence[Decision], plan_format: str = "text") -> None:
        """The dry run's output: the decisions as text, Markdown or JSON (with costs)."""
        if plan_format == "text":
            print(self.format_plan(decisions), flush=True)
            return
        plan_doc = plan_report(
            decisions,
            prefix=self.prefix,
            backend=self.backend_name,
            script=self.script,
            unchecked=self.unchecked_reads,
            costs=self.plan_costs(decisions),
        )
        print(render_plan(plan_doc, plan_format), flush=True)

    def execute(self, plan: Plan, decisions: Sequence[Decision], *, raise_on_failure: bool = True) -> RunReport:
        """Run what `review` decided: the experiment and run records, then every step to its end.
        Raises RunInterruptedError when interrupted, ExperimentFailedError when a step failed (unless
        `raise_on_failure` is false)."""
        decisions = list(decisions)
        self._code = None  # the tree may have changed since this executor's last run
        self.cancel.clear()
        self.interrupt_signal = None
        self.run_id = new_run_id()
        if not self._records_pinned:
            self.executor_info_base_path = records_folder(self.prefix, [ps.output_path for ps in plan.steps])
        experiment_path = self._write_experiment(plan)
        run_record = self._start_run_record(experiment_path, decisions)
        for d in decisions:
            for note in d.notes:
                logger.warning("step '%s': %s", d.step.identity, note)
        outcomes: dict[str, StepOutcome] = {}
        ending = "error"
        try:
            outcomes = self._execute(plan, decisions)
            ending = (
                "interrupted"
                if self.cancel.is_set()
                else (
                    "failed"
                    if any(o.status in ("FAILED", "DEP_FAILED", "LOST") for o in outcomes.values())
                    else "succeeded"
                )
            )
        except KeyboardInterrupt:
            ending = "interrupted"
            raise
        finally:
            run_record.finish(outcomes, ending)
        report = RunReport(plan, decisions, outcomes, experiment_path)
        if self.cancel.is_set():
            interrupted = RunInterruptedError(self._interrupted_message(report))
            if self.interrupt_signal is not None:  # 128 + the signal, as a shell reports it
                interrupted.exit_code = 128 + self.interrupt_signal
            raise interrupted
        n_exec = len(report.executed)
        n_skip = sum(1 for o in outcomes.values() if o.status == "SUCCESS" and not o.executed)
        logger.info("run finished: %d executed, %d reused, %d failed", n_exec, n_skip, len(report.failed))
        if report.failed and raise_on_failure:
            lines = [
                f"  {i}: {outcomes[i].status}" + (f" ({outcomes[i].message})" if outcomes[i].message else "")
                for i in report.failed
            ]
            blocked = sum(1 for i in report.failed if outcomes[i].status == "DEP_FAILED")
            raise ExperimentFailedError(
                f"{len(report.failed) - blocked} step(s) failed"
                + (f", {blocked} blocked by them" if blocked else "")
                + ":\n"
                + "\n".join(lines)
                + f"\nRecords are under {self.prefix}; rerun with --force_run_failed true after fixing the cause."
            )
        return report

    def _check_capacity(self, decisions: list[Decision], *, refuse: bool) -> list[Decision]:
        """Steps this run would start whose resources no node of a known cluster can hold
        (capacity.py): a real run refuses them before anything runs; a dry run says so beside them."""
        cluster = known_cluster(self.backend_name, self.ray_address)
        if cluster is None:
            return decisions
        nodes, where = cluster
        out, refusals = [], []
        for d in decisions:
            line = (
                check_capacity(
                    d.step.identity, d.step.step.resources, nodes, where, local_backend=self.backend_name == "local"
                )
                if d.action in ("run", "wait")
                else None
            )
            if line:
                refusals.append(line)
                d = dataclasses.replace(d, notes=(*d.notes, f"cannot run here: {line}"))
            out.append(d)
        if refusals and refuse:
            raise UnschedulableError("\n".join(refusals))
        return out

    def _start_run_record(self, experiment_path: str, decisions: Sequence[Decision]) -> RunRecord:
        code = self._code_provenance()
        exp_id = os.path.basename(experiment_path)[: -len(".json")]
        record = RunRecord(
            self.executor_info_base_path,
            exp_id,
            run_id=self.run_id or new_run_id(),
            driver=self.driver_id,
            backend=self.backend_name,
            script=code.get("script"),
            git={"commit": code.get("commit"), "dirty": code.get("dirty")},
            decisions=decisions,
        )
        record.write_start()
        self.run_record_path = record.url
        return record

    def _interrupted_message(self, report: RunReport) -> str:
        """One line per step the interrupt stopped, and how to resume."""
        lines = [f"interrupted: {len(report.cancelled)} running step(s) cancelled"]
        for ident in report.cancelled:
            o = report.outcomes[ident]
            lines.append(f"  CANCELLED {ident}" + (f" ({o.message})" if o.message else ""))
        not_started = [
            d.step.identity
            for d in report.decisions
            if d.action in ("run", "wait") and d.step.identity not in report.outcomes
        ]
        if not_started:
            lines.append(f"  {len(not_started)} step(s) not started")
        lines.append(
            "To resume, run the same command again: cancelled steps run again (from their last "
            "checkpoint when they write one), finished ones are reused; no flag is needed."
        )
        return "\n".join(lines)

    def _probe_prefix(self, dry_run: bool) -> concurrent.futures.Future[None] | None:
        """A real run's write probe of the prefix (`_check_prefix_writable`). On an object store it
        runs beside the reads of the steps' statuses (its two round trips overlap theirs); the
        returned future raises its StorageError."""
        if dry_run:
            return None
        if is_local(self.prefix):
            self._check_prefix_writable()
            return None
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="marin-lab-probe")
        try:
            return pool.submit(self._check_prefix_writable)
        finally:
            pool.shutdown(wait=False)

    def _check_prefix_writable(self) -> None:
        probe = join(self.prefix, f".marin_lab_write_probe-{uuid.uuid4().hex[:8]}")
        try:
            atomic_write_bytes(probe, b"ok")
            remove(probe)
        except Exception as err:
            raise StorageError(
                f"cannot write to the prefix {self.prefix}: {type(err).__name__}: {err}; pass a writable "
                "--prefix (or set MARIN_PREFIX)"
            ) from err

    def _write_experiment(self, plan: Plan) -> str:
        script = self.script or "interactive"
        stem = os.path.splitext(os.path.basename(script))[0] or "interactive"
        ident = experiment_hash(plan)
        path = join(self.executor_info_base_path, f"{stem}-{ident}.json")
        record = experiment_record(
            plan,
            script=script,
            stem=stem,
            ident=ident,
            code=self._code_provenance(),
            description=self.description,
            prefix=self.prefix,
            driver=self.driver_id,
        )
        if self.cross_region_reads:
            record.cross_region_reads = [dataclasses.asdict(r) for r in self.cross_region_reads]
        if self.run_id:  # this run's own record, kept beside this file (run_history.py)
            record.run = self.run_id
        if os.environ.get("MARIN_LAUNCH_ID"):  # started by `marin-lab launch`: the browser links its attempts
            record.launch = {
                "run_id": os.environ["MARIN_LAUNCH_ID"],
                "attempt": int(os.environ.get("MARIN_LAUNCH_ATTEMPT", "0") or 0),
            }
        # Redacted whole: a secret in a versioned field, the command line or a URL is text too.
        write_json(path, redact(record.to_json()))
        self.executor_info_path = path
        return path

    def _code_provenance(self) -> dict[str, Any]:
        """The experiment's code: git state and diff, and the script stored beside the records (once per run)."""
        if self._code is None:
            script = self.script if self.script and os.path.isfile(self.script) else None
            self._code = {
                "script": relative_script(self.script),
                **git_state(script),
                **store_script(self.executor_info_base_path, script),
            }
        return self._code

    def _execute(self, plan: Plan, decisions: Sequence[Decision]) -> dict[str, StepOutcome]:
        by_id = {d.step.identity: d for d in decisions}
        outcomes: dict[str, StepOutcome] = {}
        todo = [d.step for d in decisions if d.action != "unselected"]
        pending = {s.identity for s in todo}
        for d in decisions:
            if d.action == "skip":
                outcomes[d.step.identity] = StepOutcome(d.step.identity, "SUCCESS")
                pending.discard(d.step.identity)
            elif d.action == "fail":
                outcomes[d.step.identity] = StepOutcome(d.step.identity, "FAILED", message=d.reason)
                pending.discard(d.step.identity)
        self._mark_dep_failed(plan, outcomes, pending)
        if not pending:
            return outcomes
        self._mark_waiting([plan.by_identity[i] for i in pending if by_id[i].reason == "no output yet"])

        backend = self._make_backend()
        supervisor = StepSupervisor(
            settings=self.step_settings,
            driver_id=self.driver_id,
            backend=backend,
            backend_name=self.backend_name,
            code=self._code_provenance,
            experiment=under_prefix(self.executor_info_path, self.prefix),
            cancel=self.cancel,
            run_id=self.run_id,
            forced=frozenset(d.step.identity for d in decisions if d.forced),
        )
        interrupt = Interrupt(self.cancel)
        try:
            with (
                interrupt,
                concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.max_concurrent, thread_name_prefix="step"
                ) as pool,
            ):
                running: dict[concurrent.futures.Future, str] = {}
                # Ready steps in plan order; a step is looked at again only when one of its
                # dependencies ends, not at every step's end (a rescan of all that wait was
                # O(steps) per step: about a millisecond a step in a chain of 1,000).
                order = {ps.identity: i for i, ps in enumerate(todo)}
                dependents: dict[str, list[PlannedStep]] = {}
                for ps in todo:
                    for dep in ps.dependencies:
                        dependents.setdefault(dep.identity, []).append(ps)

                def ready(ps: PlannedStep) -> bool:
                    return all(
                        dep.identity in outcomes and outcomes[dep.identity].status == "SUCCESS"
                        for dep in ps.dependencies
                    )

                queue = [(order[ps.identity], ps.identity) for ps in todo if ps.identity in pending and ready(ps)]
                heapq.heapify(queue)
                while pending or running:
                    while queue and len(running) < self.max_concurrent and not self.cancel.is_set():
                        _, ident = heapq.heappop(queue)
                        if ident in pending:  # a step with a dependency listed twice is queued twice
                            pending.discard(ident)
                            running[pool.submit(supervisor.run, plan, plan.by_identity[ident])] = ident
                    if not running:
                        break
                    # A bounded wait: the loop notices an interrupt (the signal handler runs here).
                    done, _ = concurrent.futures.wait(
                        running, timeout=0.5, return_when=concurrent.futures.FIRST_COMPLETED
                    )
                    failed = False
                    for fut in done:
                        ident = running.pop(fut)
                        try:
                            outcomes[ident] = fut.result()
                        except Exception as err:  # a bug or storage failure in the driver itself
                            logger.exception("step '%s': the driver failed while running it", ident)
                            outcomes[ident] = StepOutcome(ident, "FAILED", message=f"driver error: {err}")
                        if outcomes[ident].status != "SUCCESS":
                            failed = True
                            continue
                        for ps in dependents.get(ident, ()):
                            if ps.identity in pending and ready(ps):
                                heapq.heappush(queue, (order[ps.identity], ps.identity))
                    if failed:  # only a step that did not succeed leaves steps behind it to mark
                        self._mark_dep_failed(plan, outcomes, pending)
        finally:
            self.interrupt_signal = interrupt.signum
            backend.shutdown()
        if self.cancel.is_set():
            self._unmark_waiting([plan.by_identity[i] for i in pending])
        return outcomes

    def _unmark_waiting(self, steps: Sequence[PlannedStep]) -> None:
        """After an interrupt: the WAITING this run wrote for steps it never started is taken back
        (a conditional delete), so no reader shows them queued behind a run that has stopped."""
        for ps in steps:
            cf = conditional_file(status_url(ps.output_path))
            try:
                got = cf.read()
                if got is None:
                    continue
                st = json.loads(got[0])
                if (
                    isinstance(st, dict)
                    and st.get("status") == Status.WAITING.value
                    and st.get("driver") == self.driver_id
                ):
                    cf.delete(got[1])
            except Exception:  # another driver's status, or storage trouble: left as it is
                logger.debug("step '%s': WAITING left in place", ps.identity, exc_info=True)

    def _make_backend(self) -> Any:
        """Where step functions run (backends.py); marin_lab.marin's step runner adds Marin's in-thread one."""
        return make_backend(self.backend_name, ray_address=self.ray_address)

    def _mark_waiting(self, steps: Sequence[PlannedStep]) -> None:
        """Record WAITING for queued steps that never started, so browsers see the whole run.

        A conditional create: it never overwrites a status another driver has written meanwhile.
        """

        def mark(ps: PlannedStep) -> None:
            record = {"status": Status.WAITING.value, "time": now_iso(), "driver": self.driver_id}
            try:
                conditional_file(status_url(ps.output_path)).create(json.dumps(record).encode())
            except ConflictError:
                pass
            except Exception:
                logger.warning("step '%s': could not record WAITING", ps.identity, exc_info=True)

        if self._remote:
            with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
                list(pool.map(mark, steps))
        else:
            for ps in steps:
                mark(ps)

    def _mark_dep_failed(self, plan: Plan, outcomes: dict[str, StepOutcome], pending: set[str]) -> None:
        """Steps downstream of a failure will not run: record DEP_FAILED for them."""
        changed = True
        while changed:
            changed = False
            for ident in list(pending):
                ps = plan.by_identity[ident]
                bad = [
                    d
                    for d in ps.dependencies
                    if outcomes.get(d.identity) and outcomes[d.identity].status in ("FAILED", "DEP_FAILED", "LOST")
                ]
                if bad:
                    pending.discard(ident)
                    outcomes[ident] = StepOutcome(ident, "DEP_FAILED", message=f"dependency {bad[0].identity} failed")
                    self._write_dep_failed(ps, bad[0].identity)
                    changed = True

    def _write_dep_failed(self, ps: PlannedStep, cause: str) -> None:
        st = read_status(ps.output_path)
        if st and st.get("status") in (Status.SUCCESS.value, Status.RUNNING.value):
            return  # never overwrite a result or another driver's live run
        try:
            write_status(ps.output_path, Status.DEP_FAILED, driver=self.driver_id, cause=cause)
        except Exception:
            logger.warning("step '%s': could not write DEP_FAILED", ps.identity, exc_info=True)

    def _lease(self, ps: PlannedStep) -> Lease:
        return step_lease(ps, self.driver_id, self.step_settings)


def _script_path() -> str | None:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if path else None
