"""Every attempt of a HardwareRunner step lists in the record the hardware it ran on: a preempted or
failed attempt through its error (the runner attaches it), the successful one through its
RunOutcome. The runner here runs `fn` in the driver, so no Ray cluster is needed."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import threading
import time

import pytest

from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from marin_lab.execution.errors import PreemptedError
from marin_lab.execution.plan.resources import RunOutcome, attach_hardware
from marin_lab.execution.run import backends
from marin_lab.store.step_record import read_step_record
from tests.executor_steps import WriteConfig, write_text


@dataclasses.dataclass(frozen=True)
class ScriptedRunner:
    """Call n places its 'hosts' on node-n, then does what `script[n]` says."""

    script: tuple[str, ...]
    calls: list = dataclasses.field(default_factory=list, compare=False)

    def describe(self) -> dict:
        return {"kind": "scripted"}

    def validate(self) -> None:
        pass

    def run(self, fn, config, *, step_name, cancel=None) -> RunOutcome:
        n = len(self.calls)
        self.calls.append(step_name)
        hardware = {"kind": "scripted", "nodes": [f"node-{n}"]}
        if self.script[n] == "preempt":
            try:
                raise ConnectionError("the host's node went away")  # what Ray raises, stood in for
            except ConnectionError as lost:
                attach_hardware(lost, hardware)
                raise PreemptedError(f"step {step_name!r} lost its hosts") from lost  # found along the chain
        if self.script[n] == "raise":
            bug = ValueError("a bug in the step")
            attach_hardware(bug, hardware)
            raise bug
        return RunOutcome(fn(config), hardware)


@pytest.fixture
def ray_up(monkeypatch):
    """The ray backend believing a Ray is up (the caller's own): it starts and stops nothing."""
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(backends, "_RAY_USERS", 0)


def test_a_preempted_and_a_failed_attempt_list_their_hardware_like_the_successful_one(ray_up, tmp_path):
    runner = ScriptedRunner(("preempt", "raise", "ok"))
    step = ExecutorStep(
        name="hw/a",
        fn=write_text,
        resources=runner,
        config=WriteConfig(output_path=this_output_path(), text=versioned("x")),
    )
    report = Executor(
        ExecutorMainConfig(prefix=str(tmp_path), backend="ray", max_preemption_retries=1, max_failure_retries=1)
    ).run([step])

    out = pathlib.Path(report.plan.steps[0].output_path)
    record = read_step_record(str(out))
    assert [(a.kind, a.status) for a in record.attempts] == [
        ("preemption", "FAILED"),
        ("failure", "FAILED"),
        (None, "SUCCESS"),
    ]
    assert [a.hardware["nodes"] for a in record.attempts] == [["node-0"], ["node-1"], ["node-2"]]
    assert record.hardware == record.attempts[-1].hardware  # the step's own, as before
    raw = (out / ".executor_info").read_text()
    assert json.loads(raw)["attempts"][0]["hardware"] == {"kind": "scripted", "nodes": ["node-0"]}
    assert json.dumps(record.to_json(), indent=2) + "\n" == raw


@dataclasses.dataclass(frozen=True)
class PlacingRunner:
    """Reports its hardware as placed, then runs only once the test saw it in the RUNNING record."""

    seen: threading.Event = dataclasses.field(default_factory=threading.Event, compare=False)

    def describe(self) -> dict:
        return {"kind": "placing"}

    def validate(self) -> None:
        pass

    def run(self, fn, config, *, step_name, cancel=None, on_hardware=None) -> RunOutcome:
        hardware = {"kind": "placing", "nodes": ["node-a"]}
        on_hardware(hardware)
        assert self.seen.wait(60), "the RUNNING record never listed the placed hardware"
        return RunOutcome(fn(config), hardware)


def test_placed_hardware_is_in_the_running_record_while_the_attempt_runs(ray_up, tmp_path):
    """So an attempt whose driver is killed mid-run still says what it ran on."""
    runner = PlacingRunner()
    step = ExecutorStep(
        name="hw/placed",
        fn=write_text,
        resources=runner,
        config=WriteConfig(output_path=this_output_path(), text=versioned("y")),
    )
    done: dict = {}
    driver = threading.Thread(
        target=lambda: done.setdefault(
            "report", Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="ray")).run([step])
        )
    )
    driver.start()
    running = None
    deadline = time.monotonic() + 60
    while running is None and time.monotonic() < deadline and driver.is_alive():
        for info in tmp_path.glob("hw/placed-*/.executor_info"):
            record = json.loads(info.read_text())
            if record["status"] == "RUNNING" and record["attempts"][0].get("hardware"):
                running = record
        time.sleep(0.05)
    runner.seen.set()
    driver.join(60)
    assert running is not None and running["attempts"][0]["hardware"] == {"kind": "placing", "nodes": ["node-a"]}
    final = read_step_record(done["report"].plan.steps[0].output_path)
    assert final.status == "SUCCESS" and final.attempts[0].hardware == {"kind": "placing", "nodes": ["node-a"]}
