"""Deferred artifact versions (Marin's `marin.execution.build_context`).

A builder that omits `version=` takes it from the ambient `BuildContext` set by `build_context(...)`
while the experiment's handles are constructed: a `VersionCodex` gives one run-wide default and
per-name overrides, and reports the overrides no builder consulted (a typo, or an artifact that
hardcodes its version). Outside any context a deferred version is an error, never a silent `dev`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from marin_lab.marin.artifact import validate_version

__all__ = ["BuildContext", "VersionCodex", "build_context", "current_build_context", "resolve_version"]


@dataclasses.dataclass(frozen=True)
class VersionCodex:
    """A version per artifact name: `overrides[name]` when set, else `default` (both validated)."""

    default: str
    overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)
    _used: set[str] = dataclasses.field(default_factory=set, compare=False, repr=False, init=False)

    def __post_init__(self) -> None:
        validate_version(self.default)
        for name, version in self.overrides.items():
            try:
                validate_version(version)
            except ValueError as err:
                raise ValueError(f"override {name!r}: {err}") from err

    def version_for(self, name: str) -> str:
        if name in self.overrides:
            self._used.add(name)
            return self.overrides[name]
        return self.default

    def unused_overrides(self) -> frozenset[str]:
        """Override names no builder asked for since construction."""
        return frozenset(self.overrides) - frozenset(self._used)


@dataclasses.dataclass(frozen=True)
class BuildContext:
    """What rides along while handles are constructed: today, the versions."""

    versions: VersionCodex


_ACTIVE: ContextVar[BuildContext | None] = ContextVar("marin_lab_build_context", default=None)


@contextmanager
def build_context(ctx: BuildContext) -> Iterator[BuildContext]:
    """Make `ctx` the ambient context inside the `with` block (nests; restored on exceptions)."""
    token = _ACTIVE.set(ctx)
    try:
        yield ctx
    finally:
        _ACTIVE.reset(token)


def current_build_context() -> BuildContext | None:
    return _ACTIVE.get()


def resolve_version(name: str, version: str | None) -> str:
    """`version` when given; else the ambient codex's version for `name`; else an error."""
    if version is not None:
        return version
    ctx = current_build_context()
    if ctx is None:
        raise ValueError(
            f"{name}: no version given and no active BuildContext. Pass version=..., or construct "
            "this handle inside build_context(BuildContext(versions=VersionCodex(default=...)))."
        )
    return ctx.versions.version_for(name)
