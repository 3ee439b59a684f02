"""One JAX process per host: `jax.distributed` started from the environment the slice runner sets.

The slice runner gives every host of a step (see `cluster/slice_runner.py`, `marin_lab/host_env.py`):

- `MARIN_COORDINATOR_ADDRESS`: `ip:port` of host 0 of slice 0, where JAX's coordination service runs;
- `MARIN_NUM_PROCESSES`: hosts in the whole step (all slices);
- `MARIN_PROCESS_ID`: this host's index, `slice_id * hosts_per_slice + worker_id`.

Without them (a laptop, a single host) nothing is started. On real TPU VMs the same variables are
set; JAX's own cluster detection would also work there, but explicit values work everywhere,
including CPU processes standing in for hosts in tests (XLA_FLAGS=
--xla_force_host_platform_device_count=N gives each N devices; collectives go through gloo).

`MARIN_FAULT_KILL_AT_STEP` / `MARIN_FAULT_PROCESS` are a preemption drill: that process SIGKILLs
itself when it reaches the step (once per output path and process), exactly like a host taken
away mid-training (used by `experiments/tiny_multihost.py --preempt_at_step` and the tests).
`MARIN_FAULT_HOLD_AT_STEP` instead stops that process there (once per output path and process)
until it is killed from outside: the tests kill the driver, or remove the host's Ray node, while
the hosts are known to be mid-run. Both may be set: the kill comes first, the hold on the retry.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

import jax

from marin_lab import host_env
from marin_lab.io import fs as mfs
from marin_lab.training.errors import TrainingError

logger = logging.getLogger(__name__)

ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID = host_env.COORDINATOR, host_env.NUM_PROCESSES, host_env.PROCESS_ID
ENV_INIT_TIMEOUT = "MARIN_DISTRIBUTED_TIMEOUT_S"
ENV_FAULT_STEP = "MARIN_FAULT_KILL_AT_STEP"
ENV_FAULT_PROCESS = "MARIN_FAULT_PROCESS"
ENV_HOLD_STEP = "MARIN_FAULT_HOLD_AT_STEP"
ENV_NOTICE_STEP = "MARIN_FAULT_NOTICE_AT_STEP"
"""The notice drill: the fault process gets a preemption notice (as its metadata would say) at this step."""


def initialize_from_env(env: Mapping[str, str] | None = None) -> bool:
    """Join the step's JAX cluster if the environment names one; True if this is a multi-process run.

    Must run before any JAX computation in the process. Idempotent: a second call (a later phase in
    the same host process) finds JAX already initialised and does nothing.
    """
    env = os.environ if env is None else env
    if ENV_COORDINATOR not in env:
        return False
    try:
        num, pid = int(env[ENV_NUM_PROCESSES]), int(env[ENV_PROCESS_ID])
        timeout = int(env.get(ENV_INIT_TIMEOUT, "300"))
    except (KeyError, ValueError) as err:
        raise TrainingError(
            f"{ENV_COORDINATOR} is set but {ENV_NUM_PROCESSES}/{ENV_PROCESS_ID} are missing or not "
            f"integers ({err}); the slice runner sets all three, set them together or none"
        ) from err
    if not 0 <= pid < num:
        raise TrainingError(f"{ENV_PROCESS_ID}={pid} is outside [0, {ENV_NUM_PROCESSES}={num})")
    if _already_initialized():
        return jax.process_count() > 1
    if pid != 0:
        _await_coordinator(env[ENV_COORDINATOR], pid, num, timeout)
    # CPU processes stand in for hosts in tests: their cross-process collectives need gloo (the
    # flag only concerns the CPU backend; asking for the backend here would start it too early).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    cache_programs_of_every_cpu_process()
    leave_threads_for_collectives()  # this process's own environment: XLA reads it there
    # Said before, because JAX ends the process itself (DEADLINE_EXCEEDED in RegisterTask, not a
    # Python exception) when the others do not all arrive in time.
    logger.info(
        "process %d of %d joining the JAX cluster at %s; waiting up to %ds for every host "
        "(if this process is then terminated with DEADLINE_EXCEEDED, a host never arrived: "
        "check that all %d hosts started)",
        pid,
        num,
        env[ENV_COORDINATOR],
        timeout,
        num,
    )
    try:
        jax.distributed.initialize(
            coordinator_address=env[ENV_COORDINATOR], num_processes=num, process_id=pid, initialization_timeout=timeout
        )
    except Exception as err:  # noqa: BLE001 - JAX raises XlaRuntimeError/RuntimeError variants
        raise TrainingError(
            f"process {pid} of {num} could not join the JAX cluster at {env[ENV_COORDINATOR]} within "
            f"{timeout}s ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); a host "
            "never arrived or the coordinator (host 0 of slice 0) is unreachable: check that every "
            "host started and can reach that address"
        ) from err
    return True


def mesh_for_hardware(mesh: Any, env: Mapping[str, str] | None = None) -> Any:
    """The step's mesh config on the hardware it was given: when the step accepted several slice
    shapes (`TpuAlternatives` sets MESH_FOLLOWS_HARDWARE), its `replica` axis spans the slices the
    runner placed; otherwise the config's own."""
    env = os.environ if env is None else env
    if env.get(host_env.MESH_FOLLOWS_HARDWARE) == "1" and host_env.NUM_SLICES in env:
        return mesh.on_slices(int(env[host_env.NUM_SLICES]))
    return mesh


def check_slices(mesh_slices: int, env: Mapping[str, str] | None = None) -> None:
    """Compare the mesh's slice count with the slices the slice runner gave the step.

    More slices than the mesh names: it still runs, one flat mesh over all of them, but the in-slice
    axes then cross the data-centre network (a warning). A mesh of several slices on another count
    is an error: simulated CPU slices would silently cut hosts into slices that do not exist."""
    env = os.environ if env is None else env
    if host_env.NUM_SLICES not in env:
        return
    given = int(env[host_env.NUM_SLICES])
    if given == mesh_slices:
        return
    if mesh_slices == 1:
        logger.warning(
            "this step runs on %d slices but mesh.slices=1: parameters are sharded across the "
            "slices and cross the data-centre network every layer; set mesh.slices=%d",
            given,
            given,
        )
        return
    raise TrainingError(
        f"mesh.slices={mesh_slices}, but this step runs on {given} slice(s) "
        f"({host_env.NUM_SLICES}); set mesh.slices={given} or ask TpuResources for "
        f"slices={mesh_slices}"
    )


CPU_POOL_VAR = "NPROC"
"""XLA sizes its CPU client's thread pool from this variable when set, else from the core count."""


def leave_threads_for_collectives(env: MutableMapping[str, str] | None = None) -> str | None:
    """Before the CPU backend starts: a thread pool at least twice this process's CPU devices.

    XLA's CPU client runs every local device's part of a collective on one thread pool sized to
    the cores, but at least the device count. At exactly the device count (2 devices per process on
    a 2-core machine, as in the multi-host tests) one device blocked in a gloo collective can leave
    its peer device no thread to reach it: 3 of 3 runs of 200 data-parallel nano steps as
    2 processes x 2 devices hung; 0 of 3 with a 4-thread pool. A value the user set wins; returns
    the value in force (None when the device count is not forced, i.e. one CPU device)."""
    target = os.environ if env is None else env
    match = re.search(r"--xla_force_host_platform_device_count=(\d+)", target.get("XLA_FLAGS", ""))
    if CPU_POOL_VAR in target or not match:
        return target.get(CPU_POOL_VAR)
    target[CPU_POOL_VAR] = str(max(os.cpu_count() or 1, 2 * int(match.group(1))))
    return target[CPU_POOL_VAR]


def cache_programs_of_every_cpu_process() -> bool:
    """Let every process of a CPU cluster write the programs it compiles to JAX's persistent
    compilation cache (when one is configured), not process 0 alone; True if installed.

    JAX writes cache entries from process 0 only, so that the hosts of a TPU slice, which compile
    the same program under the same key, do not all write one file. On CPU the key holds a
    topology fingerprint that differs from process to process, so process 1's programs are never
    written, and every rerun of a multi-process CPU job (simulated hosts: the multi-host tests,
    `experiments/tiny_multihost.py`, a resumed run) compiled them again in every process but the
    first. With this, such a rerun reads every program back in every process: a 2 x 2-device rerun
    of the tiny trainer took 3.2-3.6 s instead of 6.2-7.0 s, with identical weights
    (docs/benchmarks.md, "Test suite"). Entries of other platforms are left to JAX's rule.

    JAX offers no setting for this: the shim wraps its private `_cache_write` (the pinned JAX
    0.10), and does nothing when that function is not there.
    """
    try:
        from jax._src import compilation_cache, compiler
        from jax._src import distributed as jax_distributed
    except ImportError:
        return False
    write = getattr(compiler, "_cache_write", None)
    if write is None or not hasattr(compilation_cache, "put_executable_and_time"):
        return False
    if getattr(write, "marin_every_cpu_process", False):
        return True

    def cache_write(
        cache_key: str,
        compile_time_secs: float,
        module_name: str,
        backend: Any,
        executable: Any,
        host_callbacks: Any,
    ) -> None:
        if jax_distributed.global_state.process_id == 0 or host_callbacks or getattr(backend, "platform", "") != "cpu":
            write(cache_key, compile_time_secs, module_name, backend, executable, host_callbacks)
            return
        if compile_time_secs < getattr(jax.config, "jax_persistent_cache_min_compile_time_secs", 0.0):
            return
        try:
            compilation_cache.put_executable_and_time(
                cache_key, module_name, executable, backend, int(compile_time_secs)
            )
        except Exception as err:  # noqa: BLE001 - as JAX does: a cache that cannot be written costs a compile
            logger.warning("could not write %s to the compilation cache: %s: %s", module_name, type(err).__name__, err)

    cache_write.marin_every_cpu_process = True  # type: ignore[attr-defined]
    compiler._cache_write = cache_write
    return True


def _await_coordinator(address: str, pid: int, num: int, timeout_s: int) -> None:
    """Wait until host 0's coordination service accepts connections, or fail naming it."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return
        except OSError as err:
            if time.monotonic() > deadline:
                raise TrainingError(
                    f"process {pid} of {num}: the JAX coordinator at {address} (process 0, host 0 of "
                    f"slice 0) did not come up within {timeout_s}s ({err}); that host never arrived "
                    f"or is unreachable from here: check it started ({ENV_INIT_TIMEOUT} sets the wait)"
                ) from err
            time.sleep(0.5)


_MEETINGS: dict[str, int] = {}


def compile_then_meet(fn: Any, args: tuple[Any, ...], label: str, env: Mapping[str, str] | None = None) -> float:
    """Compile `fn` for `args` ahead of its first call, then wait until every host has done the same;
    returns the seconds this host waited for the others (0 in a single-process run).

    Gloo (the CPU backend's cross-process collectives) gives the peers of a collective 30 s to
    meet the first time it runs, and that cannot be configured from JAX. Compiling under load
    takes longer than that on some hosts and not others (a 2-slice step on 2 busy cores: hosts
    reached the first collective over 30 s apart and the step failed). Here the hosts meet at a
    coordination-service barrier, whose wait is `MARIN_DISTRIBUTED_TIMEOUT_S` (300 s), once all
    of them compiled, so the first collective starts on every host within moments. Elsewhere
    (TPU hosts) the barrier costs one round trip to the coordinator. `fn` without `.lower` (not a
    jitted function) is compiled at its first call, as before, after the barrier.
    """
    env = os.environ if env is None else env
    lower = getattr(fn, "lower", None)
    if lower is not None:
        lower(*args).compile()
    from jax._src import distributed as jax_distributed

    client = jax_distributed.global_state.client
    if client is None:
        return 0.0
    timeout = int(env.get(ENV_INIT_TIMEOUT, "300"))
    _MEETINGS[label] = _MEETINGS.get(label, 0) + 1
    barrier = f"marin_lab:{label}:{_MEETINGS[label]}"
    started = time.monotonic()
    try:
        client.wait_at_barrier(barrier, timeout_in_ms=timeout * 1000)
    except Exception as err:  # noqa: BLE001 - the client raises XlaRuntimeError variants
        raise TrainingError(
            f"process {jax.process_index()} of {jax.process_count()} compiled {label} and waited "
            f"{timeout}s for the other hosts to do the same ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}); a host is stuck or far slower: check "
            f"every host's log ({ENV_INIT_TIMEOUT} sets the wait)"
        ) from err
    waited = time.monotonic() - started
    logger.debug("%s: every host compiled; waited %.1fs for the last", label, waited)
    return waited


def _already_initialized() -> bool:
    from jax._src import distributed

    return distributed.global_state.client is not None


NOTICE_KEY = "marin_lab/preemption_stop_step"
NOTICE_MARGIN_STEPS = 3
"""Steps between the first notice and the step every process stops at: more than the hosts' loops can
drift apart: a process fetches step k's metrics only once every process dispatched step k, so none is more
than one step ahead of another when it looks."""


class PreemptionAgreement:
    """The step at which every process of a run stops for a preemption notice, saving there.

    One process alone stops at the step it sees its notice. In a multi-process run the notice may
    reach one host only (its VM's metadata): the first to see one writes `seen + NOTICE_MARGIN_STEPS`
    into the JAX coordination service's key-value store (first writer wins), and every process
    reads that key once per step, a host-side lookup that never waits on the devices; all of them
    then save the same checkpoint and end the attempt together."""

    def __init__(self, multi_process: bool) -> None:
        self.stop_at: int | None = None
        self.client: Any = None
        """The coordination service's client; None for one process (or one that never joined): it decides alone."""
        if multi_process:
            from jax._src import distributed as jax_distributed

            self.client = jax_distributed.global_state.client

    def stop_step(self, done: int) -> int | None:
        """Once known, the step to stop at (>= the step when first seen); None while no host got a notice."""
        if self.stop_at is not None:
            return self.stop_at
        noticed = host_env.PREEMPTION_NOTICE.is_set()
        if self.client is None:
            self.stop_at = done if noticed else None
            return self.stop_at
        if noticed:
            with contextlib.suppress(Exception):  # another host wrote it first: its step holds
                self.client.key_value_set(NOTICE_KEY, str(done + NOTICE_MARGIN_STEPS))
        try:
            self.stop_at = int(self.client.key_value_try_get(NOTICE_KEY))
        except Exception:  # noqa: BLE001 - not found: no host got a notice
            return None
        return self.stop_at


def maybe_fault(step: int, output_path: str) -> None:
    """The preemption drills: SIGKILL this process (or hold it until killed from outside) once it
    computed `step`, before that step's checkpoint is written, if the environment asks for it.
    Once per output path and process, like a real preemption: a marker left beside the run
    (`.preemption-drill-{kill|hold}-step-{step}-process-{index}`) lets the retry (same environment)
    go through."""
    if int(os.environ.get(ENV_FAULT_PROCESS, "0")) != jax.process_index():
        return
    if os.environ.get(ENV_NOTICE_STEP) == str(step):
        logger.warning("preemption drill: process %d gets a preemption notice at step %d", jax.process_index(), step)
        host_env.PREEMPTION_NOTICE.set()
    for variable, drill in ((ENV_FAULT_STEP, "kill"), (ENV_HOLD_STEP, "hold")):
        at = os.environ.get(variable)
        if at is None or int(at) != step:
            continue
        marker = mfs.join(output_path, f".preemption-drill-{drill}-step-{step}-process-{jax.process_index()}")
        if mfs.exists(marker):
            continue
        mfs.atomic_write_text(marker, "")
        logger.warning("preemption drill: process %d %ss itself at step %d", jax.process_index(), drill, step)
        if drill == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # held until something outside (the test, a dead driver's Ray) kills this process
            time.sleep(1)
