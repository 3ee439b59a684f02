"""`executor_main`: the bottom line of every experiment file, with its command-line flags."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import logging
import multiprocessing
import os
import re
import sys
from collections.abc import Sequence

import draccus
import yaml

from marin_lab.execution.config import ExecutorMainConfig
from marin_lab.execution.errors import ExecutorConfigError, MarinLabError, RunInterruptedError
from marin_lab.execution.executor import Executor, RunReport
from marin_lab.execution.plan.planner import compile_run_only
from marin_lab.execution.plan.step import ExecutorStep, InputName
from marin_lab.execution.run.logs import VERBOSE_ENV
from marin_lab.flags import bare_bool_flags
from marin_lab.jax_platform import default_to_cpu

logger = logging.getLogger(__name__)

# Set by `capture_steps` (used by `marin-lab explain`): executor_main records its steps and stops.
_CAPTURE: list | None = None


class _Captured(Exception):
    pass


def executor_main(
    config: ExecutorMainConfig | Sequence[ExecutorStep | InputName] | None = None,
    steps: Sequence[ExecutorStep | InputName] | None = None,
    description: str | None = None,
    *,
    args: Sequence[str] | None = None,
) -> RunReport | None:
    """Run `steps` (and everything they wait for) with flags parsed from the command line.

    As in Marin, `executor_main(steps=[...])` parses the flags, and `executor_main(config, steps=[...])`
    with an `ExecutorMainConfig` uses that config as it is. `executor_main([...])` also works.
    """
    if config is not None and not isinstance(config, ExecutorMainConfig):
        if steps is not None:
            raise TypeError("executor_main: pass the steps once (as `steps=`), and an ExecutorMainConfig as `config`")
        config, steps = None, config
    if steps is None:
        raise TypeError("executor_main: no steps given; call executor_main(steps=[...])")
    if _CAPTURE is not None:
        _CAPTURE.append((list(steps), description))
        raise _Captured()
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # A local step worker (forkserver/spawn) imports the driver's script again (as __mp_main__)
        # while it bootstraps, the flag multiprocessing itself checks then; a script without
        # `if __name__ == "__main__":` must not start a second run in there.
        return None
    default_to_cpu()  # no libtpu probe (and its errors) in every step on a CPU-only host
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # JAX logs "Unable to initialize backend 'tpu'" at INFO whenever it looks for devices on a CPU host.
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    try:
        if config is None:
            config = parse_flags(sys.argv[1:] if args is None else args)
        if config.verbose:  # the steps' processes inherit it (a local Ray passes it on: backends.py)
            os.environ[VERBOSE_ENV] = "1"
        executor = Executor(config, description=description)
        # Executor.run takes InputName roots too (the plan unwraps them); its annotation says ExecutorStep only.
        report = executor.run(
            steps,  # type: ignore[arg-type]
            run_only=config.run_only,
            dry_run=config.dry_run,
            plan_format=config.format,
        )
    except RunInterruptedError as err:  # Ctrl-C or SIGTERM: steps CANCELLED, how to resume (interrupt.py)
        print(str(err), file=sys.stderr, flush=True)
        raise SystemExit(err.exit_code) from None
    except KeyboardInterrupt:  # before any step started (planning, starting Ray)
        print("interrupted before any step started; nothing was cancelled", file=sys.stderr, flush=True)
        raise SystemExit(RunInterruptedError.exit_code) from None
    except MarinLabError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    if report.experiment_path:
        print(f"Records: {report.experiment_path}", flush=True)
    return report


def parse_flags(argv: Sequence[str]) -> ExecutorMainConfig:
    """The flags as an ExecutorMainConfig. `--run_only` is read here: a bracketed value is a list
    (JSON, or YAML's flow style as in Marin: `[^a$]` is the regex `^a$`), anything else one regex:
    `ok/one-[0-9a-f]{8}` or `null` means what it says, and a bad one is one clear error line."""
    rest, run_only = take_run_only(argv)
    rest, force_run = take_regex_flag(rest, "force_run")
    booleans = [f.name for f in dataclasses.fields(ExecutorMainConfig) if f.type in (bool, "bool")]
    _check_flag_names(rest)
    try:
        config = draccus.parse(config_class=ExecutorMainConfig, args=bare_bool_flags(rest, booleans))
    except draccus.ParsingError as err:  # one line, not draccus's traceback
        raise ExecutorConfigError(f"bad command-line flag {_one_line(err)} (see --help)") from None
    if run_only is not None:
        compile_run_only(run_only)  # fail now, before anything is planned
        config = dataclasses.replace(config, run_only=run_only)
    if force_run is not None:
        compile_run_only(force_run, flag="--force_run")
        config = dataclasses.replace(config, force_run=force_run)
    return config


def _check_flag_names(argv: Sequence[str]) -> None:
    """An unknown flag is one line naming it, with the closest real one (`--dry-run` -> `--dry_run`)."""
    names = [f.name for f in dataclasses.fields(ExecutorMainConfig)]
    for arg in argv:
        name = arg[2:].split("=", 1)[0]
        if not arg.startswith("--") or name in (*names, "help", "config_path"):
            continue
        close = difflib.get_close_matches(name.replace("-", "_"), names, n=1, cutoff=0.6)
        hint = f"; did you mean --{close[0]}?" if close else " (see --help)"
        raise ExecutorConfigError(f"unknown flag --{name}{hint}")


def _one_line(err: BaseException) -> str:
    return " ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__


def take_run_only(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """(argv without its --run_only flags, their regexes or None).

    `--run_only A B`, `--run_only=A`, repeated flags, and a list `--run_only '["A", "B"]'` or `'[A, B]'`.
    """
    return take_regex_flag(argv, "run_only")


def take_regex_flag(argv: Sequence[str], name: str) -> tuple[list[str], list[str] | None]:
    """(argv without its `--{name}` flags, their regexes or None), read as `take_run_only` reads them."""
    flag = f"--{name}"
    rest: list[str] = []
    regexes: list[str] | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == flag or arg.startswith(flag + "="):
            values = [arg.split("=", 1)[1]] if "=" in arg else []
            i += 1
            if "=" not in arg:
                while i < len(argv) and not argv[i].startswith("--"):
                    values.append(argv[i])
                    i += 1
            if not values:
                raise ExecutorConfigError(f"{flag} needs at least one regular expression over step names")
            regexes = (regexes or []) + [rx for v in values for rx in _json_list_or_regex(v, flag)]
            continue
        rest.append(arg)
        i += 1
    return rest, regexes


def _json_list_or_regex(value: str, flag: str = "--run_only") -> list[str]:
    """A value that is a bracketed list, in JSON or in YAML's flow style (`'["a", "b"]'`, `[a, b]`,
    `[^a$]`), is its items, as Marin's draccus reads it; any other value is one regex."""
    stripped = value.strip()
    if stripped.startswith("[") and stripped.endswith("]"):
        try:
            parsed = yaml.safe_load(stripped)  # JSON lists are YAML flow lists too
        except yaml.YAMLError:
            parsed = None
        if isinstance(parsed, list) and parsed and all(isinstance(v, str) for v in parsed):
            if len(parsed) == 1 and re.fullmatch(r"\[[^\],]*\]", stripped):
                logger.info(
                    "%s %r is read as the list [%r], as Marin reads it; for a character class, "
                    "write it inside a longer regex (e.g. '^[ab]')",
                    flag,
                    value,
                    parsed[0],
                )
            return parsed
    return [value]


def offer_steps(steps: Sequence[ExecutorStep], description: str | None = None) -> None:
    """For a front end other than `executor_main` (marin_lab.marin's StepRunner), just before it
    runs `steps`: under `capture_steps` the steps are recorded and the script stops here."""
    if _CAPTURE is not None:
        _CAPTURE.append((list(steps), description))
        raise _Captured()


def capture_steps(script: str, argv: Sequence[str] = ()) -> tuple[list[ExecutorStep], str | None]:
    """Run an experiment file up to its `executor_main` call and return the steps it passes."""
    import runpy

    global _CAPTURE
    saved_argv = sys.argv
    _CAPTURE = []
    try:
        sys.argv = [script, *argv]
        with contextlib.suppress(_Captured):
            runpy.run_path(script, run_name="__main__")
        if not _CAPTURE:
            raise MarinLabError(
                f"{script} never called executor_main(steps=...) nor built Marin ArtifactSteps (pass "
                "--run to an experiment_main); nothing to explain"
            )
        return _CAPTURE[0]
    finally:
        _CAPTURE = None
        sys.argv = saved_argv
