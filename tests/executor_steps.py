"""Step functions and a reference DAG used by the executor tests (importable by worker processes)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from pathlib import Path

import fsspec

from marin_lab.execution import ExecutorMainConfig, ExecutorStep, output_path_of, this_output_path, versioned


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
        n = int(Path(cfg.counter_path).read_text())
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
        return ExecutorStep(
            name=name,
            fn=write_text,
            config=WriteConfig(
                output_path=this_output_path(),
                text=versioned(t),
                inputs=tuple(output_path_of(i) for i in inputs),
                sleep_s=sleep_s,
                log_path=log_path,
            ),
        )

    a = step("raw/a", text)
    b = step("proc/b", "b", [a])
    c = step("proc/c", "c", [a])
    d = step("join/d", "d", [b, c])
    e = step("final/e", "e", [d])
    return [e]


def executions(log_path: str) -> list[str]:
    if not os.path.exists(log_path):
        return []
    return [line for line in Path(log_path).read_text().splitlines() if line]


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


def local_step_workers(root_pid: int | None = None) -> list:
    """The local backend's step worker processes below `root_pid` (default: this process).

    Workers fork from a fork server, so they share its command line: a worker is a fork-server
    process whose parent is one too.
    """
    import psutil

    def is_fork_server(p: psutil.Process) -> bool:
        try:
            return "multiprocessing.forkserver" in " ".join(p.cmdline())
        except psutil.Error:
            return False

    try:
        below = psutil.Process(root_pid or os.getpid()).children(recursive=True)
    except psutil.Error:
        return []
    servers = {p.pid for p in below if is_fork_server(p)}
    workers = []
    for p in below:
        try:
            if p.ppid() in servers and is_fork_server(p):
                workers.append(p)
        except psutil.Error:
            continue
    return workers


def assert_all_exit(processes: list, timeout_s: float = 60.0) -> None:
    """Wait until every process in `processes` has exited (generous: the machine may be loaded)."""
    import psutil

    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    assert not alive, f"still running {timeout_s:.0f}s later: {[p.pid for p in alive]}"


def assert_lease_loss_stops_the_loser(prefix: str, *, heartbeat_s: float) -> None:
    """Run a slow step, let another driver take its lease, check the loser stopped and wrote nothing."""
    import threading

    from marin_lab.execution import Executor
    from marin_lab.execution.state.status import read_status
    from marin_lab.io.conditional import conditional_file
    from marin_lab.io.fs import exists

    step = ExecutorStep("slow", write_text, WriteConfig(this_output_path(), versioned("s"), sleep_s=4.0))
    ex = Executor(ExecutorMainConfig(prefix=prefix, backend="local", lease_timeout_s=30, heartbeat_s=heartbeat_s))
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
    # Absence is proven once the loser's worker is gone (a condition), not after a guessed sleep.
    assert_all_exit(local_step_workers())
    assert not exists(f"{out_path}/data.txt")
    assert read_status(out_path)["status"] in ("WAITING", "RUNNING")  # the loser wrote no terminal status
    assert json.loads(lease.read()[0])["holder"] == "usurper"  # nor released the usurper's lease


@dataclasses.dataclass(frozen=True)
class SecretConfig:
    output_path: str
    hf_token: str
    """Versioned in the secrets test: a token where identity fields live."""
    source_url: str
    """Versioned: a URL with credentials in it."""
    api_key: str
    """Unversioned, and echoed by the step's error message."""
    fail: bool = True


def leak_secrets(cfg: SecretConfig) -> dict:
    """Logs and raises with every secret it was given, as careless code (or a library) does."""
    import logging

    env_secret = os.environ.get("MARIN_TEST_SERVICE_TOKEN", "")
    logging.getLogger("tests.leaky").warning("calling %s with key %s (env %s)", cfg.source_url, cfg.api_key, env_secret)
    if cfg.fail:
        raise PermissionError(
            f"401 for {cfg.source_url} with key {cfg.api_key}, token {cfg.hf_token}, service {env_secret}"
        )
    with fsspec.open(f"{cfg.output_path}/data.txt", "w") as f:
        f.write("ok")
    return {"echo": f"{cfg.api_key} {env_secret}"}


def write_noise(cfg: WriteConfig) -> dict:
    """Like write_text, plus random bytes: a step that can never give the same output twice."""
    write_text(cfg)
    with fsspec.open(f"{cfg.output_path}/noise.bin", "wb") as f:
        f.write(os.urandom(16))
    return {}


@dataclasses.dataclass(frozen=True)
class RendezvousConfig:
    output_path: str
    meeting_dir: str
    """Unversioned: a shared folder where each step leaves a marker when it starts."""
    expected: int
    timeout_s: float = 120.0


def rendezvous(cfg: RendezvousConfig) -> dict:
    """Start, then wait until `expected` steps have started: only steps running at the same time
    can all get past this (run one after another, the first one times out)."""
    os.makedirs(cfg.meeting_dir, exist_ok=True)
    open(os.path.join(cfg.meeting_dir, f"{os.getpid()}-{cfg.output_path.rsplit('/', 1)[-1]}"), "w").close()
    deadline = time.monotonic() + cfg.timeout_s
    while len(os.listdir(cfg.meeting_dir)) < cfg.expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(os.listdir(cfg.meeting_dir))} of {cfg.expected} steps started together")
        time.sleep(0.05)
    return {"met": len(os.listdir(cfg.meeting_dir))}


def record_priority(cfg: WriteConfig) -> dict:
    """Write the process's nice value and pid (what scheduling priority the backend gave the step)."""
    os.makedirs(cfg.output_path, exist_ok=True)
    probe = {"nice": os.getpriority(os.PRIO_PROCESS, 0), "pid": os.getpid()}
    with open(os.path.join(cfg.output_path, "priority.json"), "w") as f:
        json.dump(probe, f)
    return probe


def write_locations(cfg: WriteConfig) -> dict:
    """Like write_text, plus a JSON naming where it read and wrote, as a training summary names its
    checkpoint: an artifact that embeds the prefix."""
    write_text(cfg)
    with fsspec.open(f"{cfg.output_path}/locations.json", "w") as f:
        json.dump({"inputs": list(cfg.inputs), "output": cfg.output_path}, f)
    return {}
