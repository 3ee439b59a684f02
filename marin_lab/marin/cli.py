"""The experiment command line (Marin's `marin.experiment.cli`).

`experiment_main(build)` turns a nullary `build()` returning handles into a Click command;
`build_options` adds the same options to a command with options of its own:

- `--version V` (required; no silent `dev`): the run-wide version of every builder that omits
  `version=`; `--override NAME=VERSION` (repeatable) steers one artifact by name. An override no
  builder consulted (a typo, or an artifact that hardcodes its version) is an error, as is a
  version outside the grammar or two overrides for one name.
- without `--run` the plan is printed (every artifact's `name@version`, mutable ones flagged);
  `--run` builds it through marin_lab's executor, `--max-concurrent` steps at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import click

from marin_lab.execution.errors import MarinLabError
from marin_lab.marin.artifact import (
    ArtifactTypeMismatchError,
    FingerprintMismatchError,
    is_mutable_version,
    validate_version,
)
from marin_lab.marin.build_context import BuildContext, VersionCodex, build_context
from marin_lab.marin.lazy import ArtifactStep, lower, run

__all__ = ["build_options", "build_options_with_runner", "experiment_main", "graph_handles"]

BuildResult = Any
BuildRunner = Callable[[list[ArtifactStep], int], None]


def _version_callback(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        validate_version(value)
    except ValueError as err:
        raise click.BadParameter(str(err), ctx=ctx, param=param) from err
    return value


def _override_callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for item in value:
        name, sep, version = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VERSION", ctx=ctx, param=param)
        if name in overrides:
            raise click.BadParameter(f"duplicate override for {name!r}", ctx=ctx, param=param)
        try:
            validate_version(version)
        except ValueError as err:
            raise click.BadParameter(f"override {name!r}: {err}", ctx=ctx, param=param) from err
        overrides[name] = version
    return overrides


def _as_handles(result: BuildResult) -> list[ArtifactStep]:
    if isinstance(result, ArtifactStep):
        return [result]
    if isinstance(result, Mapping):
        return list(result.values())
    if isinstance(result, (list, tuple)):
        return list(result)
    raise TypeError(
        f"build() must return an ArtifactStep, a list/tuple, or a mapping of them, not {type(result).__name__}"
    )


def graph_handles(handles: list[ArtifactStep]) -> list[ArtifactStep]:
    """Every handle reachable from `handles`, deps first, each once."""
    seen: set[int] = set()
    order: list[ArtifactStep] = []

    def walk(handle: Any) -> None:
        if id(handle) in seen or not isinstance(handle, ArtifactStep):
            return
        seen.add(id(handle))
        for dep in handle.deps:
            walk(dep)
        order.append(handle)

    for handle in handles:
        walk(handle)
    return order


def _print_plan(handles: list[ArtifactStep]) -> None:
    for handle in handles:
        spec = lower(handle)
        click.echo(f"{spec.name} -> {spec.output_path} (fingerprint {spec.hash_attrs.get('fingerprint')})")
    click.echo("\nResolved versions:")
    for handle in graph_handles(handles):
        flag = "  (mutable — rebuilds every run)" if is_mutable_version(handle.version) else ""
        click.echo(f"  {handle.name}@{handle.version}{flag}")


def _run_locally(handles: list[ArtifactStep], max_concurrent: int) -> None:
    run(*handles, max_concurrent=max_concurrent)


# What a driver reports as one message: Marin's bad-input errors (a version, a dev dependency under
# a fixed version, an undeclared dependency or runtime arg, a fingerprint pin, a changed result
# type) and a failed run (RuntimeError naming the steps and their records).
_ONE_LINE = (ValueError, KeyError, RuntimeError, FingerprintMismatchError, ArtifactTypeMismatchError, MarinLabError)


def build_options_with_runner(fn: Callable[..., BuildResult], runner: BuildRunner) -> Callable[..., None]:
    """`build_options`, with `--run` handed to `runner(handles, max_concurrent)`."""

    @click.option(
        "--version",
        "default_version",
        required=True,
        callback=_version_callback,
        help="Run-wide default version for artifacts that defer (omit version=). "
        "A calendar version YYYY.MM.DD, or 'dev' to iterate.",
    )
    @click.option(
        "--override",
        "overrides",
        multiple=True,
        metavar="NAME=VERSION",
        callback=_override_callback,
        help="Per-artifact version override, keyed by the artifact's name. Repeatable.",
    )
    @click.option("--run", "do_run", is_flag=True, help="Build the handles (default: print the plan).")
    @click.option("--max-concurrent", type=int, default=8, show_default=True, help="Max steps built concurrently.")
    @functools.wraps(fn)
    def wrapper(
        *args: Any, default_version: str, overrides: dict[str, str], do_run: bool, max_concurrent: int, **kwargs: Any
    ) -> None:
        codex = VersionCodex(default=default_version, overrides=overrides)
        try:
            with build_context(BuildContext(versions=codex)):
                handles = _as_handles(fn(*args, **kwargs))
            unused = codex.unused_overrides()
            if unused:
                raise click.BadParameter(
                    f"never applied to any artifact: {sorted(unused)}. The name is a typo, or that "
                    "artifact hardcodes its version (an explicit version wins over an override).",
                    param_hint="--override",
                )
            if not do_run:
                _print_plan(handles)
                return
            runner(handles, max_concurrent)
        except _ONE_LINE as err:  # bad input, or failed steps: one message, no traceback
            raise click.ClickException(
                str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
            ) from err

    return wrapper


def build_options(fn: Callable[..., BuildResult]) -> Callable[..., None]:
    """Add `--version`, `--override`, `--run` and `--max-concurrent` to a command returning handles."""
    return build_options_with_runner(fn, _run_locally)


def experiment_main(build: Callable[[], BuildResult]) -> Callable[..., None]:
    """A ready-to-run command for a nullary `build()`: `experiment_main(build)()`."""
    return click.command()(build_options(build))
