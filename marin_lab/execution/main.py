"""`executor_main`: the bottom line of every experiment file, with its command-line flags."""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Sequence

import draccus

from marin_lab.execution.errors import MarinLabError
from marin_lab.execution.executor import Executor, RunReport, default_prefix
from marin_lab.execution.step import ExecutorStep


@dataclasses.dataclass(frozen=True)
class ExecutorMainConfig:
    prefix: str | None = None
    """Where outputs and records go (local folder, gs://bucket/path). Default: $MARIN_PREFIX, else ./marin_store."""
    dry_run: bool = False
    """Print run / skip / wait for every step, with the reason, and run nothing."""
    run_only: list[str] | None = None
    """Regexes over step names: run only matching steps (and their unfinished ancestors)."""
    force_run_failed: bool = False
    """Run steps whose last status is FAILED again (otherwise the run stops at them)."""
    max_concurrent: int | None = None
    """At most this many steps at once (default: max(cores, 4))."""
    backend: str = "ray"
    """'ray' (a local Ray is started unless RAY_ADDRESS or --ray_address names a cluster) or 'local'."""
    ray_address: str | None = None
    """Address of a running Ray cluster."""
    lease_timeout_s: float = 60.0
    """A lease not renewed for this long is stale and may be taken over."""
    max_preemption_retries: int = 10
    """Retries after a lost worker, node or slice."""
    max_failure_retries: int = 0
    """Retries after an exception raised by a step's function."""


# Set by `capture_steps` (used by `marin-lab explain`): executor_main records its steps and stops.
_CAPTURE: list | None = None


class _Captured(Exception):
    pass


def executor_main(
    steps: Sequence[ExecutorStep],
    description: str | None = None,
    config: ExecutorMainConfig | None = None,
    args: Sequence[str] | None = None,
) -> RunReport | None:
    """Run `steps` (and everything they depend on) with flags parsed from the command line."""
    if _CAPTURE is not None:
        _CAPTURE.append((list(steps), description))
        raise _Captured()
    if config is None:
        argv = _normalize_run_only(list(sys.argv[1:] if args is None else args))
        config = draccus.parse(config_class=ExecutorMainConfig, args=argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        executor = Executor(
            prefix=config.prefix or default_prefix(),
            backend=config.backend,
            max_concurrent=config.max_concurrent,
            force_run_failed=config.force_run_failed,
            lease_timeout_s=config.lease_timeout_s,
            max_preemption_retries=config.max_preemption_retries,
            max_failure_retries=config.max_failure_retries,
            ray_address=config.ray_address,
            description=description,
        )
        report = executor.run(steps, run_only=config.run_only, dry_run=config.dry_run)
    except MarinLabError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    if report.experiment_path:
        print(f"Records: {report.experiment_path}", flush=True)
    return report


def _normalize_run_only(argv: list[str]) -> list[str]:
    """Accept `--run_only REGEX` (and `--run_only=REGEX`) as well as draccus' `--run_only '[A,B]'`."""
    out = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--run_only" and i + 1 < len(argv) and not argv[i + 1].lstrip().startswith("["):
            out += [arg, f"[{argv[i + 1]}]"]
            i += 2
            continue
        if arg.startswith("--run_only=") and not arg.split("=", 1)[1].lstrip().startswith("["):
            arg = f"--run_only=[{arg.split('=', 1)[1]}]"
        out.append(arg)
        i += 1
    return out


def capture_steps(script: str, argv: Sequence[str] = ()) -> tuple[list[ExecutorStep], str | None]:
    """Run an experiment file up to its `executor_main` call and return the steps it passes."""
    import runpy

    global _CAPTURE
    saved_argv = sys.argv
    _CAPTURE = []
    try:
        sys.argv = [script, *argv]
        try:
            runpy.run_path(script, run_name="__main__")
        except _Captured:
            pass
        if not _CAPTURE:
            raise MarinLabError(f"{script} never called executor_main(steps=...); nothing to explain")
        return _CAPTURE[0]
    finally:
        _CAPTURE = None
        sys.argv = saved_argv
