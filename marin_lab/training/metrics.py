"""Training metrics: MFU arithmetic, `metrics.jsonl` in the output path, and W&B.

W&B runs offline unless a project is configured and `WANDB_API_KEY` is set; the key is read by
wandb itself from the environment and never passes through (or is logged by) this module.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from typing import Any

import jax

from marin_lab.io import fs as mfs

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

    def resolved_mode(self) -> str:
        if self.mode:
            return self.mode
        if not self.enabled:
            return "disabled"
        if os.environ.get("WANDB_MODE"):
            return os.environ["WANDB_MODE"]
        return "online" if self.project and os.environ.get("WANDB_API_KEY") else "offline"


class MetricsLogger:
    """Writes one JSON object per logged step to metrics.jsonl (and W&B when enabled)."""

    def __init__(self, output_path: str, wandb_config: WandbConfig, run_name: str,
                 config_for_wandb: dict[str, Any], resume_step: int = 0):
        self.url = mfs.join(output_path, "metrics.jsonl")
        # A resumed run drops what the interrupted run logged past its checkpoint, so each step
        # appears once and the file matches an unbroken run.
        self.lines: list[str] = []
        if resume_step and mfs.exists(self.url):
            for line in mfs.read_text(self.url).splitlines():
                if line.strip() and json.loads(line)["step"] < resume_step:
                    self.lines.append(line)
        self._run = None
        mode = wandb_config.resolved_mode()
        if mode != "disabled" and jax.process_index() == 0:
            self._run = _init_wandb(wandb_config, mode, run_name, output_path, config_for_wandb)

    def log(self, record: dict[str, Any]) -> None:
        self.lines.append(json.dumps(record, sort_keys=True))
        if self._run is not None:
            self._run.log({k: v for k, v in record.items() if k not in ("step", "time") and v is not None},
                          step=record["step"])

    def flush(self) -> None:
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


def _init_wandb(cfg: WandbConfig, mode: str, run_name: str, output_path: str, config: dict[str, Any]):
    try:
        import wandb
    except ImportError as err:  # pragma: no cover - wandb is a core dependency
        raise RuntimeError("W&B logging needs `wandb`; install it or set wandb.enabled=false") from err
    os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    directory = output_path if mfs.is_local(output_path) else tempfile.mkdtemp(prefix="wandb-")
    os.makedirs(directory, exist_ok=True)
    return wandb.init(project=cfg.project or "marin_lab", entity=cfg.entity, name=run_name,
                      mode=mode, dir=directory, config=config, tags=list(cfg.tags),
                      reinit="finish_previous")
