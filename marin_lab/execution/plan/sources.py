"""Portable identities for sources: a local folder is identified by what it holds, not where it is.

Hashing `"/home/ana/corpus"` would put Ana's home folder into the identity of every step
downstream, so nobody else could ever reuse (or reproduce) them. The planner therefore versions

- a local file, folder or glob named by a versioned value (spelt as a path: '/', '~', './',
  '../', 'file://') by its **content digest** (sha256 over each file's relative path, size and
  sha256; cached by path, size and mtime, so replanning a corpus is a round of `stat`s);
- a location declared with `versioned_source(location, package="name@version")` by that
  package (e.g. `python3.11-doc@3.11.2-6`), without reading it;
- anything else (a `gs://` or `https://` URL, a hub id such as `gpt2`) as written: those name the
  same thing on every machine.

The location itself still reaches the step's function (the resolved config holds the path) and
the step record, as an unversioned fact: the same corpus unpacked in another folder gives the
same identities.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from marin_lab.execution.errors import StepDefinitionError
from marin_lab.execution.plan.step import VersionedValue, versioned
from marin_lab.io.sources import content_digest, has_glob

_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+\-]*@[A-Za-z0-9][A-Za-z0-9._+:~\-]*$")


@dataclasses.dataclass(frozen=True)
class PortableSource(VersionedValue):
    """A versioned location whose identity is `identity` (a digest or a package), not the location."""

    identity: Any = None


def versioned_source(location: str | None, *, package: str | None = None) -> str:
    """`location` as a versioned config value whose identity is portable (see the module docstring).

    With `package` ('name@version') the identity is the declared package; without, a local
    `location` must exist now (its content is its identity) and anything else is versioned as
    written. Any versioned local path is digested by the planner anyway (`portable_value`); this
    helper adds the declaration and a plan-time error for a path that is not there.
    """
    if not isinstance(location, str) or not location:
        raise StepDefinitionError(f"versioned_source: expected a path or URL, got {location!r}")
    if package is not None:
        if not _PACKAGE.match(package):
            raise StepDefinitionError(
                f"versioned_source({location!r}): package {package!r} is not 'name@version' "
                "(e.g. 'python3.11-doc@3.11.2-6')"
            )
        # Typed as the str it stands for, as versioned() is, so that a config's `str` field takes it.
        return PortableSource(location, {"package": package})  # type: ignore[return-value]
    if _is_path_spelling(location) and not os.path.exists(_local_path(location)):
        raise StepDefinitionError(
            f"versioned_source: {location!r} does not exist; a local source is identified by its content, "
            "so it must exist when the experiment is planned"
        )
    return versioned(location)


def portable_value(value: Any) -> Any:
    """`value` (canonical JSON data) with every existing local path replaced by its content digest.

    Returns `value` itself when nothing changed. A string is a local path when it is spelt like
    one ('/', '~', './', '../', 'file://'); bare names ('gpt2', 'org/model') are hub ids or
    relative names and stay as written, and so does a path that does not exist (yet).
    """
    if isinstance(value, str):
        if not _is_path_spelling(value):
            return value
        path = _local_path(value)
        if not os.path.exists(path) and not has_glob(path):
            return value
        try:
            digest = content_digest(path)
        except FileNotFoundError:  # an empty folder or a glob without matches
            return value if has_glob(path) else {"content": "empty"}
        return {"content": "sha256:" + digest["sha256"], "files": digest["files"], "bytes": digest["bytes"]}
    if isinstance(value, list):
        out = [portable_value(v) for v in value]
        return value if all(a is b for a, b in zip(out, value, strict=True)) else out
    if isinstance(value, dict):
        new = {k: portable_value(v) for k, v in value.items()}
        return value if all(new[k] is value[k] for k in value) else new
    return value


def missing_local_paths(value: Any, field: str) -> list[tuple[str, str]]:
    """(field path, location) for each local path spelt in a versioned value (as `portable_value`
    sees it) that does not exist: the step would fail reading it, and its identity is the bare path."""
    if isinstance(value, str):
        if _is_path_spelling(value) and not has_glob(value) and not os.path.exists(_local_path(value)):
            return [(field, value)]
        return []
    if isinstance(value, list):
        return [m for i, v in enumerate(value) for m in missing_local_paths(v, f"{field}[{i}]")]
    if isinstance(value, dict):
        return [m for k, v in value.items() for m in missing_local_paths(v, f"{field}[{k!r}]")]
    return []


def _is_path_spelling(location: str) -> bool:
    return location.startswith(("file://", "/", "./", "../", "~"))


def _local_path(location: str) -> str:
    return os.path.expanduser(location[len("file://") :] if location.startswith("file://") else location)
