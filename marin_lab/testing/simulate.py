"""Tiny deterministic workloads for simulating TPU steps on a fake Ray cluster.

`toy_train` stands in for the real trainer in preemption drills and tests: a numpy linear model
trained with momentum SGD, where each step's batch is a pure function of (seed, step), so a run
stopped at step k and resumed from its checkpoint ends with exactly the bits of a run that never
stopped. Like the real trainer, it writes `checkpoints/step-XXXXXX/` with a `COMPLETE` marker
(from worker 0 of slice 0 only) and resumes from the latest complete one. A preemption notice
(`host_env.PREEMPTION_NOTICE`, set by the slice runner's metadata watcher) checkpoints the step
just done and raises PreemptedError.
`report_host` records what one host saw (environment, pid), to check the slice layout.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import socket
import time

import numpy as np

from marin_lab.execution.errors import PreemptedError
from marin_lab.host_env import PREEMPTION_NOTICE

CHECKPOINT_DIR = "checkpoints"
COMPLETE = "COMPLETE"


@dataclasses.dataclass(frozen=True)
class ToyTrainConfig:
    """A toy training run that checkpoints to a local output path."""

    output_path: str
    """Local directory for checkpoints, progress and the final parameters."""
    num_steps: int = 20
    """Total optimisation steps."""
    checkpoint_every: int = 5
    """Steps between checkpoints."""
    dim: int = 16
    """Number of parameters."""
    learning_rate: float = 0.05
    """SGD learning rate."""
    seed: int = 0
    """Seed of the data stream and the true parameters."""
    step_sleep_s: float = 0.0
    """Seconds to sleep per step, so a drill can preempt mid-run."""
    crash_at_step: int | None = None
    """Worker exits abruptly (os._exit) at this step, once per output path: a simulated lost worker."""
    crash_host: tuple[int, int] = (0, 1)
    """(slice id, worker id) of the host that exits at crash_at_step."""
    raise_at_step: int | None = None
    """Raise RuntimeError at this step on every host (every attempt): a simulated bug."""


def _host() -> tuple[int, int]:
    return int(os.environ.get("MARIN_SLICE_ID", "0")), int(os.environ.get("TPU_WORKER_ID", "0"))


def _latest_checkpoint(root: str) -> tuple[int, str] | None:
    path = os.path.join(root, CHECKPOINT_DIR)
    if not os.path.isdir(path):
        return None
    steps = []
    for name in os.listdir(path):
        if name.startswith("step-") and name[5:].isdigit() and os.path.exists(os.path.join(path, name, COMPLETE)):
            steps.append(int(name[5:]))
    if not steps:
        return None
    step = max(steps)
    return step, os.path.join(path, f"step-{step:06d}")


def _save_checkpoint(root: str, step: int, state: dict[str, np.ndarray]) -> None:
    final = os.path.join(root, CHECKPOINT_DIR, f"step-{step:06d}")
    if os.path.exists(os.path.join(final, COMPLETE)):
        return
    tmp = f"{final}.tmp-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    for key, value in state.items():
        np.save(os.path.join(tmp, f"{key}.npy"), value)
    with open(os.path.join(tmp, COMPLETE), "w") as f:
        f.write(str(step))
    if os.path.exists(final):  # a half-written directory from an attempt killed mid-rename
        shutil.rmtree(final)
    os.rename(tmp, final)


def params_digest(params: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(params).tobytes()).hexdigest()


def _barrier(root: str, timeout_s: float = 120.0) -> None:
    """Wait until every host of this attempt arrived, as jax.distributed.initialize would.

    Without it a late host could resume from a checkpoint that an early host wrote in the same
    attempt. Keyed by the runner's per-attempt MARIN_RUN_ID; a no-op outside the runner.
    """
    run_id, hosts = os.environ.get("MARIN_RUN_ID"), int(os.environ.get("MARIN_NUM_HOSTS", "1"))
    if not run_id or hosts <= 1:
        return
    folder = os.path.join(root, ".barrier", run_id)
    os.makedirs(folder, exist_ok=True)
    slice_id, worker_id = _host()
    open(os.path.join(folder, f"{slice_id}-{worker_id}"), "w").close()
    deadline = time.monotonic() + timeout_s
    while len(os.listdir(folder)) < hosts:
        if time.monotonic() > deadline:
            raise TimeoutError(f"toy_train: only {len(os.listdir(folder))} of {hosts} hosts reached the barrier")
        time.sleep(0.02)


def toy_train(config: ToyTrainConfig) -> dict:
    """Train the toy model to num_steps, resuming from the latest complete checkpoint."""
    slice_id, worker_id = _host()
    _barrier(config.output_path)
    writer = (slice_id, worker_id) == (0, 0)
    true_w = np.random.default_rng([config.seed, 2**31]).standard_normal(config.dim)
    params = np.zeros(config.dim)
    momentum = np.zeros(config.dim)
    start = 0
    latest = _latest_checkpoint(config.output_path)
    if latest is not None:
        start, path = latest
        params = np.load(os.path.join(path, "params.npy"))
        momentum = np.load(os.path.join(path, "momentum.npy"))
    for step in range(start, config.num_steps):
        if config.raise_at_step == step:
            raise RuntimeError(f"toy_train: simulated bug at step {step}")
        if config.crash_at_step == step and (slice_id, worker_id) == tuple(config.crash_host):
            marker = os.path.join(config.output_path, ".crashed-once")
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.close(fd)
                os._exit(17)  # a worker vanishing without cleanup, as on a reclaimed VM
            except FileExistsError:
                pass
        rng = np.random.default_rng([config.seed, step])
        x = rng.standard_normal((32, config.dim))
        y = x @ true_w + 0.01 * rng.standard_normal(32)
        grad = 2.0 * x.T @ (x @ params - y) / len(y)
        momentum = 0.9 * momentum + grad
        params = params - config.learning_rate * momentum
        if config.step_sleep_s:
            time.sleep(config.step_sleep_s)
        done = step + 1
        noticed = PREEMPTION_NOTICE.is_set()
        if writer and (done % config.checkpoint_every == 0 or done == config.num_steps or noticed):
            _save_checkpoint(config.output_path, done, {"params": params, "momentum": momentum})
        if noticed and done < config.num_steps:
            # The VM is being reclaimed: the checkpoint above is what the next attempt resumes from.
            raise PreemptedError(f"toy_train: preemption notice at step {done}; checkpointed and stopped")
    if writer:
        np.save(os.path.join(config.output_path, "final_params.npy"), params)
    return {
        "steps": config.num_steps,
        "resumed_from": start,
        "params_sha256": params_digest(params),
        "host": [slice_id, worker_id],
    }


@dataclasses.dataclass(frozen=True)
class ReportHostConfig:
    """Where each host writes what it saw."""

    output_path: str
    """Local directory; one JSON file per host run lands in `hosts/`."""


ENV_KEYS = (
    "TPU_WORKER_ID",
    "TPU_WORKER_HOSTNAMES",
    "MEGASCALE_COORDINATOR_ADDRESS",
    "MEGASCALE_NUM_SLICES",
    "MEGASCALE_SLICE_ID",
    "MEGASCALE_PORT",
    "MARIN_SLICE_NAME",
    "MARIN_SLICE_ID",
    "MARIN_NUM_SLICES",
    "MARIN_MESH_FOLLOWS_HARDWARE",
)


def report_host(config: ReportHostConfig) -> dict:
    """Write this host's multislice environment to `hosts/` and return it."""
    env = {k: os.environ[k] for k in ENV_KEYS if k in os.environ}
    seen = {"pid": os.getpid(), "hostname": socket.gethostname(), "env": env}
    out = os.path.join(config.output_path, "hosts")
    os.makedirs(out, exist_ok=True)
    name = f"{env.get('MARIN_SLICE_NAME')}-w{env.get('TPU_WORKER_ID')}-{os.getpid()}.json"
    with open(os.path.join(out, name), "w") as f:
        json.dump(seen, f)
    return seen


__all__ = ["ReportHostConfig", "ToyTrainConfig", "params_digest", "report_host", "toy_train"]
