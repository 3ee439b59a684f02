"""A step queued for resources is WAITING (and says for what), not RUNNING; its queue time is kept
apart from its duration and its attempt's time (which is what cost counts)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import json
import logging
import os
import pathlib
import threading
import time
from typing import Any

import pytest

from marin_lab import cli
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from marin_lab.execution.plan.resources import RunOutcome
from marin_lab.execution.run.backends import StepHandle
from marin_lab.store.step_record import read_step_record


@dataclasses.dataclass(frozen=True)
class QueueConfig:
    output_path: str
    name: str
    others: tuple[str, ...] = ()


SEEN: dict[str, dict[str, Any]] = {}


def wait_for_the_other(cfg: QueueConfig) -> str:
    """Runs until each other step is seen WAITING with its reason, or finished."""
    deadline = time.monotonic() + 20
    for other in cfg.others:
        while time.monotonic() < deadline:
            try:
                with open(os.path.join(other, ".executor_status")) as f:
                    st = json.load(f)
            except (FileNotFoundError, json.JSONDecodeError):
                continue
            # The reason names the holder once the driver has seen this step's work start (its next poll).
            if "held by" in (st.get("waiting_for") or "") or st.get("status") == "SUCCESS":
                SEEN[cfg.name] = st
                if st.get("waiting_for"):  # what `marin-lab status` shows meanwhile
                    listing = io.StringIO()
                    with contextlib.redirect_stdout(listing):
                        cli.main(["status", "--prefix", os.path.dirname(os.path.dirname(other))])
                    SEEN[cfg.name]["listing"] = listing.getvalue()
                break
            time.sleep(0.02)
    with open(os.path.join(cfg.output_path, "out.txt"), "w") as f:
        f.write(cfg.name)
    return cfg.name


class _OneCpuHandle(StepHandle):
    """A step on a one-CPU cluster: its work starts (its log opens, as a worker's does) once it holds the CPU."""

    def __init__(self, backend: OneCpuBackend, fn: Any, config: Any):
        spec, inner = fn.args  # with_step_logs' partial(call_with_logs, spec, fn)
        self.done = threading.Event()
        self.out: Any = None

        def go() -> None:
            with backend.cpu:
                backend.free = 0.0
                path = spec.url.removeprefix("file://")
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "a").close()
                try:
                    self.out = inner(config)
                finally:
                    backend.free = 1.0
            self.done.set()

        threading.Thread(target=go, daemon=True).start()

    def wait(self, timeout: float) -> bool:
        return self.done.wait(timeout)

    def result(self) -> tuple[Any, dict[str, Any]]:
        return self.out, {}

    def cancel(self) -> None:
        pass


class OneCpuBackend:
    name = "one-cpu"

    def __init__(self) -> None:
        self.cpu = threading.Lock()
        self.free = 1.0

    def submit(self, fn: Any, config: Any, *, step_name: str, resources: Any, guard: Any) -> StepHandle:
        return _OneCpuHandle(self, fn, config)

    def available(self) -> dict[str, float]:
        return {"CPU": self.free}

    def shutdown(self) -> None:
        pass


class OneCpuExecutor(Executor):
    def _make_backend(self) -> Any:
        return OneCpuBackend()


def _iso(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


@pytest.mark.slow
def test_a_step_queued_behind_another_waits_and_says_for_what(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="marin_lab")
    executor = OneCpuExecutor(ExecutorMainConfig(prefix=str(tmp_path), backend="local", max_concurrent=2))
    executor.step_settings = dataclasses.replace(executor.step_settings, waiting_after_s=0.1)
    steps = [
        ExecutorStep(
            name=f"queue/{n}",
            fn=wait_for_the_other,
            config=QueueConfig(output_path=this_output_path(), name=versioned(n), others=()),
        )
        for n in ("a", "b")
    ]
    plan = executor.plan(steps)
    outs = {ps.name.rsplit("/", 1)[1]: ps.output_path for ps in plan.steps}
    steps = [
        dataclasses.replace(
            s,
            config=dataclasses.replace(s.config, others=tuple(outs[o] for o in outs if o != n)),
        )
        for s, n in zip(steps, ("a", "b"), strict=True)
    ]
    SEEN.clear()
    report = executor.run(steps)
    assert sorted(report.executed) == sorted(ps.identity for ps in report.plan.steps)

    # The step that ran first saw the other one WAITING, with what it asked, what is free, what holds it.
    first = next(n for n, st in SEEN.items() if st.get("waiting_for"))
    second = "b" if first == "a" else "a"
    waiting = SEEN[first]
    assert waiting["status"] == "WAITING"
    first_id = next(ps.identity for ps in report.plan.steps if ps.name == f"queue/{first}")
    assert waiting["waiting_for"] == f"waiting for 1 CPU (0 CPU free); held by running step '{first_id}' (1 CPU)"
    assert any("waiting for 1 CPU" in r.getMessage() for r in caplog.records)
    assert waiting["waiting_for"] in waiting["listing"]
    assert "WAITING" in waiting["listing"] and "RUNNING" in waiting["listing"]

    # The waiting step's time counts from when its work started; the queue is kept beside it.
    out = next(ps.output_path for ps in report.plan.steps if ps.name == f"queue/{second}")
    with open(os.path.join(out, ".executor_status")) as f:
        status = json.load(f)
    assert status["status"] == "SUCCESS" and status["queued_s"] > 0
    record = read_step_record(out)
    assert record is not None
    attempt = record.attempts[-1]
    assert attempt.queued_s == status["queued_s"]
    assert _iso(attempt.started) > _iso(attempt.submitted)
    worked = (_iso(attempt.ended) - _iso(attempt.started)).total_seconds()
    assert status["duration_s"] <= worked + 0.05


class SlowSlices:
    """A HardwareRunner that reports why it waits (as the slice runner does) before its hardware is placed."""

    REASON = "waiting 3 s for 2 x v4-16: 1 slice ready, the other not in the cluster"

    def describe(self) -> dict[str, Any]:
        return {"kind": "slow-slices"}

    def validate(self) -> None:
        pass

    def run(self, fn, config, *, step_name, cancel=None, on_hardware=None, on_pending=None):
        on_pending(self.REASON)
        status = os.path.join(config.output_path, ".executor_status")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # until the driver has recorded the reason
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError), open(status) as f:
                if json.load(f).get("waiting_for") == self.REASON:
                    break
            time.sleep(0.02)
        time.sleep(0.1)  # the slices arrive a while later: a queue the record keeps (it keeps >= 50 ms)
        hardware = {"kind": "tpu", "type": "v4-16", "slices": 2}
        on_hardware(hardware)
        return RunOutcome(fn(config), hardware)


class RunnerBackend:
    name = "runner"

    def submit(self, fn: Any, config: Any, *, step_name: str, resources: Any, guard: Any) -> StepHandle:
        from marin_lab.execution.run.backends import _RunnerHandle

        return _RunnerHandle(resources, fn, config, step_name)

    def shutdown(self) -> None:
        pass


class RunnerExecutor(Executor):
    def _make_backend(self) -> Any:
        return RunnerBackend()


def test_a_hardware_runner_that_waits_for_slices_is_waiting_with_its_own_reason(tmp_path, caplog):
    step = ExecutorStep(
        name="train/slices",
        fn=wait_for_the_other,
        config=QueueConfig(output_path=this_output_path(), name=versioned("s")),
        resources=SlowSlices(),
    )
    caplog.set_level(logging.INFO, logger="marin_lab")
    report = RunnerExecutor(ExecutorMainConfig(prefix=str(tmp_path), backend="local"), script="x.py").run([step])
    [identity] = report.executed
    assert f"step '{identity}': {SlowSlices.REASON}" in caplog.text
    record = read_step_record(str(tmp_path / identity))
    assert record is not None and record.attempts[-1].hardware == {"kind": "tpu", "type": "v4-16", "slices": 2}
    # The wait for the slices is queue time, not the step's work (what its duration and cost count).
    assert (record.attempts[-1].queued_s or 0) > 0


def test_each_state_of_a_fresh_steps_status_is_written_once(tmp_path, monkeypatch):
    """WAITING when the run queues the step (its submission leaves it in place), then RUNNING, then
    SUCCESS: a reader sees every state, and the status file is rewritten no more than that."""
    from marin_lab.execution.state import status as status_module
    from marin_lab.store.layout import STATUS_FILE
    from tests.executor_steps import WriteConfig, write_text

    writes: list[tuple[str | None, str]] = []
    write_json = status_module.write_json

    def spy(url: str, obj: Any, **kwargs: Any) -> None:
        if url.endswith(STATUS_FILE):
            before = json.loads(pathlib.Path(url).read_text())["status"] if os.path.exists(url) else None
            writes.append((before, obj["status"]))
        write_json(url, obj, **kwargs)

    monkeypatch.setattr(status_module, "write_json", spy)
    executor = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local"))
    executor.step_settings = dataclasses.replace(executor.step_settings, waiting_after_s=60.0)
    step = ExecutorStep(name="once/a", fn=write_text, config=WriteConfig(output_path=this_output_path(), text="a"))
    executor.run([step])
    assert writes == [("WAITING", "RUNNING"), ("RUNNING", "SUCCESS")]
