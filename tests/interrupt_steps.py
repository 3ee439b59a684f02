"""A long step for the interrupt tests (importable by worker processes and Ray workers).

    python tests/interrupt_steps.py PREFIX MARKERS MODE [executor_main flags...]

The step writes a checkpoint, starts a child process (`sleep`), writes MARKERS/started (with both
pids) and then runs for minutes; run again with its checkpoint present, it resumes and ends at once.
MODE 'stubborn' ignores SIGTERM (so ending it takes the SIGKILL after the grace period); 'chain'
adds a step that depends on it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from marin_lab.execution import (  # noqa: E402
    ExecutorStep,
    executor_main,
    output_path_of,
    this_output_path,
    versioned,
)


@dataclasses.dataclass(frozen=True)
class LongConfig:
    output_path: str
    name: str
    markers: str = ""
    mode: str = "plain"


def long_step(cfg: LongConfig) -> dict:
    checkpoint = os.path.join(cfg.output_path, "checkpoint.json")
    os.makedirs(cfg.output_path, exist_ok=True)
    if os.path.exists(checkpoint):
        with open(checkpoint) as f:
            return {"resumed_from": json.load(f)["step"]}
    with open(checkpoint, "w") as f:
        json.dump({"step": 1}, f)
    if cfg.mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "300"])
    tmp = os.path.join(cfg.markers, "started.tmp")
    with open(tmp, "w") as f:
        json.dump({"worker": os.getpid(), "child": child.pid}, f)
    os.replace(tmp, os.path.join(cfg.markers, "started"))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        time.sleep(0.1)
    return {"resumed_from": None}


def after(cfg: LongConfig) -> None:
    os.makedirs(cfg.output_path, exist_ok=True)


def long_dag(markers: str, mode: str = "plain") -> list[ExecutorStep]:
    """The long step; with MODE 'chain', a step after it too (never started when the first is interrupted)."""
    step = ExecutorStep(
        "interrupt/long",
        long_step,
        LongConfig(this_output_path(), versioned("long"), markers=markers, mode="plain" if mode == "chain" else mode),
    )
    if mode != "chain":
        return [step]
    return [ExecutorStep("interrupt/after", after, LongConfig(this_output_path(), output_path_of(step)))]


if __name__ == "__main__":
    prefix, markers, mode, *flags = sys.argv[1:]
    executor_main(long_dag(markers, mode), description="interrupt test", args=["--prefix", prefix, *flags])
