"""A three-step experiment for the launch tests: `first -> gated -> last`.

    python tests/launch_experiment.py EVENTS GATE [executor_main flags...]

Each step appends `start NAME PID` and `end NAME PID` to EVENTS (a shared file), so a test counts how
often each step ran and finished; `gated` waits, once started, until the file GATE exists, so a
test can kill the driver while the pipeline is provably in the middle.
"""

import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from marin_lab.execution import ExecutorStep, executor_main, output_path_of, this_output_path, versioned  # noqa: E402


@dataclasses.dataclass(frozen=True)
class StepConfig:
    output_path: str
    text: str
    events: str
    gate: str | None = None
    input_path: str | None = None


def _event(cfg: StepConfig, what: str) -> None:
    fd = os.open(cfg.events, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{what} {cfg.text} {os.getpid()}\n".encode())
    os.close(fd)


def write_step(cfg: StepConfig) -> None:
    _event(cfg, "start")
    while cfg.gate and not os.path.exists(cfg.gate):
        time.sleep(0.05)
    body = cfg.text
    if cfg.input_path:
        with open(os.path.join(cfg.input_path, "data.txt")) as f:
            body = f.read() + "\n" + body
    os.makedirs(cfg.output_path, exist_ok=True)
    with open(os.path.join(cfg.output_path, "data.txt"), "w") as f:
        f.write(body)
    _event(cfg, "end")


if __name__ == "__main__":
    events, gate, *flags = sys.argv[1:]
    first = ExecutorStep(
        name="launch/first",
        fn=write_step,
        config=StepConfig(output_path=this_output_path(), text=versioned("first"), events=events),
    )
    gated = ExecutorStep(
        name="launch/gated",
        fn=write_step,
        config=StepConfig(
            output_path=this_output_path(),
            text=versioned("gated"),
            events=events,
            gate=gate,
            input_path=output_path_of(first),
        ),
    )
    last = ExecutorStep(
        name="launch/last",
        fn=write_step,
        config=StepConfig(
            output_path=this_output_path(), text=versioned("last"), events=events, input_path=output_path_of(gated)
        ),
    )
    executor_main([last], description="launch test", args=flags)
