"""`ExecutorMainConfig`: the executor's settings, as `executor_main` reads them from the command line
(their docstrings are its `--help`); `Executor(config)` is the executor they describe."""

from __future__ import annotations

import dataclasses
from typing import Any

from marin_lab.execution.state.lease import DEFAULT_TIMEOUT_S


def _flag(default: Any, metavar: str) -> Any:
    """A field whose flag shows `metavar` in `--help` (a path, an address, the choices) instead of `str`."""
    return dataclasses.field(default=default, metadata={"custom_args": {"metavar": metavar}})


@dataclasses.dataclass(frozen=True)
class ExecutorMainConfig:
    prefix: str | None = _flag(None, "PATH")
    """Where outputs and records go (local folder, gs://bucket/path). Default: $MARIN_PREFIX, else
    marin_store at the project root."""
    executor_info_base_path: str | None = _flag(None, "PATH")
    """Where the experiment record goes (default: {prefix}/experiments, where the browser looks)."""
    dry_run: bool = False
    """Print run / skip / wait for every step, with the reason, and run nothing."""
    format: str = _flag("text", "{text,markdown,json}")
    """How --dry_run prints the plan: 'text', 'markdown' (for a pull request) or 'json'."""
    run_only: list[str] | None = None
    """Regexes over step names (`re.search`): run only matching steps (and what they wait for).
    On the command line: `--run_only REGEX [REGEX ...]`, or a JSON list `--run_only '["a", "b"]'`."""
    force_run_failed: bool = False
    """Run steps whose last status is FAILED again (otherwise the run stops at them)."""
    force_run: list[str] | None = None
    """Regexes over step names (`re.search`): matching steps run again even after a SUCCESS (a new
    attempt writes their output again; steps downstream are reused unless they match too).
    On the command line: `--force_run REGEX [REGEX ...]`, or a JSON list."""
    max_concurrent: int | None = None
    """At most this many steps at once (default: max(cores, 4))."""
    backend: str = _flag("ray", "{ray,local}")
    """'ray' (a local Ray is started unless RAY_ADDRESS or --ray_address names a cluster) or 'local'."""
    ray_address: str | None = _flag(None, "ADDRESS")
    """Address of a running Ray cluster."""
    lease_timeout_s: float = DEFAULT_TIMEOUT_S
    """A lease not renewed for this long is stale and may be taken over."""
    heartbeat_s: float | None = None
    """How often a running step renews its lease (default: a quarter of --lease_timeout_s)."""
    wait_poll_s: float = 1.0
    """How often a step waiting for another driver's run of it reads that step's status."""
    max_preemption_retries: int = 10
    """Retries after a lost worker, node or slice."""
    max_failure_retries: int = 0
    """Retries after an exception raised by a step's function."""
    allow_cross_region: list[str] | None = None
    """Regexes over step names allowed to read inputs from another region than the prefix's (egress is billed)."""
    transfer_budget_bytes: int | None = None
    """Cross-region inputs allowed for the whole experiment while their total size stays within this many bytes."""
    unschedulable_timeout_s: float | None = None
    """How long a step may wait while no node of the cluster can hold its resources, before it fails
    (default: $MARIN_UNSCHEDULABLE_TIMEOUT_S, else 600). On a known cluster it is refused at once."""
    verbose: bool = False
    """Every library's INFO lines in the console and the step logs (JAX, datasets, lm-eval, ...); by
    default a step shows marin_lab's own lines and everyone's warnings. Also `MARIN_LAB_VERBOSE=1`."""
    cost: bool = False
    """The dry run's cost lines for every step; by default only steps on accelerators (GPUs, TPUs)
    get them, and the totals count those steps only."""
    prices: str | None = _flag(None, "FILE")
    """A price table (JSON, or TOML named *.toml) over the default list prices, for the costs --dry_run
    shows: {"prices": {"tpu-v5e": 1.2, ...}, "currency", "date", "source"} (docs/executor.md, "Cost")."""


SETTINGS = frozenset(f.name for f in dataclasses.fields(ExecutorMainConfig))
"""The executor settings an `ExecutorMainConfig` holds (what a front end's keyword arguments may set)."""
