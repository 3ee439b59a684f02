"""Step functions and a reference DAG used by the executor tests (importable by worker processes)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time

import fsspec

from marin_lab.execution import ExecutorStep, output_path_of, this_output_path, versioned


@dataclasses.dataclass(frozen=True)
class WriteConfig:
    output_path: str
    text: str
    inputs: tuple[str, ...] = ()
    sleep_s: float = 0.0
    log_path: str | None = None
    """Unversioned: an append-only file where each execution writes a line (to count executions)."""
    workers: int = 1


def _log(cfg: WriteConfig) -> None:
    if cfg.log_path:
        fd = os.open(cfg.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, f"{cfg.output_path}\n".encode())
        os.close(fd)


def write_text(cfg: WriteConfig) -> dict:
    """Concatenate the inputs' data files and this step's text into data.txt."""
    _log(cfg)
    parts = []
    for inp in cfg.inputs:
        with fsspec.open(f"{inp}/data.txt", "r") as f:
            parts.append(f.read())
    parts.append(cfg.text)
    if cfg.sleep_s:
        time.sleep(cfg.sleep_s)
    body = "\n".join(parts)
    with fsspec.open(f"{cfg.output_path}/data.txt", "w") as f:
        f.write(body)
    return {"chars": len(body), "api_key": "sk-should-not-appear"}


def fail(cfg: WriteConfig) -> None:
    _log(cfg)
    raise ValueError(f"boom in {cfg.text}")


@dataclasses.dataclass(frozen=True)
class FlakyConfig:
    output_path: str
    counter_path: str
    mode: str
    """'kill' (the worker dies: a preemption) or 'raise' (an exception: a failure)."""
    bad_attempts: int = 1


def flaky(cfg: FlakyConfig) -> int:
    """Misbehave on the first `bad_attempts` calls, then succeed."""
    n = 0
    if os.path.exists(cfg.counter_path):
        n = int(open(cfg.counter_path).read())
    with open(cfg.counter_path, "w") as f:
        f.write(str(n + 1))
    if n < cfg.bad_attempts:
        if cfg.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"flaky failure {n + 1}")
    os.makedirs(cfg.output_path, exist_ok=True)
    with open(os.path.join(cfg.output_path, "ok.json"), "w") as f:
        json.dump({"calls": n + 1}, f)
    return n + 1


def five_step_dag(log_path: str | None = None, sleep_s: float = 0.0, text: str = "a") -> list[ExecutorStep]:
    """a -> b, a -> c, (b, c) -> d, d -> e. Returns [e] (the root)."""
    def step(name, t, inputs=()):
        return ExecutorStep(name=name, fn=write_text, config=WriteConfig(
            output_path=this_output_path(), text=versioned(t), inputs=tuple(output_path_of(i) for i in inputs),
            sleep_s=sleep_s, log_path=log_path))
    a = step("raw/a", text)
    b = step("proc/b", "b", [a])
    c = step("proc/c", "c", [a])
    d = step("join/d", "d", [b, c])
    e = step("final/e", "e", [d])
    return [e]


def executions(log_path: str) -> list[str]:
    if not os.path.exists(log_path):
        return []
    return [line for line in open(log_path).read().splitlines() if line]


def usurp(lease_file) -> None:
    """Take a lease over as another driver would: compare-and-swap, retried on conflict."""
    from marin_lab.io.conditional import ConflictError

    while True:
        content, token = lease_file.read()
        record = json.loads(content) | {"holder": "usurper", "heartbeat": time.time() + 3600}
        try:
            lease_file.replace(json.dumps(record).encode(), token)
            return
        except ConflictError:
            continue


def race_for_lease(leases) -> list:
    """Every lease in `leases` tries to acquire at the same moment; returns what each got."""
    import threading

    results = [None] * len(leases)
    barrier = threading.Barrier(len(leases))

    def go(i):
        barrier.wait()
        results[i] = leases[i].try_acquire()

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(leases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def assert_lease_loss_stops_the_loser(prefix: str, *, heartbeat_s: float) -> None:
    """Run a slow step, let another driver take its lease, check the loser stopped and wrote nothing."""
    import threading

    from marin_lab.execution import Executor
    from marin_lab.execution.status import read_status
    from marin_lab.io.conditional import conditional_file
    from marin_lab.io.fs import exists

    step = ExecutorStep("slow", write_text, WriteConfig(this_output_path(), versioned("s"), sleep_s=4.0))
    ex = Executor(prefix, backend="local", lease_timeout_s=30, heartbeat_s=heartbeat_s)
    out_path = ex.plan([step]).steps[0].output_path
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", ex.run([step], raise_on_failure=False)))
    t.start()
    lease = conditional_file(f"{out_path}/.executor_lease")
    deadline = time.time() + 30
    while time.time() < deadline and (lease.read() is None or (read_status(out_path) or {}).get("status") != "RUNNING"):
        time.sleep(0.05)
    time.sleep(0.3)
    usurp(lease)  # another driver takes over
    t.join(timeout=60)
    outcome = result["r"].outcomes[result["r"].plan.steps[0].identity]
    assert outcome.status == "LOST"
    time.sleep(4.5)  # longer than the step's sleep: a surviving worker would have written by now
    assert not exists(f"{out_path}/data.txt")
    assert read_status(out_path)["status"] == "RUNNING"  # the loser wrote no terminal status
    assert json.loads(lease.read()[0])["holder"] == "usurper"  # nor released the usurper's lease
