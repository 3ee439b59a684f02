"""A month of preemptions, simulated: the Tootsie 8B plan through the executor's own retry loop.

Question: at the preemption rate Marin's users report (17 preemptions in 74.8 h of one run), plus
an hours-long capacity stall, what goodput, wall time and cost do today's settings give the
Tootsie 8B plan on its declared hardware (2 x v5e-256, then v4-2048), and which checkpoint interval
gives the most goodput? The issue's goal is goodput >= 95%.

What is real and what is simulated. Nothing here starts Ray or touches a TPU or the network; time is a
simulated clock, so a month takes seconds and the figures do not depend on the machine's load.

- **Real:** the plan (`experiments/tootsie_8b.py`, planned and resolved by the `Executor`); the
  executor's run loop, the `StepSupervisor`'s attempts within `--max_preemption_retries` and
  `--max_failure_retries`, its status and record writes (to a scratch folder); the classification
  of a lost attempt (`classify_error` through `TpuResources.run`'s conversion `_as_preemption`, and
  `SliceCapacityTimeout` for a wait past `capacity_timeout_s`); the checkpoint cadence
  (`Checkpointer.should_save` and `save` with the recipe's `CheckpointConfig`, the clock
  injected); the metrics lines (`MetricsLogger`, which drops the lines past a checkpoint on resume
  and counts the steps redone); goodput (`record_usage` -> `step_goodput`) and cost (`step_cost`
  with the default price table) read from the records the run wrote.
- **Simulated:** the cluster (a backend whose handle plays one attempt on the clock: waiting for
  whole slices, environment start, restore, compile, steps, saves) and the trace. Each slice
  loses its hosts at Poisson times: the per-run rate is split over the run's slices (so a
  2-slice run sees the reported rate, not twice it; `--rate-per slice` gives each slice the full
  rate); a lost slice comes back after `--replace-min`; during the stall no slice of any type
  comes back. The person who reruns a FAILED experiment (`--force_run_failed true`) does so after
  `--relaunch-h`. Data steps succeed at once and take no time; in-loop evaluations are not played.

Patches, all undone on exit: `time` in the supervisor's module (queue time and durations),
`now_iso` in the record builder (attempt times), `time` in the metrics module (`segment_start`),
and `save_checkpoint` in the checkpoint module (a save moves the clock); the `Checkpointer` takes
the clock as its argument. The record builder's `record_usage` is skipped while the run writes
(it re-reads metrics.jsonl and scans it once per attempt on every write: most of the time here);
goodput and cost are measured once, from the final records, by the real `record_usage`.

    .venv/bin/python benchmarks/preemption_month.py                      # today, and the interval sweep
    .venv/bin/python benchmarks/preemption_month.py --days 2 --intervals 30 --seed 1
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import logging
import math
import os
import random
import sys
import tempfile
import threading
import time
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import ray.exceptions

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import experiments.tootsie_8b as tootsie  # noqa: E402
from marin_lab.cluster.errors import SliceCapacityTimeout  # noqa: E402
from marin_lab.cluster.resources import TpuResources, _as_preemption  # noqa: E402
from marin_lab.execution.config import ExecutorMainConfig  # noqa: E402
from marin_lab.execution.errors import PreemptedError, RunInterruptedError, StepCancelledError, StepFailedError  # noqa: E402
from marin_lab.execution.executor import Executor  # noqa: E402
from marin_lab.execution.plan.resources import attach_hardware  # noqa: E402
from marin_lab.execution.record import builder  # noqa: E402
from marin_lab.execution.record.goodput import CAUSES, total_goodput  # noqa: E402
from marin_lab.execution.record.usage import record_usage, tpu_key  # noqa: E402
from marin_lab.execution.review.cost import money  # noqa: E402
from marin_lab.execution.review.prices import default_prices  # noqa: E402
from marin_lab.execution.run import supervisor  # noqa: E402
from marin_lab.store.step_record import read_step_record  # noqa: E402
from marin_lab.training import checkpoint, metrics  # noqa: E402
from marin_lab.training.checkpoint import Checkpointer  # noqa: E402
from marin_lab.training.config import TrainLmConfig  # noqa: E402
from marin_lab.training.metrics import MetricsLogger, WandbConfig  # noqa: E402

START = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC).timestamp()
GOAL = 0.95

# The reported rate: one long Marin run, 17 preemptions in 74.8 h, 0 failures, all resumed (issue 53).
RATE_PER_H = 17 / 74.8
# Checkpoint throughput per host, from the project's quiet `checkpoint_overhead.py` run (llama_300m,
# 3.3 GB of fp32 params + Adam, local disk; docs/benchmarks.md "Training on CPU"): save 11.5 s, restore 5.6 s.
SAVE_BYTES_PER_S = 3.3e9 / 11.5
RESTORE_BYTES_PER_S = 3.3e9 / 5.6
STATE_BYTES_PER_PARAM = 12  # fp32 params and Adam's two fp32 moments, as the checkpoint holds them
# The compile report's compile seconds for each phase's chosen remat policy (deviceless, libtpu).
COMPILE_REPORTS = {
    "v5e-256x2": "benchmarks/results/tpu_compile_tootsie_remat_kestrel_microbatches2_save_mlp_in_gate_save_mlp.json",
    "v4-2048": "benchmarks/results/tpu_compile_tootsie_remat_ocelot_save_mlp_in_gate.json",
}


@dataclasses.dataclass(frozen=True)
class Assumptions:
    """The figures the simulation plays, each with where it comes from (printed with the results)."""

    rate_per_h: float = RATE_PER_H
    rate_per: str = "run"
    """'run': the rate is the run's, split over its slices; 'slice': every slice at the full rate."""
    replace_min: float = 15.0
    """A lost slice is back (a new spot slice, its hosts in Ray) this long after the loss: assumed."""
    detect_s: float = 30.0
    """From a host's loss to the attempt's end: Ray's time to notice a dead node (slice_runner.py)."""
    env_start_s: float = 120.0
    """Slices held to the trainer's first line (actors, runtime env, imports, jax.distributed): assumed."""
    stall_at_h: float = 100.0
    stall_h: float = 8.0
    """The capacity stall: every slice is taken at `stall_at_h` and none comes back for `stall_h`."""
    notice_s: float = 30.0
    """GCE's preemption notice before a spot VM is reclaimed; the trainer saves at the first step
    boundary inside it (`Trainer`, `distributed.PreemptionAgreement`). 0: notices ignored."""
    relaunch_h: float = 4.0
    """A FAILED experiment (its preemption budget spent) is rerun by a person this long after: assumed."""
    mfu: float | None = None
    """Step time at this MFU; None: the dry run's estimate (`plan_estimate`, its assumed MFU)."""
    save_s: float | None = None
    """Seconds per checkpoint save; None: scaled from the measured per-host throughput."""
    compile_s: float | None = None
    """Seconds of compilation in every attempt's first step; None: the compile report's."""


@dataclasses.dataclass
class Phase:
    """One training step of the plan, as the simulation plays it."""

    name: str
    tpu: str
    slices: int
    chips: int
    hosts: int
    start_step: int
    end_step: int
    step_s: float
    compile_s: float
    save_s: float
    restore_s: float


def compile_seconds(topology: str) -> float:
    report = json.loads((REPO / COMPILE_REPORTS[topology]).read_text())
    return float(next(s["compile_s"] for s in report["steps"] if s.get("chosen")))


def phase_of(config: TrainLmConfig, resources: TpuResources, a: Assumptions) -> Phase:
    """A training step's figures from its resolved config and its plan estimate (the dry run's)."""
    est = config.plan_estimate()
    tpu = resources.tpu_type
    slices = int(resources.slice_counts[-1])
    step_s = est["wall_hours"] * 3600 / est["steps"]
    if a.mfu is not None:
        step_s *= est["assumed_mfu"] / a.mfu
    hosts = tpu.hosts * slices
    state_per_host = est["params"] * STATE_BYTES_PER_PARAM / hosts
    topology = f"{tpu.name}x{slices}" if slices > 1 else tpu.name
    return Phase(
        name=config.output_path.rstrip("/").rsplit("/", 1)[-1],
        tpu=tpu.name,
        slices=slices,
        chips=tpu.chips * slices,
        hosts=hosts,
        start_step=config.num_train_steps - est["steps"],
        end_step=config.num_train_steps,
        step_s=step_s,
        compile_s=a.compile_s if a.compile_s is not None else compile_seconds(topology),
        save_s=a.save_s if a.save_s is not None else state_per_host / SAVE_BYTES_PER_S,
        restore_s=state_per_host / RESTORE_BYTES_PER_S,
    )


class Clock:
    """Simulated seconds since the epoch; `module` stands in for `time` in a patched module."""

    def __init__(self, now: float):
        self.now = now
        self.module = types.SimpleNamespace(
            time=self.time, monotonic=self.time, perf_counter=self.time, sleep=lambda s: None
        )

    def time(self) -> float:
        return self.now

    def iso(self) -> str:
        return datetime.datetime.fromtimestamp(self.now, datetime.UTC).isoformat()


class Trace:
    """Seeded Poisson loss times per slice, drawn as far as asked; a lost slice is down `replace_s`."""

    def __init__(self, seed: int, a: Assumptions):
        self.seed, self.a = seed, a
        self.replace_s = a.replace_min * 60
        self.stall = (START + a.stall_at_h * 3600, START + (a.stall_at_h + a.stall_h) * 3600)
        self._events: dict[str, list[float]] = {}
        self._rng: dict[str, random.Random] = {}

    def events(self, slot: str, until: float) -> list[float]:
        times = self._events.setdefault(slot, [])
        rng = self._rng.setdefault(slot, random.Random(f"{self.seed}:{slot}"))
        rate_s = self.rate_per_slice(slot) / 3600
        while not times or times[-1] < until:
            times.append((times[-1] if times else START) + rng.expovariate(rate_s))
        return times

    def rate_per_slice(self, slot: str) -> float:
        slices = int(slot.split("/")[1])
        return self.a.rate_per_h / (slices if self.a.rate_per == "run" else 1)

    def next_loss(self, slot: str, after: float) -> float:
        return next(t for t in self.events(slot, after) if t > after)

    def up_from(self, slots: Sequence[str], t: float) -> float:
        """The first time >= t when every slot is up and the stall is over."""
        while True:
            moved = t
            if self.stall[0] <= moved < self.stall[1]:
                moved = self.stall[1]
            for slot in slots:
                for e in self.events(slot, moved):
                    if e <= moved < e + self.replace_s:
                        moved = e + self.replace_s
            if moved == t:
                return t
            t = moved

    def up_seconds(self, slot: str, t0: float, t1: float) -> float:
        """How long `slot` was up within [t0, t1)."""
        down = [
            (max(e, t0), min(e + self.replace_s, t1))
            for e in self.events(slot, t1)
            if e < t1 and e + self.replace_s > t0
        ]
        down.append((max(self.stall[0], t0), min(self.stall[1], t1)))
        covered, last = 0.0, t0
        for lo, hi in sorted(d for d in down if d[1] > d[0]):
            lo = max(lo, last)
            if hi > lo:
                covered, last = covered + hi - lo, hi
        return max(t1 - t0 - covered, 0.0)


class _Lost(Exception):
    """The slice went away during a save."""


@dataclasses.dataclass
class Ledger:
    """What the trace did to the run, counted by the simulation (the records count the same)."""

    losses: int = 0
    """Attempts ended by a slice lost under them (the trace's preemptions; the stall's first one included)."""
    capacity_timeouts: int = 0
    relaunches: int = 0
    """Driver runs that ended FAILED (with no failure recorded: the preemption budget was spent), rerun."""
    idle_chip_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """Chip-seconds, by accelerator, of slices that were up while a multislice attempt waited for the rest."""
    misclassified: int = 0
    held_s: float = 0.0
    """Seconds the run held whole slices (its attempts' paid time): the trace's rate applies to these."""


class World:
    """The simulated cluster's state: clock, trace, checkpoints, the phases by output path."""

    def __init__(self, seed: int, a: Assumptions, horizon_s: float | None, interval_s: float | None):
        self.a = a
        self.clock = Clock(START)
        self.trace = Trace(seed, a)
        self.horizon = START + horizon_s if horizon_s is not None else math.inf
        self.interval_s = interval_s
        self.ledger = Ledger()
        self.rng = random.Random(f"{seed}:errors")
        self.checkpoint: dict[str, int] = {}
        self.phases: dict[str, Phase] = {}
        self.cancel: threading.Event | None = None
        self.attempt_end = math.inf
        """When the attempt playing now ends (a lost slice or the horizon): a save past it never completes."""


class SliceAttempt:
    """One attempt of a training step on simulated slices, with the executor's StepHandle surface.

    The supervisor reads `pending_reason`, then calls `wait`: in the queue the clock moves to when
    every slice is whole (or `capacity_timeout_s` passes); once placed, `wait` plays the training
    to its end, a lost slice, or the horizon."""

    def __init__(self, world: World, phase: Phase, config: TrainLmConfig, resources: TpuResources, step_name: str):
        self.world, self.phase, self.config, self.resources, self.step_name = world, phase, config, resources, step_name
        self.slots = [f"{phase.tpu}/{phase.slices}/{i}" for i in range(phase.slices)]
        self.queued = True
        self.submitted = world.clock.now
        self.outcome: tuple[str, Any] | None = None
        self.placed_hardware: dict[str, Any] | None = None
        self.hardware = {
            "kind": "tpu",
            "type": phase.tpu,
            "slices": phase.slices,
            "hosts": phase.hosts,
            "chips": phase.chips,
            "slice_names": self.slots,
        }

    @property
    def pending_reason(self) -> str | None:
        if not self.queued:
            return None
        t = self.world.clock.now
        if self.world.trace.up_from(self.slots, t) == t:
            self.queued = False
            return None
        return f"waiting for {self.phase.slices} x {self.phase.tpu}: not every slice is in the cluster (simulated)"

    def wait(self, timeout: float) -> bool:
        if self.outcome is not None:
            return True
        w, clock = self.world, self.world.clock
        if self.queued:
            ready = w.trace.up_from(self.slots, clock.now)
            deadline = self.submitted + self.resources.capacity_timeout_s
            until = min(ready, deadline, w.horizon)
            if self.phase.slices > 1:
                up = sum(w.trace.up_seconds(s, clock.now, until) for s in self.slots)
                key = str(tpu_key(self.phase.tpu))
                w.ledger.idle_chip_s[key] = (
                    w.ledger.idle_chip_s.get(key, 0.0) + up * self.phase.chips / self.phase.slices
                )
            clock.now = until
            if until == w.horizon and ready > until:
                self.outcome = ("horizon", None)
            elif ready > deadline:
                w.ledger.capacity_timeouts += 1
                self.outcome = (
                    "error",
                    SliceCapacityTimeout(
                        f"step {self.step_name!r}: only 0 whole {self.phase.tpu} slice(s) free after "
                        f"{self.resources.capacity_timeout_s:.0f}s, need {self.phase.slices} (simulated stall)"
                    ),
                )
            return self.outcome is not None
        self.placed_hardware = self.hardware
        placed = clock.now
        self.outcome = self._train()
        w.ledger.held_s += clock.now - placed
        return True

    def result(self) -> tuple[Any, dict[str, Any]]:
        assert self.outcome is not None
        kind, value = self.outcome
        if kind == "ok":
            return value, {"hardware": self.hardware}
        if kind == "horizon":
            raise StepCancelledError(f"step '{self.step_name}': the simulated horizon was reached")
        # What TpuResources.run does with the slice runner's error: lost hardware becomes a preemption.
        converted = _as_preemption(value, self.step_name, f"{self.phase.tpu} slice hosts")
        if not isinstance(converted, PreemptedError):
            self.world.ledger.misclassified += 1
            raise StepFailedError(
                f"step '{self.step_name}' raised {type(value).__name__}: {value}", hardware=self.hardware
            )
        attach_hardware(converted, self.hardware)
        raise converted

    def cancel(self) -> None:
        pass

    def _train(self) -> tuple[str, Any]:
        """The trainer's loop on the clock: the real Checkpointer decides the saves, the real
        MetricsLogger keeps the lines goodput reads."""
        w, clock, p = self.world, self.world.clock, self.phase
        loss_at, lost_slot = min((w.trace.next_loss(s, clock.now), s) for s in self.slots)
        if clock.now < w.trace.stall[0] <= loss_at:
            loss_at = w.trace.stall[0]
        end = min(loss_at, w.horizon)

        def advance(seconds: float) -> bool:
            if clock.now + seconds > end:
                clock.now = end
                return False
            clock.now += seconds
            return True

        out = self.config.output_path
        resume = w.checkpoint.get(out)
        restoring = resume is not None or p.start_step > 0  # a later phase starts from the last one's
        start_step = resume if resume is not None else p.start_step
        w.attempt_end = end
        ran = advance(w.a.env_start_s) and (not restoring or advance(p.restore_s))
        if ran:
            ckpt_config = self.config.checkpoint
            if w.interval_s is not None:
                ckpt_config = dataclasses.replace(ckpt_config, save_interval_s=w.interval_s)
            checkpointer = Checkpointer(os.path.join(out, "checkpoints"), ckpt_config, clock=clock.time)
            log = MetricsLogger(out, WandbConfig(enabled=False), "sim", {}, resume_step=resume or 0)
            if restoring:
                log.note("restore_s", p.restore_s)
            step, train_s, first = start_step, 0.0, True
            while step < p.end_step:
                took = p.step_s + (p.compile_s if first else 0.0)
                if not advance(took):
                    break
                step, train_s = step + 1, train_s + took
                # The VM's metadata says preempted `notice_s` before the loss: the trainer saves at
                # the step boundary after it and ends the attempt (the slice is gone at the loss).
                noticed = w.a.notice_s > 0 and end == loss_at and clock.now >= end - w.a.notice_s
                save = (
                    checkpointer.should_save(step, is_last=step == self.config.num_train_steps)
                    or step == p.end_step
                    or (noticed and step < p.end_step)
                )
                if first or save:
                    log.note("train_s", train_s)
                    if first:
                        log.note("first_step_s", took)
                    log.log({"step": step, "time": clock.now})
                    train_s, first = 0.0, False
                if save:
                    saving = clock.now
                    try:
                        checkpointer.save(step, None, {})
                    except _Lost:
                        break
                    log.note("checkpoint_s", clock.now - saving, on_last_line=True)
                    w.checkpoint[out] = step
                if noticed and step < p.end_step:
                    clock.now = end
                    break
            if train_s > 0:  # the trainer's last line before the loss (it flushes every 10 s)
                log.note("train_s", train_s)
                log.log({"step": step, "time": clock.now})
            log.flush()
            if step == p.end_step and clock.now <= end:
                return "ok", {"final_step": step}
        if end == w.horizon and w.horizon < loss_at:
            if w.cancel is not None:
                w.cancel.set()
            return "horizon", None
        clock.now = min(clock.now + w.a.detect_s, w.horizon)
        w.ledger.losses += 1
        # How the slice runner hears of it: the lost host's actor dies with its VM, or its node is
        # listed dead; either is Ray's own error, classified by the one table.
        error: Exception = (
            ray.exceptions.ActorDiedError()
            if w.rng.random() < 0.5
            else ray.exceptions.NodeDiedError(f"a host of slice {lost_slot} lost its node (simulated)")
        )
        return "error", error


class _Done:
    """A step the simulation does not play (downloads, tokenizing): it succeeds at once."""

    pending_reason = None
    placed_hardware = None

    def wait(self, timeout: float) -> bool:
        return True

    def result(self) -> tuple[Any, dict[str, Any]]:
        return {}, {}

    def cancel(self) -> None:
        pass


class SimulatedCluster:
    """The executor's backend: TPU training steps get a `SliceAttempt`, everything else `_Done`."""

    name = "ray"

    def __init__(self, world: World):
        self.world = world

    def submit(self, fn: Any, config: Any, *, step_name: str, resources: Any, guard: Any) -> Any:
        if isinstance(config, TrainLmConfig) and isinstance(resources, TpuResources):
            phase = self.world.phases.setdefault(config.output_path, phase_of(config, resources, self.world.a))
            return SliceAttempt(self.world, phase, config, resources, step_name)
        return _Done()

    def shutdown(self) -> None:
        pass


class SimulatedExecutor(Executor):
    """The real executor with the simulated cluster as its backend."""

    world: World

    def _make_backend(self) -> Any:
        return SimulatedCluster(self.world)


@contextlib.contextmanager
def simulated_time(world: World) -> Iterator[None]:
    """The modules that read the wall clock read the simulated one; a save takes `save_s`."""

    def save_checkpoint(path: str, state: Any, metadata: dict[str, Any]) -> None:
        phase = world.phases[path.rsplit("/checkpoints/", 1)[0]]
        if world.clock.now + phase.save_s > world.attempt_end:
            world.clock.now = world.attempt_end
            raise _Lost(path)
        world.clock.now += phase.save_s

    with (
        mock.patch.object(supervisor, "time", world.clock.module),
        mock.patch.object(builder, "now_iso", world.clock.iso),
        mock.patch.object(metrics, "time", world.clock.module),
        mock.patch.object(checkpoint, "save_checkpoint", save_checkpoint),
        # Usage is measured once, from the final records, by the same `record_usage`; on every
        # write it would re-read metrics.jsonl and scan it per attempt (two thirds of the time here).
        mock.patch.object(builder, "record_usage", lambda record, rows=None: {}),
    ):
        yield


@dataclasses.dataclass
class Result:
    interval_s: float | None
    goodput: dict[str, Any]
    wall_h: float
    paid_chip_h: float
    cost: float
    idle_chip_h: float
    idle_cost: float
    preemptions_recorded: int
    failures_recorded: int
    ledger: Ledger
    steps_done: dict[str, int]
    finished: bool
    phases: list[Phase]


def simulate(seed: int, a: Assumptions, *, days: float | None, interval_s: float | None, scratch: str) -> Result:
    """Run the plan to its end (or the horizon) under the trace; rerun it after each FAILED run."""
    world = World(seed, a, days * 86400 if days is not None else None, interval_s)
    prefix = tempfile.mkdtemp(prefix="run-", dir=scratch)
    settings = ExecutorMainConfig(prefix=prefix, backend="ray", ray_address="simulated")
    finished = False
    with simulated_time(world):
        while world.clock.now < world.horizon:
            executor = SimulatedExecutor(settings, script=str(REPO / "experiments/tootsie_8b.py"))
            executor.world = world
            world.cancel = executor.cancel
            try:
                report = executor.run([tootsie.jellyfish], force_run_failed=True, raise_on_failure=False)
            except RunInterruptedError:
                break
            if not report.failed:
                finished = True
                break
            world.clock.now += a.relaunch_h * 3600
            world.ledger.relaunches += 1
    plan = executor.last_plan
    assert plan is not None
    records = [read_step_record(ps.output_path) for ps in plan.steps if ps.output_path in world.phases]
    usages = [record_usage(r) for r in records if r is not None]
    prices = default_prices()
    goodput = total_goodput([u.get("goodput") for u in usages]) or {}
    idle = {k: v / 3600 for k, v in world.ledger.idle_chip_s.items()}
    return Result(
        interval_s=interval_s,
        goodput=goodput,
        wall_h=(world.clock.now - START) / 3600,
        paid_chip_h=sum(u.get("accelerator_hours") or 0.0 for u in usages),
        cost=sum(money(u, prices) or 0.0 for u in usages),
        idle_chip_h=sum(idle.values()),
        idle_cost=money({"accelerator_hours": sum(idle.values()), "by_accelerator": idle}, prices) or 0.0,
        preemptions_recorded=sum(1 for r in records if r for at in r.attempts if at.kind == "preemption"),
        failures_recorded=sum(1 for r in records if r for at in r.attempts if at.kind == "failure"),
        ledger=world.ledger,
        steps_done={p.name: world.checkpoint.get(out, p.start_step) - p.start_step for out, p in world.phases.items()},
        finished=finished,
        phases=list(world.phases.values()),
    )


def badput_text(g: dict[str, Any]) -> str:
    causes = g.get("badput_chip_hours") or {}
    paid = g.get("paid_chip_hours") or 0.0
    shares = [(k, 100 * causes[k] / paid) for k in CAUSES if paid and causes.get(k)]
    return ", ".join(f"{k.replace('_', ' ')} {share:.1f}%" for k, share in shares if share >= 0.05)


def row(label: str, r: Result) -> str:
    g, led = r.goodput, r.ledger
    wall = f"{r.wall_h / 24:.1f} d" + ("" if r.finished else " (unfinished)")
    return (
        f"| {label} | {100 * (g.get('goodput') or 0.0):.2f}% | {wall} | {g.get('paid_chip_hours', 0.0):,.0f} "
        f"| ${r.cost:,.0f} | {r.idle_chip_h:,.0f} (${r.idle_cost:,.0f}) | {led.losses} + {led.capacity_timeouts} "
        f"| {led.relaunches} | {badput_text(g)} |"
    )


def describe(r: Result, a: Assumptions, seed: int) -> list[str]:
    """What was played and where each figure comes from."""
    settings = ExecutorMainConfig()
    c = tootsie.CHECKPOINTS
    resources = tootsie.kestrel.resources
    assert isinstance(resources, TpuResources)
    lines = [
        f"seed {seed}; a simulated clock: the figures do not depend on this machine's load",
        "plan (experiments/tootsie_8b.py, planned by the executor; each step's resolved config):",
    ]
    for p in r.phases:
        lines.append(
            f"  {p.name}: {p.slices} x {p.tpu} ({p.chips} chips, {p.hosts} hosts), "
            f"steps {p.start_step:,}-{p.end_step:,}, {p.step_s:.2f} s/step, compile {p.compile_s:.0f} s, "
            f"save {p.save_s:.1f} s, restore {p.restore_s:.1f} s"
        )
    step_time = "the dry run's estimate (plan_estimate at its assumed MFU)" if a.mfu is None else f"MFU {a.mfu}"
    lines += [
        "where the figures come from:",
        f"  step time: {step_time}",
        "  compile: the compile report's compile_s for the phase's chosen remat "
        "(benchmarks/results/tpu_compile_tootsie_remat_*.json), paid by every attempt (the hosts share no "
        "compilation cache)" + (f"; overridden: {a.compile_s:g} s" if a.compile_s is not None else ""),
        "  save/restore: params x 12 bytes (fp32 params + Adam) per host at the per-host rate of "
        "checkpoint_overhead.py's llama_300m run (3.3 GB: save 11.5 s, restore 5.6 s)"
        + (f"; save overridden: {a.save_s:g} s" if a.save_s is not None else ""),
        f"  preemptions: {a.rate_per_h:.3f}/h (17 in 74.8 h, Marin's users), seeded Poisson per slice, "
        + ("the run's rate split over its slices" if a.rate_per == "run" else "every slice at that rate"),
        f"  assumed: a lost slice is back after {a.replace_min:g} min; a loss is noticed in {a.detect_s:g} s; "
        f"environment start {a.env_start_s:g} s; a FAILED run is rerun after {a.relaunch_h:g} h",
        f"  capacity stall: every slice taken at hour {a.stall_at_h:g}, none back for {a.stall_h:g} h",
        (
            f"  preemption notice: {a.notice_s:g} s before each loss (GCE spot); the trainer saves at the next "
            "step boundary and ends the attempt"
            if a.notice_s > 0
            else "  preemption notices: ignored (--notice-s 0): each loss redoes the steps since the last save"
        ),
        "  not played: data steps, in-loop evaluations, the final evaluation. Idle: the slice of a 2-slice run "
        "left up while the other is replaced (not in the records)",
        f"today's settings: save_interval_s={c.save_interval_s:g}, save_every_steps={c.save_every_steps}, "
        f"max_preemption_retries={settings.max_preemption_retries}, "
        f"max_failure_retries={settings.max_failure_retries}, capacity_timeout_s={resources.capacity_timeout_s:g}",
    ]
    return lines


def check(r: Result) -> str | None:
    """Why a run's records disagree with the trace, or None."""
    trace = r.ledger.losses + r.ledger.capacity_timeouts
    if r.preemptions_recorded == trace and r.failures_recorded == 0 and r.ledger.misclassified == 0:
        return None
    return (
        f"interval {r.interval_s}: the records hold {r.preemptions_recorded} preemptions and {r.failures_recorded} "
        f"failures; the trace made {trace} preemptions"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--days", type=float, default=None, help="stop after this many simulated days (default: the end)")
    ap.add_argument("--intervals", default="5,10,15,20,45,60,120", help="save_interval_s to sweep, in minutes")
    ap.add_argument("--rate-per", choices=("run", "slice"), default="run")
    ap.add_argument("--stall-at-h", type=float, default=Assumptions.stall_at_h)
    ap.add_argument("--stall-hours", type=float, default=Assumptions.stall_h)
    ap.add_argument("--relaunch-h", type=float, default=Assumptions.relaunch_h)
    ap.add_argument(
        "--notice-s", type=float, default=Assumptions.notice_s, help="preemption notice seconds (0: ignored)"
    )
    ap.add_argument("--replace-min", type=float, default=Assumptions.replace_min)
    ap.add_argument("--env-start-s", type=float, default=Assumptions.env_start_s)
    ap.add_argument("--mfu", type=float, default=None, help="step time at this MFU instead of the dry run's")
    ap.add_argument("--save-s", type=float, default=None, help="seconds per save instead of the scaled measurement")
    ap.add_argument("--compile-s", type=float, default=None, help="compile seconds per attempt instead of the report's")
    ap.add_argument(
        "--what-if-compile-s",
        type=float,
        default=60.0,
        help="one more run at the best interval with this compile time per attempt (0: none)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # hundreds of retried attempts: the table says it
    a = Assumptions(
        rate_per=args.rate_per,
        stall_at_h=args.stall_at_h,
        stall_h=args.stall_hours,
        relaunch_h=args.relaunch_h,
        notice_s=args.notice_s,
        replace_min=args.replace_min,
        env_start_s=args.env_start_s,
        mfu=args.mfu,
        save_s=args.save_s,
        compile_s=args.compile_s,
    )
    today_s = float(tootsie.CHECKPOINTS.save_interval_s or 0.0)
    intervals = [float(m) * 60 for m in args.intervals.split(",") if m.strip() and float(m) * 60 != today_s]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="preemption-month-") as scratch:
        today = simulate(args.seed, a, days=args.days, interval_s=None, scratch=scratch)
        runs = [(today_s, today)] + [
            (s, simulate(args.seed, a, days=args.days, interval_s=s, scratch=scratch)) for s in intervals
        ]
        best_s, best = max(runs, key=lambda x: x[1].goodput.get("goodput") or 0.0)
        what_if = None
        if args.what_if_compile_s:
            cached = dataclasses.replace(a, compile_s=args.what_if_compile_s)
            what_if = simulate(args.seed, cached, days=args.days, interval_s=best_s, scratch=scratch)
    command = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"# A month of preemptions, simulated ({datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC)")
    print(f"command: benchmarks/preemption_month.py {command}".rstrip())
    print("\n".join(describe(today, a, args.seed)))
    print()
    print(
        "| save interval | goodput | wall time | paid chip-hours | cost (records) | idle chip-hours (cost) "
        "| preemptions: trace + capacity timeouts | reruns after FAILED | badput, share of paid |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for s, r in sorted(runs, key=lambda x: x[0]):
        print(row(f"{s / 60:g} min" + (" (today)" if r is today else ""), r))
    if what_if is not None:
        print(row(f"{best_s / 60:g} min, compile {args.what_if_compile_s:g} s (what if)", what_if))
    gt, gb = today.goodput.get("goodput") or 0.0, best.goodput.get("goodput") or 0.0
    print()
    print(f"best interval: {best_s / 60:g} min, goodput {100 * gb:.2f}%; today ({today_s / 60:g} min): {100 * gt:.2f}%")
    verdict = {True: "met", False: "NOT met"}
    print(f"goal goodput >= {GOAL:.0%}: today {verdict[gt >= GOAL]}; best {verdict[gb >= GOAL]}")
    if what_if is not None:
        gw = what_if.goodput.get("goodput") or 0.0
        print(
            f"what if each attempt compiled in {args.what_if_compile_s:g} s (a compilation cache the hosts share, "
            f"not in the product): {100 * gw:.2f}% at {best_s / 60:g} min ({verdict[gw >= GOAL]})"
        )
    problems = [p for r in [today, *(r for _, r in runs), *([what_if] if what_if else [])] if (p := check(r))]
    print(
        "\n".join(f"check FAILED: {p}" for p in problems)
        or "checks: in every run the records hold the trace's preemptions, and no failure"
    )
    print(f"{len(runs) + (what_if is not None)} runs, {time.perf_counter() - started:.0f} s of this machine's time")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
