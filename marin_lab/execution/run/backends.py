"""Where a step's function runs: a local worker process, or a Ray task.

Both backends run `fn(config)` away from the driver, so a crash or a hang in a step never takes
the driver (and the leases it heartbeats) down with it, and a step can be stopped by killing its
worker when its lease is lost. A worker that disappears without an answer (killed, out of
memory, its node gone) is a preemption; an exception raised by `fn` is a failure. The two have
separate retry budgets in the executor.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import inspect
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import psutil

from marin_lab.execution.errors import ExecutorConfigError, PreemptedError, StepFailedError
from marin_lab.execution.plan.hashing import lenient_value
from marin_lab.execution.plan.resources import RunOutcome, attach_hardware, hardware_of, is_runner
from marin_lab.execution.record.provenance import runtime_environment
from marin_lab.execution.review.capacity import ray_nodes
from marin_lab.execution.run.interrupt import register_worker_group, unregister_worker_group
from marin_lab.execution.run.logs import VERBOSE_ENV
from marin_lab.execution.run.preemption import PREEMPTION, ray_error_kind
from marin_lab.execution.state.lease import HOSTNAME, LeaseHolder
from marin_lab.io.conditional import conditional_file
from marin_lab.io.secrets import redact, redact_logs
from marin_lab.jax_platform import has_accelerator
from marin_lab.ray_niceness import init_local_ray, run_workers_at_normal_priority

logger = logging.getLogger(__name__)


class StepHandle:
    """A running step function."""

    placed_hardware: dict[str, Any] | None = None
    """What the attempt runs on, once a HardwareRunner has placed it (None until then, and for plain
    Ray tasks and local steps): the executor records it while the attempt still runs."""
    pending_reason: str | None = None
    """Why a HardwareRunner's attempt still waits for its hardware, in its own words (e.g. how many
    slices are ready and why the others are not); None once placed, and for other steps."""

    def wait(self, timeout: float) -> bool:
        """True once finished (successfully or not)."""
        raise NotImplementedError

    def result(self) -> tuple[Any, dict[str, Any]]:
        """(fn's return value, the runtime environment); raises PreemptedError or StepFailedError."""
        raise NotImplementedError

    def cancel(self) -> None:
        raise NotImplementedError


def _redact_step_logs(config: Any) -> None:
    """Scrub the step's logs of secrets, the values of its config's secret-named fields included
    (the driver redacts its records the same way; a worker has only the config to go by)."""
    redact_logs()
    redact(lenient_value(config))  # called for its effect: remembers those values


def _format_exception(err: BaseException) -> str:
    return "".join(traceback.format_exception(type(err), err, err.__traceback__))


# --------------------------------------------------------------------------------------------
# local: one worker process per running step


def _die_with_parent() -> None:
    """Ask Linux to kill this worker when the driver dies (kill -9 included)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


@dataclasses.dataclass(frozen=True)
class Guard:
    """Who this step runs for: the worker stops itself when that driver or its lease is gone."""

    driver_pid: int
    driver_host: str
    lease_url: str | None = None
    holder: str | None = None

    def start(self) -> threading.Event:
        """Start watching; set the returned event when the step is over (Ray reuses workers)."""
        done = threading.Event()
        _GUARDS.watch(self, done)
        return done

    def check(self, checks: int, done: threading.Event) -> None:
        """The `checks`-th look (one every `GUARD_EVERY_S`): end this process if the driver is gone
        from this host, or (every fourth look) its lease is no longer the driver's."""
        if self.driver_host == HOSTNAME:
            try:
                os.kill(self.driver_pid, 0)
            except ProcessLookupError:
                os._exit(137)
            except PermissionError:
                pass
        if self.lease_url and checks % 4 == 0:
            try:
                got = conditional_file(self.lease_url).read()
            except Exception:
                return  # storage hiccup: the lease is judged on the next check
            holder = LeaseHolder.parse(got[0]) if got else None
            if done.is_set():
                return
            if holder is None or holder.holder != self.holder or holder.is_stale(time.time()):
                # The driver lost the lease (or died elsewhere): stop writing now.
                os._exit(137)


GUARD_EVERY_S = 0.5


class _Guards:
    """Every running step's `Guard` in this process, looked at by one thread: a worker runs step
    after step, and a thread started for each cost a thread start on each step's path (a round
    trip through the scheduler, milliseconds on a busy machine)."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # threads and their locks do not cross a fork

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._watched: list[tuple[Guard, threading.Event, list[int]]] = []
        self._running = False

    def watch(self, guard: Guard, done: threading.Event) -> None:
        with self._cond:
            self._watched.append((guard, done, [0]))
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, args=(self._cond,), name="driver-guard", daemon=True).start()
            self._cond.notify()

    def _run(self, cond: threading.Condition) -> None:
        while True:
            with cond:
                while not self._watched:
                    cond.wait()
            time.sleep(GUARD_EVERY_S)
            with cond:
                self._watched = [w for w in self._watched if not w[1].is_set()]
                watched = list(self._watched)
            for guard, done, checks in watched:
                checks[0] += 1
                guard.check(checks[0], done)


_GUARDS = _Guards()


def _pickled_call(fn: Callable[[Any], Any], config: Any) -> bytes:
    """fn and config as bytes: by reference when they can be, else by value (closures, lambdas,
    classes defined inside functions) with the cloudpickle that Ray ships, as Ray itself does."""
    try:
        return pickle.dumps((fn, config), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        from ray import cloudpickle

        return cloudpickle.dumps((fn, config), protocol=pickle.HIGHEST_PROTOCOL)


def _local_worker(conn: Any, payload: bytes, guard: Guard, environ: dict[str, str]) -> None:
    # Its own session and process group: the terminal's Ctrl-C reaches the driver only, which
    # cancels the step (interrupt.py) by ending this group, the step's own children included.
    with contextlib.suppress(OSError):
        os.setsid()
    # The worker's parent is the fork server, which exits when the driver does; PDEATHSIG covers
    # that, and the guard covers the driver itself and its lease.
    _die_with_parent()
    guard.start()
    # The fork server was started earlier; the step must see the driver's environment as it is now.
    os.environ.clear()
    os.environ.update(environ)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # JAX says "Unable to initialize backend 'tpu'" at INFO whenever it looks for devices on a CPU host.
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    try:
        fn, config = pickle.loads(payload)
        _redact_step_logs(config)
        result = fn(config)
        env = runtime_environment()
        conn.send(("ok", result, env))
    except BaseException as err:  # noqa: BLE001 - everything fn raises is the step's failure
        try:
            conn.send(("error", f"{type(err).__name__}: {err}", _format_exception(err)))
        except Exception:
            conn.send(("error", f"{type(err).__name__}", _format_exception(err)))
    finally:
        conn.close()


class _LocalHandle(StepHandle):
    def __init__(self, ctx: Any, fn: Callable[[Any], Any], config: Any, step_name: str, guard: Guard):
        self.step_name = step_name
        self._recv, send = ctx.Pipe(duplex=False)
        self.process = ctx.Process(
            target=_local_worker,
            args=(send, _pickled_call(fn, config), guard, dict(os.environ)),
            name=f"step:{step_name}",
            daemon=False,
        )
        self.process.start()
        send.close()
        self._message: Any = None
        if self.process.pid is not None:
            register_worker_group(self.process.pid)  # the worker leads its own group (setsid)

    def wait(self, timeout: float) -> bool:
        if self._message is not None:
            return True
        if self._recv.poll(timeout):
            try:
                self._message = self._recv.recv()
            except EOFError:
                self._message = ("lost",)
            self.process.join(timeout=30)
            self._forget_group()
            return True
        if not self.process.is_alive():
            if self._recv.poll(0.1):
                return self.wait(0)
            self._message = ("lost",)
            self._forget_group()
            return True
        return False

    def _forget_group(self) -> None:
        if self.process.pid is not None:
            unregister_worker_group(self.process.pid)

    def result(self) -> tuple[Any, dict[str, Any]]:
        msg = self._message
        if msg[0] == "ok":
            return msg[1], msg[2]
        if msg[0] == "error":
            raise StepFailedError(f"step '{self.step_name}' raised {msg[1]}", traceback_text=msg[2])
        code = self.process.exitcode
        raise PreemptedError(
            f"step '{self.step_name}': its worker process (pid {self.process.pid}) exited with code {code} "
            "without an answer (killed or out of memory)"
        )

    def cancel(self, grace_s: float = 3.0) -> None:
        """End the worker and everything it started: SIGTERM to its process group and its
        descendants, then SIGKILL to whatever is left after `grace_s`."""
        pid = self.process.pid
        if pid is not None:
            end_process_tree(pid, grace_s)
        self.process.join(timeout=10)
        self._forget_group()


def end_process_tree(pid: int, grace_s: float) -> None:
    """SIGTERM the process group `pid` leads and every descendant of `pid` (some may have left the
    group), wait up to `grace_s`, then SIGKILL the survivors. Never raises."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        procs = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(OSError):  # not a group leader (yet), or gone
            os.killpg(pid, sig)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
        if sig == signal.SIGTERM:
            _, alive = psutil.wait_procs(procs, timeout=grace_s)
            procs = alive
            if not procs:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)  # a straggler that left no trace in the tree
                return
    psutil.wait_procs(procs, timeout=5)


class LocalBackend:
    """Runs each step in its own worker process (at most `max_concurrent` at once)."""

    name = "local"

    def __init__(self) -> None:
        # forkserver: workers fork from a clean single-threaded server, not from the driver (which
        # has heartbeat threads), and start faster than spawn.
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        self.ctx = multiprocessing.get_context(method)

    def submit(
        self, fn: Callable[[Any], Any], config: Any, *, step_name: str, resources: Any, guard: Guard
    ) -> StepHandle:
        if is_runner(resources):
            raise ExecutorConfigError(
                f"step '{step_name}': its resources ({type(resources).__name__}) need the ray backend; "
                "run with --backend ray"
            )
        return _LocalHandle(self.ctx, fn, config, step_name, guard)

    def shutdown(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# ray: one Ray task per step (or a HardwareRunner that drives several)


@functools.lru_cache(maxsize=1)
def _remote_entry() -> Any:
    """`_ray_entry` as a Ray remote function, made once: a new `ray.remote(...)` per step would be
    pickled and exported to the cluster again for every step (Ray re-exports a cached one by
    itself when it meets a new cluster or job)."""
    import ray

    return ray.remote(_ray_entry)


def _ray_entry(fn: Callable[[Any], Any], config: Any, guard: Guard) -> tuple[Any, dict[str, Any]]:
    done = guard.start()
    _redact_step_logs(config)
    try:
        return fn(config), runtime_environment()
    except KeyboardInterrupt:
        # Cancelled (ray.cancel raises this in the task): what the step started ends with it.
        _end_children(grace_s=2.0)
        raise
    finally:
        done.set()


def _end_children(grace_s: float) -> None:
    """End every descendant of this process (a cancelled step's subprocesses); never raises."""
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for proc in children:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def is_ray_preemption(err: BaseException) -> bool:
    """A lost worker, node or actor, as opposed to an exception raised by the step's own code.

    A RayTaskError wraps what the task raised: it is a preemption only when the task itself
    reported one (a HardwareRunner's host saw its slice go away and raised PreemptedError).
    """
    import ray.exceptions as rex

    if isinstance(err, PreemptedError):
        return True
    if isinstance(err, rex.RayTaskError):
        cause = getattr(err, "cause", None)
        return isinstance(cause, PreemptedError)
    return ray_error_kind(err) == PREEMPTION


class _RayHandle(StepHandle):
    def __init__(self, ref: Any, step_name: str):
        self.ref, self.step_name = ref, step_name

    def wait(self, timeout: float) -> bool:
        import ray

        ready, _ = ray.wait([self.ref], timeout=timeout)
        return bool(ready)

    def result(self) -> tuple[Any, dict[str, Any]]:
        import ray
        import ray.exceptions as rex

        try:
            return ray.get(self.ref)
        except rex.TaskCancelledError as err:
            raise PreemptedError(f"step '{self.step_name}': its Ray task was cancelled") from err
        except rex.RayTaskError as err:
            if is_ray_preemption(err):
                raise PreemptedError(f"step '{self.step_name}': {type(err.cause).__name__}") from err
            cause = getattr(err, "cause", err)
            raise StepFailedError(
                f"step '{self.step_name}' raised {type(cause).__name__}: {cause}", traceback_text=str(err)
            ) from None
        except rex.RayError as err:
            if is_ray_preemption(err):
                raise PreemptedError(f"step '{self.step_name}': {type(err).__name__}: {err}") from err
            raise StepFailedError(
                f"step '{self.step_name}': Ray error {type(err).__name__}: {err}", traceback_text=_format_exception(err)
            ) from err

    def cancel(self, grace_s: float = 3.0) -> None:
        """Interrupt the task (it ends its own subprocesses: `_ray_entry`), then, if it has not
        ended within `grace_s`, kill its worker (force)."""
        import ray

        try:
            ray.cancel(self.ref, force=False)
            if ray.wait([self.ref], timeout=grace_s)[0]:
                return
            ray.cancel(self.ref, force=True)
        except Exception:
            logger.warning("step '%s': could not cancel its Ray task", self.step_name, exc_info=True)


def _accepts(fn: Callable[..., Any], keyword: str) -> bool:
    """Whether `fn` takes `keyword` (a HardwareRunner written before `on_hardware` existed does not)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return keyword in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class _RunnerHandle(StepHandle):
    """A HardwareRunner's blocking `run` in a thread of the driver; cancelling reaches only this run."""

    def __init__(self, runner: Any, fn: Callable[[Any], Any], config: Any, step_name: str):
        self.runner, self.step_name = runner, step_name
        self._outcome: tuple[str, Any] | None = None
        self._done = threading.Event()
        self._cancel = threading.Event()
        self._hardware: dict[str, Any] | None = None

        def placed(hardware: dict[str, Any]) -> None:
            self.pending_reason = None
            self.placed_hardware = hardware

        def pending(reason: str) -> None:
            self.pending_reason = reason

        extra: dict[str, Any] = {"on_hardware": placed} if _accepts(runner.run, "on_hardware") else {}
        if _accepts(runner.run, "on_pending"):
            extra["on_pending"] = pending

        def go() -> None:
            try:
                outcome = runner.run(fn, config, step_name=step_name, cancel=self._cancel, **extra)
                if isinstance(outcome, RunOutcome):
                    self._hardware = outcome.hardware
                    outcome = outcome.result
                self._outcome = ("ok", outcome)
            except BaseException as err:  # noqa: BLE001
                self._outcome = ("error", err)
            self._done.set()

        self._thread = threading.Thread(target=go, name=f"runner:{step_name}", daemon=True)
        self._thread.start()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    def result(self) -> tuple[Any, dict[str, Any]]:
        assert self._outcome is not None
        kind, value = self._outcome
        if kind == "ok":
            env = runtime_environment()
            if self._hardware:
                env["hardware"] = self._hardware
            return value, env
        # The hardware of a lost or failed attempt travels on the error (a HardwareRunner attaches it).
        hardware = hardware_of(value)
        if isinstance(value, (PreemptedError, StepFailedError)):
            attach_hardware(value, hardware)
            raise value
        if type(value).__name__ == "PreemptedError" or is_ray_preemption(value):
            preempted = PreemptedError(f"step '{self.step_name}': {value}")
            attach_hardware(preempted, hardware)
            raise preempted from value
        raise StepFailedError(
            f"step '{self.step_name}' raised {type(value).__name__}: {value}",
            traceback_text=_format_exception(value),
            hardware=hardware,
        )

    def cancel(self) -> None:
        self._cancel.set()


@contextlib.contextmanager
def no_foreign_tpu_logs() -> Iterator[None]:
    """Start a local Ray without forwarding the machine's libtpu logs to this console.

    A Ray node links its logs folder to libtpu's (`$TPU_LOG_DIR`, else /tmp/tpu_logs) when that
    folder exists, and its log monitor then prints every file there to the driver as `(pid=)`
    lines: the start-up log of every process on the machine that ever loaded libtpu (another
    project's JAX, a TPU compile), none of them this run's steps. On a host without a TPU, the
    node is started with `TPU_LOG_DIR` naming an empty folder of its own; the variable is put back
    at once, so the steps' own libtpu (if any loads it) still logs where it always does.
    """
    if has_accelerator():
        yield
        return
    before = os.environ.get("TPU_LOG_DIR")
    with tempfile.TemporaryDirectory(prefix="marin-no-tpu-logs-") as empty:
        os.environ["TPU_LOG_DIR"] = empty
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("TPU_LOG_DIR", None)
            else:
                os.environ["TPU_LOG_DIR"] = before


def quiet_ray_console() -> None:
    """What Ray itself prints on a driver's console, cut to the steps' own lines (unless verbose).

    Ray's notice that token authentication is on (its default for a local cluster) is left out;
    a worker's lines come without Ray's `(step pid=N)` prefix, since each already carries the
    step's `[step]`; and Ray colours nothing when the console is not a terminal (a file, a pipe).
    """
    if os.environ.get(VERBOSE_ENV):
        return
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    os.environ.setdefault("RAY_DISABLE_WORKER_LOG_PREFIX", "1")
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # read once at import: set it on the loaded module too
        off = os.environ["RAY_DISABLE_WORKER_LOG_PREFIX"] not in ("0", "false")
        setattr(constants, "RAY_DISABLE_WORKER_LOG_PREFIX", off)  # noqa: B010 (not in mypy's view of Ray)
    if not sys.stdout.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")


# The local Ray a RayBackend starts is shared by every backend of this process (Marin's tests run
# ten executors in threads at once): one lock makes "is Ray up? else start it" atomic, and the
# cluster is stopped when the last backend using it shuts down, never under another one's steps.
_RAY_LOCK = threading.Lock()
_RAY_USERS = 0  # live backends using the Ray this module started


class RayBackend:
    """Each step is a Ray task with its `resources`; starts a local Ray when no cluster is given."""

    name = "ray"

    def __init__(self, address: str | None = None):
        import ray

        global _RAY_USERS
        self._counted = False
        with _RAY_LOCK:
            if not ray.is_initialized():
                _RAY_USERS = 0  # a Ray started here was stopped by someone else: start afresh
                address = address or os.environ.get("RAY_ADDRESS")
                pythonpath = os.pathsep.join(p for p in [os.getcwd(), os.environ.get("PYTHONPATH", "")] if p)
                runtime_env = {
                    "env_vars": {
                        "PYTHONPATH": pythonpath,
                        **{k: os.environ[k] for k in (VERBOSE_ENV,) if k in os.environ},
                    }
                }
                quiet_ray_console()
                if address:
                    ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
                else:
                    run_workers_at_normal_priority()  # steps are the user's work, not background jobs
                    # address="local": a new cluster for this driver, never a stray one on the machine.
                    # The dashboard (on 127.0.0.1) is where a person watches tasks, logs and resources.
                    dashboard = os.environ.get("MARIN_RAY_DASHBOARD", "1") not in ("0", "false", "False")
                    with no_foreign_tpu_logs():
                        context = init_local_ray(
                            include_dashboard=dashboard,
                            runtime_env=runtime_env,
                            _node_ip_address="127.0.0.1",
                            log_to_driver=True,
                            configure_logging=False,
                        )
                    url = getattr(context, "dashboard_url", None)
                    if url:
                        logger.log(
                            logging.INFO if os.environ.get(VERBOSE_ENV) else logging.DEBUG,
                            "Ray dashboard: http://%s",
                            url,
                        )
                _RAY_USERS = 1
                self._counted = True
            elif _RAY_USERS > 0:  # joins a Ray another backend of this process started
                _RAY_USERS += 1
                self._counted = True

    def submit(
        self, fn: Callable[[Any], Any], config: Any, *, step_name: str, resources: Any, guard: Guard
    ) -> StepHandle:

        if is_runner(resources):
            return _RunnerHandle(resources, fn, config, step_name)
        options = dict(resources or {})
        options.setdefault("num_cpus", 1)
        options["name"] = step_name
        remote = _remote_entry().options(max_retries=0, retry_exceptions=False, **options)
        return _RayHandle(remote.remote(fn, config, guard), step_name)

    def live_nodes(self) -> list[dict[str, float]] | None:
        """The cluster's live nodes and their total resources (capacity.py watches waiting steps)."""
        return ray_nodes()

    def available(self) -> dict[str, float] | None:
        """What the cluster has free now (a waiting step says so); None when Ray cannot be asked."""
        import ray

        try:
            return {k: float(v) for k, v in ray.available_resources().items()}
        except Exception:  # the cluster cannot be asked now: not said
            return None

    def shutdown(self) -> None:
        import ray

        global _RAY_USERS
        with _RAY_LOCK:
            if not self._counted:
                return  # Ray was up before (the caller's own cluster): not ours to stop
            self._counted = False
            _RAY_USERS -= 1
            if _RAY_USERS == 0 and ray.is_initialized():
                ray.shutdown()


def make_backend(name: str, *, ray_address: str | None = None) -> LocalBackend | RayBackend:
    if name == "local":
        return LocalBackend()
    if name == "ray":
        return RayBackend(ray_address)
    raise ExecutorConfigError(f"--backend {name!r} is not known; use 'local' or 'ray'")
