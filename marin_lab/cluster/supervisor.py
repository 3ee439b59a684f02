"""The supervisor of a launched run: a detached Ray actor on the head node that keeps the driver alive.

Why an actor on the head: the head is where a Ray cluster keeps its non-preemptible work (GCS,
autoscaler), so a supervisor there lives as long as the cluster does, and being detached it
outlives the terminal that launched it. Each driver attempt runs in a `DriverHost` actor placed
wherever the driver's resources say (a preemptible worker included) that starts the experiment
as a child process and copies its output to `{prefix}/launches/{run}/logs/attempt-N.log`. This is how
Ray Jobs runs an entrypoint (an actor with a subprocess), without needing the dashboard's job
agent: the working tree travels the same way, as the runtime environment's `working_dir` that
the launcher uploaded and that actors created here inherit.

When a driver dies -- killed by a signal (kill -9, the kernel's out-of-memory killer), its host
actor's worker killed, its node lost -- the supervisor starts a new attempt while the restart
budget lasts. A new driver resumes from storage (records, leases, checkpoints), as a driver
restarted by hand does. A driver that exits by itself with an error (a step FAILED) is not
restarted: rerunning would fail the same way; its exit code and log are recorded.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import threading
from typing import Any

from marin_lab.cluster.launch_state import attempt_log_url, now_iso, write_state
from marin_lab.execution.run.backends import _die_with_parent
from marin_lab.io.fs import atomic_write_bytes
from marin_lab.io.secrets import scrubber_with
from marin_lab.store.layout import LOGS_DIR, attempt_log_name

LOG_FLUSH_S = 1.0
"""How often a running driver's log is copied to the prefix (what `--follow` and the browser see)."""
POLL_S = 0.5
ACTOR_OPTIONS: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0, "max_concurrency": 4}
"""Both actors: no CPU held, never restarted by Ray (the supervisor decides), threaded (stop, status)."""
# Ray is imported where it is used: `marin-lab` builds its parser from this package, and every
# command would otherwise pay Ray's import (~2.5 s on a loaded machine).


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
    ):
        # `argv` and `secrets` are held in memory only (never in `state`, which is written).
        self.prefix, self.state, self.host_resources, self.argv = prefix, state, host_resources, argv
        self.secrets = list(secrets or [])
        self._stop = threading.Event()
        self._host: Any = None

    def ping(self) -> str:
        return self.state["status"]

    def stop(self) -> None:
        self._stop.set()

    def _write(self) -> None:
        write_state(self.prefix, self.state)

    def _wait_for(self, ref: Any) -> Any:
        """ray.get that gives up (returns None) when `stop` is called first."""
        import ray

        while not self._stop.is_set():
            ready, _ = ray.wait([ref], timeout=POLL_S)
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
        self._host = host
        try:
            placed = self._wait_for(
                host.start.remote(
                    self.argv, env, attempt_log_url(self.prefix, self.state["run_id"], number), self.secrets
                )
            )
            if placed is not None:
                attempt.update(placed)
                self._write()
                code = self._wait_for(host.wait.remote())
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
                attempt["outcome"], attempt["reason"] = "stopped", "stopped by `marin-lab launch --stop`"
        except ray.exceptions.RayActorError as err:
            attempt["outcome"], attempt["reason"] = "died", _death_reason(err)
        finally:
            ray.kill(host, no_restart=True)
            self._host = None
        attempt["ended"] = now_iso()
        self._write()
        return attempt

    def run(self) -> str:
        import ray

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
            break
        # Done: free the head's slot. A detached actor otherwise lives as long as the cluster.
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        return self.state["status"]
