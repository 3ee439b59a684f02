"""Training metrics: MFU arithmetic, `metrics.jsonl` in the output path, and W&B.

W&B runs offline unless a project is configured and `WANDB_API_KEY` is set; the key is read by
wandb itself from the environment and never passes through (or is logged by) this module.

The W&B run belongs to the step, not to the process: its id is derived from the step's output
path (`wandb_run_id`: the identity `name-hash8` plus 8 hex of the whole path, so the same step
under another prefix, e.g. a reproduction, is another run), and W&B is told to resume it, so a
preempted and resumed training step continues one run. The run's folder is kept under the output
path (`{output_path}/wandb/`) for any prefix: written there directly on a local prefix, written to
a temporary folder and copied there when the run closes on an object store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any, Literal

import jax

from marin_lab.io import fs as mfs
from marin_lab.store.layout import METRICS_FILE
from marin_lab.store.metrics import parse_metrics
from marin_lab.versioning import field_hints

logger = logging.getLogger(__name__)

# Dense bf16 peak FLOP/s per device (per chip; TPU v4/v5p chips count as one device here).
PEAK_FLOPS: dict[str, float] = {
    "tpu v4": 275e12,
    "tpu v5 lite": 197e12,  # v5e reports itself as "TPU v5 lite"
    "tpu v5e": 197e12,
    "tpu v5p": 459e12,
    "tpu v5": 459e12,
    "tpu v6 lite": 918e12,  # v6e (Trillium)
    "tpu v6e": 918e12,
    "h100": 989e12,
    "h200": 989e12,
    "a100": 312e12,
}

TPU_PEAK_BY_TYPE = {"v4": 275e12, "v5e": 197e12, "v5litepod": 197e12, "v5p": 459e12, "v6e": 918e12}


def device_peak_flops(device_kind: str, configured: float | None = None) -> float | None:
    """Peak dense bf16 FLOP/s for a jax device kind; None when unknown (e.g. CPU)."""
    if configured:
        return configured
    kind = device_kind.lower()
    for name in sorted(PEAK_FLOPS, key=len, reverse=True):
        if name in kind:
            return PEAK_FLOPS[name]
    return None


def mfu(flops_per_token: float, tokens_per_s: float, num_devices: int, peak: float | None) -> float | None:
    if not peak or tokens_per_s <= 0:
        return None
    return flops_per_token * tokens_per_s / (peak * num_devices)


class StepTimer:
    """Seconds each step kept the device busy, when steps are dispatched one ahead of their metrics.

    The train loop dispatches step k+1 before it fetches step k's metrics (so the device never
    waits for the host). Step k's time then runs from when the device could start it (it was
    dispatched and step k-1 had finished) to when its metrics arrived. Counting from dispatch
    alone would also count the wait behind step k-1 and report about half the real tokens/s.
    Summed over a run the times add up to the wall time from the first step's end to the last's,
    less any time the device sat idle waiting for the host (a checkpoint save, an evaluation)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.previous_done = float("-inf")

    def finished(self, dispatched: float) -> float:
        """The step dispatched at `dispatched` (a `clock` time) just returned its metrics."""
        done = self.clock()
        elapsed = done - max(dispatched, self.previous_done)
        self.previous_done = done
        return elapsed


WandbMode = Literal["online", "offline", "disabled"]
# W&B's own older spellings, as WANDB_MODE may hold them.
_MODE_ALIASES: dict[str, WandbMode] = {
    "online": "online",
    "run": "online",
    "offline": "offline",
    "dryrun": "offline",
    "disabled": "disabled",
}


@field_hints
@dataclasses.dataclass(frozen=True)
class WandbConfig:
    """Weights & Biases logging."""

    enabled: bool = True
    """Log to W&B at all."""
    project: str | None = None
    """W&B project; with WANDB_API_KEY set this makes the run online."""
    entity: str | None = None
    """W&B entity (team or user)."""
    mode: str | None = None
    """Force 'online', 'offline' or 'disabled'; None decides from project and key."""
    tags: tuple[str, ...] = ()
    """Tags for the run."""

    def resolved_mode(self) -> WandbMode:
        """The mode the run logs in; ValueError naming the field or variable for one W&B does not know."""
        if self.mode:
            return _known_mode(self.mode, "wandb.mode")
        if not self.enabled:
            return "disabled"
        if os.environ.get("WANDB_MODE"):
            return _known_mode(os.environ["WANDB_MODE"], "the environment variable WANDB_MODE")
        return "online" if self.project and os.environ.get("WANDB_API_KEY") else "offline"


def _known_mode(value: str, where: str) -> WandbMode:
    if value not in _MODE_ALIASES:
        raise ValueError(f"{where} is {value!r}; use one of 'online', 'offline' or 'disabled'")
    return _MODE_ALIASES[value]


GOODPUT_FIELDS = ("train_s", "data_wait_s", "checkpoint_s", "restore_s", "first_step_s")
"""Seconds a line carries for goodput (execution/record/goodput.py), each summed since the line
before: device time of the steps (`train_s`), waits for batches, checkpoint saves (on the line
before the save, which a resume keeps with the checkpoint), the restore and the first step (which
includes compilation) of a run. A run's first line also carries `segment_start` (when this run's
logging began, epoch seconds) and, when it resumed past lines an interrupted run had logged,
`resumed_at` and `steps_redone` (how many of those steps it is doing again)."""
WALL_CLOCK_FIELDS = (*GOODPUT_FIELDS, "segment_start", "resumed_at", "steps_redone")
"""What a metrics line holds from the wall clock: a run log's volatile fields for `marin-lab reproduce`."""


class MetricsLogger:
    """Writes one JSON object per logged step to metrics.jsonl (and W&B when enabled)."""

    def __init__(
        self,
        output_path: str,
        wandb_config: WandbConfig,
        run_name: str,
        config_for_wandb: dict[str, Any],
        resume_step: int = 0,
    ):
        self.url = mfs.join(output_path, METRICS_FILE)
        # A resumed run drops what the interrupted run logged past its checkpoint, so each step
        # appears once and the file matches an unbroken run. Rows count steps completed, as
        # checkpoints do: the rows of the checkpoint's own step (training, evaluation) are kept.
        self.lines: list[str] = []
        self._pending: dict[str, float] = {"segment_start": time.time()}  # goodput: GOODPUT_FIELDS
        if resume_step and mfs.exists(self.url):
            kept = parse_metrics(mfs.read_bytes(self.url)).rows
            self.lines.extend(json.dumps(row, sort_keys=True) for row in kept if row["step"] <= resume_step)
            redone = max((row["step"] for row in kept if row["step"] > resume_step), default=resume_step)
            if redone > resume_step:  # steps completed past the checkpoint, done again from it
                self._pending.update(resumed_at=resume_step, steps_redone=int(redone) - resume_step)
        self._run = None
        self.output_path = output_path
        self.mode = wandb_config.resolved_mode()
        self.run_id = wandb_run_id(output_path)
        self._direct = mfs.is_local(output_path)
        self._local_dir = mfs.fs_and_path(output_path)[1] if self._direct else None
        if self.mode != "disabled" and jax.process_index() == 0:
            if self._local_dir is None:
                self._local_dir = tempfile.mkdtemp(prefix="wandb-")
            self._run = _init_wandb(wandb_config, self.mode, run_name, self._local_dir, config_for_wandb, self.run_id)

    def wandb_info(self) -> dict[str, Any]:
        """For the step's result (and so its record and the browser): which W&B run, and where."""
        if self.mode == "disabled":
            return {"mode": "disabled", "run_id": None, "dir": None}
        info = {"mode": self.mode, "run_id": self.run_id, "dir": mfs.join(self.output_path, "wandb")}
        if self.mode == "online" and self._run is not None and getattr(self._run, "url", None):
            info["url"] = self._run.url  # the browser links the run's page
        return info

    def note(self, key: str, seconds: float, *, on_last_line: bool = False) -> None:
        """Add `seconds` to the goodput field `key` (GOODPUT_FIELDS) of the next logged line, or of the
        last one logged (`on_last_line`; the next when none was logged in this run yet)."""
        if on_last_line and "segment_start" not in self._pending and self.lines:
            row = json.loads(self.lines[-1])
            row[key] = round(row.get(key, 0.0) + seconds, 6)
            self.lines[-1] = json.dumps(row, sort_keys=True)
            return
        self._pending[key] = self._pending.get(key, 0.0) + seconds

    def log(self, record: dict[str, Any]) -> None:
        if self._pending:
            record = {**record, **{k: round(v, 6) if isinstance(v, float) else v for k, v in self._pending.items()}}
            self._pending = {}
        self.lines.append(json.dumps(record, sort_keys=True))
        if self._run is not None:
            self._run.log(
                {k: v for k, v in record.items() if k not in ("step", "time") and v is not None}, step=record["step"]
            )

    def flush(self) -> None:
        if jax.process_index() != 0:  # every host computes the same metrics; one writes them
            return
        # Rewritten whole: object stores cannot append, and the file stays small (one line/step).
        mfs.atomic_write_text(self.url, "".join(line + "\n" for line in self.lines))

    def close(self, summary: dict[str, Any] | None = None) -> None:
        self.flush()
        if self._run is not None:
            if summary:
                for k, v in summary.items():
                    if isinstance(v, (int, float, str, bool)):
                        self._run.summary[k] = v
            self._run.finish()
            self._run = None
            self._copy_run_folder()

    def _copy_run_folder(self) -> None:
        """On an object store, the run folder written locally goes under the output path."""
        if self._local_dir is None or self._direct:
            return
        local = os.path.join(self._local_dir, "wandb")
        if os.path.isdir(local):
            fs, path = mfs.fs_and_path(mfs.join(self.output_path, "wandb"))
            for root, _, files in os.walk(local):
                for name in files:
                    src = os.path.join(root, name)
                    if os.path.islink(src):
                        continue  # W&B's "latest-run" link: the folders themselves are copied
                    rel = os.path.relpath(src, local).replace(os.sep, "/")
                    fs.put_file(src, f"{path}/{rel}")
        shutil.rmtree(self._local_dir, ignore_errors=True)


def wandb_run_id(output_path: str) -> str:
    """The W&B run id of the training step writing to `output_path` (see the module docstring)."""
    path = output_path.rstrip("/")
    identity = re.sub(r"[^A-Za-z0-9_.-]", "-", path.rsplit("/", 1)[-1])[:48]
    return f"{identity}-{hashlib.sha256(path.encode('utf-8')).hexdigest()[:8]}"


def _init_wandb(cfg: WandbConfig, mode: WandbMode, run_name: str, directory: str, config: dict[str, Any], run_id: str):
    try:
        import wandb
    except ImportError as err:  # pragma: no cover - wandb is a core dependency
        raise RuntimeError("W&B logging needs `wandb`; install it or set wandb.enabled=false") from err
    os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    os.makedirs(directory, exist_ok=True)
    # W&B prints a banner at init and a ~30-line summary at finish, once per training step; the run
    # has its own progress lines, so W&B stays silent unless MARIN_LAB_VERBOSE is set (--verbose).
    settings = wandb.Settings(silent=not os.environ.get("MARIN_LAB_VERBOSE"))
    return wandb.init(
        project=cfg.project or "marin_lab",
        entity=cfg.entity,
        name=run_name,
        id=run_id,
        resume="allow",
        mode=mode,
        dir=directory,
        config=config,
        tags=list(cfg.tags),
        reinit="finish_previous",
        settings=settings,
    )
