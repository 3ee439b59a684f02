"""The supervisor of a launched run: the entrypoint of its Ray job, which keeps the driver alive.

    python -m marin_lab.cluster.supervisor RUN --prefix PREFIX --address GCS   (what `marin-lab launch` submits)

`marin-lab launch` submits this module as a Ray Job (cluster/launch.py), so `ray job list`, the
dashboard's job view and the Ray Jobs REST API show every launched run under its run id. Ray runs a
job's entrypoint on the head node, where a Ray cluster keeps its non-preemptible work (GCS,
autoscaler), and keeps it running after the launching terminal goes away. The driver's arguments
and the launcher's secrets reach it through the cluster's internal key-value store, read once and
deleted (`take_handoff`), never through the job's entrypoint or runtime environment, which Ray
shows to anyone who lists the jobs.

Each driver attempt runs in a `DriverHost` actor placed wherever the driver's resources say (a
preemptible worker included) that starts the experiment as a child process and copies its output
to `{prefix}/launches/{run}/logs/attempt-N.log`; the supervisor echoes that log to its own output,
which is the job's log (`ray job logs RUN`, `marin-lab launch --follow`). The working tree travels
as the job's `working_dir`, which the actors created here inherit.

When a driver dies -- killed by a signal (kill -9, the kernel's out-of-memory killer), its host
actor's worker killed, its node lost -- the supervisor starts a new attempt while the restart
budget lasts. A new driver resumes from storage (records, leases, checkpoints), as a driver
restarted by hand does. A driver that exits by itself with an error (a step FAILED) is not
restarted: rerunning would fail the same way; its exit code and log are recorded. Stopping the job
(`marin-lab launch --stop`, `ray job stop`) sends the entrypoint SIGTERM: the driver is stopped, the
record says STOPPED, and nothing restarts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any

from marin_lab.cluster.launch_state import attempt_log_url, now_iso, read_state, write_state
from marin_lab.execution.run.backends import _die_with_parent
from marin_lab.io.fs import atomic_write_bytes, read_bytes
from marin_lab.io.secrets import scrubber_with
from marin_lab.store.layout import LOGS_DIR, attempt_log_name

LOG_FLUSH_S = 1.0
"""How often a running driver's log is copied to the prefix (what `--follow` and the browser see)."""
POLL_S = 0.5
NAMESPACE = "marin_lab"
ACTOR_OPTIONS: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0, "max_concurrency": 4}
"""The driver's host actor: no CPU held, never restarted by Ray (the supervisor decides), threaded (wait, terminate)."""
# Ray is imported where it is used: `marin-lab` builds its parser from this package, and every
# command would otherwise pay Ray's import (~2.5 s on a loaded machine).


def _handoff_key(run_id: str) -> bytes:
    return f"launch/{run_id}".encode()


def put_handoff(run_id: str, argv: list[str], secrets: list[str], resources: dict[str, float]) -> None:
    """What the supervisor needs and Ray must not show (the arguments as given, the launcher's
    secrets), left in the cluster's key-value store for `take_handoff`; the caller is connected."""
    from ray.experimental import internal_kv

    value = json.dumps({"argv": argv, "secrets": secrets, "resources": resources}).encode()
    internal_kv._internal_kv_put(_handoff_key(run_id), value, overwrite=True, namespace=NAMESPACE)


def drop_handoff(run_id: str) -> None:
    from ray.experimental import internal_kv

    internal_kv._internal_kv_del(_handoff_key(run_id), namespace=NAMESPACE)


def take_handoff(run_id: str) -> dict[str, Any] | None:
    """The launcher's handoff, deleted as it is read (None when there is none: it was taken)."""
    from ray.experimental import internal_kv

    raw = internal_kv._internal_kv_get(_handoff_key(run_id), namespace=NAMESPACE)
    if raw is None:
        return None
    drop_handoff(run_id)
    handoff: dict[str, Any] = json.loads(raw)
    return handoff


class DriverHost:
    """Runs one driver attempt as a child process and mirrors its output into the prefix."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._out = bytearray()
        self._lock = threading.Lock()

    def start(self, argv: list[str], env: dict[str, str], log_url: str, secrets: Any = ()) -> dict[str, Any]:
        import ray

        pid = self.spawn(argv, env, log_url, secrets)
        ctx = ray.get_runtime_context()
        return {
            "pid": pid,
            "node_id": ctx.get_node_id(),
            "node": ray.util.get_node_ip_address(),
            "host": os.uname().nodename,
        }

    def spawn(self, argv: list[str], env: dict[str, str], log_url: str, secrets: Any = ()) -> int:
        """Start the driver. `secrets`: the launcher's secrets its arguments carry (this node's
        environment does not have them); scrubbed from the log, and given to the driver as
        secret-named variables so that its own records and logs scrub them too."""
        self._log_url = log_url
        self._secrets = list(secrets)
        carried = {f"MARIN_LAUNCH_SECRET_{i}": v for i, v in enumerate(self._secrets)}
        # The driver dies with this actor's worker (PDEATHSIG): a host lost means a driver gone,
        # never a second driver running beside the restarted one.
        self._proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env, **carried},
            preexec_fn=_die_with_parent,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self._proc.pid

    def _read(self) -> None:
        # stdout=PIPE with the default buffering is a BufferedReader (typeshed says IO[bytes]).
        assert self._proc is not None and isinstance(self._proc.stdout, io.BufferedReader)
        while chunk := self._proc.stdout.read1(65536):
            with self._lock:
                self._out += chunk

    def _flush(self, written: int) -> int:
        with self._lock:
            data = bytes(self._out)
        if len(data) != written:
            # Secrets never reach storage: the copy is scrubbed as the executor's own logs are, with
            # the launcher's secrets besides this node's.
            text = scrubber_with(self._secrets)(data.decode("utf-8", errors="replace"))
            atomic_write_bytes(self._log_url, text.encode("utf-8"), durable=False)
        return len(data)

    def wait(self) -> int:
        """The driver's exit code (negative: the signal that killed it)."""
        assert self._proc is not None
        written = 0
        while True:
            try:
                code = self._proc.wait(timeout=LOG_FLUSH_S)
                break
            except subprocess.TimeoutExpired:
                written = self._flush(written)
        self._reader.join(timeout=10)
        self._flush(written)
        return code

    def terminate(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)


def _death_reason(err: BaseException) -> str:
    text = str(err)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)
    if "OutOfMemory" in text or "out of memory" in text.lower():
        return f"its worker ran out of memory ({first[:200]})"
    return f"its host was lost (node lost or worker killed): {first[:200]}"


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class LaunchSupervisor:
    """Starts driver attempts until one ends by itself, the budget is spent, or `stop` is called."""

    def __init__(
        self,
        prefix: str,
        state: dict[str, Any],
        host_resources: dict[str, float],
        argv: list[str],
        secrets: list[str] | None = None,
        out: Any = None,
        stop: threading.Event | None = None,
    ):
        # `argv` and `secrets` are held in memory only (never in `state`, which is written).
        self.prefix, self.state, self.host_resources, self.argv = prefix, state, host_resources, argv
        self.secrets = list(secrets or [])
        self.out = out if out is not None else sys.stdout
        self._stop = stop or threading.Event()
        self._echoed = 0

    def stop(self) -> None:
        self._stop.set()

    def _write(self) -> None:
        write_state(self.prefix, self.state)

    def _say(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def _echo(self, log_url: str) -> None:
        """The attempt's log as its host copied it to the prefix, echoed into the job's own log."""
        try:
            data = read_bytes(log_url)
        except FileNotFoundError:
            return
        if len(data) > self._echoed:
            self._say(data[self._echoed :].decode("utf-8", "replace"))
            self._echoed = len(data)

    def _wait_for(self, ref: Any, log_url: str) -> Any:
        """ray.get that gives up (returns None) when `stop` is called first."""
        import ray

        while not self._stop.is_set():
            ready, _ = ray.wait([ref], timeout=POLL_S)
            self._echo(log_url)
            if ready:
                return ray.get(ready[0])
        return None

    def _one_attempt(self, number: int) -> dict[str, Any]:
        import ray

        attempt: dict[str, Any] = {
            "attempt": number,
            "started": now_iso(),
            "outcome": "running",
            "log": f"{LOGS_DIR}/{attempt_log_name(number)}",
        }
        self.state["attempts"].append(attempt)
        self.state["status"] = "RUNNING"
        self._write()
        self._say(f"--- {self.state['run_id']}: attempt {number} started {attempt['started']}\n")
        self._echoed = 0
        log_url = attempt_log_url(self.prefix, self.state["run_id"], number)
        gcs = ray.get_runtime_context().gcs_address
        env = {
            "RAY_ADDRESS": gcs,
            "MARIN_PREFIX": self.prefix,
            "MARIN_LAUNCH_ID": self.state["run_id"],
            "MARIN_LAUNCH_ATTEMPT": str(number),
        }
        cpus = self.host_resources.get("CPU", 0)
        custom = {k: v for k, v in self.host_resources.items() if k != "CPU"}
        # An ActorHandle. Ray types it `ActorHandle | type[DriverHost]`, whose method calls type-check only
        # on @ray.method methods, and this module does not import Ray at class definition.
        host: Any = ray.remote(**ACTOR_OPTIONS)(DriverHost).options(num_cpus=cpus, resources=custom or None).remote()
        try:
            placed = self._wait_for(host.start.remote(self.argv, env, log_url, self.secrets), log_url)
            if placed is not None:
                attempt.update(placed)
                self._write()
                code = self._wait_for(host.wait.remote(), log_url)
                if code is not None:
                    attempt["exit_code"] = code
                    if code == 0:
                        attempt["outcome"] = "succeeded"
                    elif code < 0 or code in (128 + signal.SIGKILL, 128 + signal.SIGTERM):
                        sig = _signal_name(-(code - 128) if code > 0 else code)
                        attempt["outcome"], attempt["reason"] = (
                            "died",
                            (f"the driver was killed by {sig} (kill, or the kernel's out-of-memory killer)"),
                        )
                    else:
                        attempt["outcome"] = "failed"
                        attempt["reason"] = f"the driver exited with code {code} (see {attempt['log']})"
            if self._stop.is_set():
                with contextlib.suppress(Exception):  # the host is gone already: nothing to stop
                    ray.get(host.terminate.remote(), timeout=10)
                attempt["outcome"], attempt["reason"] = "stopped", "the run's Ray job was stopped"
        except ray.exceptions.RayActorError as err:
            attempt["outcome"], attempt["reason"] = "died", _death_reason(err)
        finally:
            ray.kill(host, no_restart=True)
        self._echo(log_url)
        attempt["ended"] = now_iso()
        self._write()
        reason = f": {attempt['reason']}" if attempt.get("reason") else ""
        self._say(f"--- attempt {number}: {attempt['outcome']}{reason}\n")
        return attempt

    def run(self) -> str:
        number = len(self.state["attempts"])
        while True:
            number += 1
            attempt = self._one_attempt(number)
            outcome = attempt["outcome"]
            if outcome == "died" and number - 1 < self.state["max_restarts"]:
                continue
            if outcome == "succeeded":
                self.state["status"] = "SUCCEEDED"
            elif outcome == "stopped":
                self.state["status"] = "STOPPED"
            else:
                self.state["status"] = "FAILED"
                if outcome == "died":
                    self.state["message"] = (
                        f"the driver died {number} times; the budget of "
                        f"{self.state['max_restarts']} restarts is spent (launch it again "
                        "to resume from what finished)"
                    )
                else:
                    self.state["message"] = attempt["reason"]
            self._write()
            self._say(f"--- {self.state['run_id']}: {self.state['status']}\n")
            return str(self.state["status"])


def main(argv: list[str] | None = None) -> int:
    """The Ray job's entrypoint: 0 when the run succeeded or was stopped, else 1 (the job FAILED)."""
    import ray

    parser = argparse.ArgumentParser(prog="python -m marin_lab.cluster.supervisor")
    parser.add_argument("run_id")
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--address", required=True, help="the cluster's GCS address, as the launcher found it")
    args = parser.parse_args(argv)
    ray.init(address=args.address, namespace=NAMESPACE, log_to_driver=False, configure_logging=False)
    # `ray job stop` (and `marin-lab launch --stop`) send SIGTERM: stop the driver, record STOPPED.
    # Set after ray.init, which installs its own handler (exit at once).
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    state = read_state(args.prefix, args.run_id)
    if state is None:
        print(f"no launched run {args.run_id!r} under {args.prefix}: use `marin-lab launch`", file=sys.stderr)
        return 1
    handoff = take_handoff(args.run_id)
    if handoff is None:  # a second start of this entrypoint: the launcher's arguments were taken
        state["status"] = "FAILED"
        state["message"] = "the supervisor found no launch hand-off (started twice?); launch the experiment again"
        write_state(args.prefix, state)
        print(state["message"], file=sys.stderr)
        return 1
    supervisor = LaunchSupervisor(
        args.prefix, state, handoff["resources"], handoff["argv"], handoff["secrets"], stop=stopping
    )
    return 0 if supervisor.run() in ("SUCCEEDED", "STOPPED") else 1


if __name__ == "__main__":
    sys.exit(main())
