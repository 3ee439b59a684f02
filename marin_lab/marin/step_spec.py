"""A step as Marin's `StepRunner` takes it (Marin's `marin.execution.step_spec`).

`StepSpec(name, deps, hash_attrs, fn, ...)` is one node: `fn(output_path)` writes the step's output.
Without `override_output_path` the output is `{prefix}/{name}_{hash8}`, the hash over the name,
`hash_attrs` and the dependencies' own `name_{hash}` (never their prefix, so a region failover keeps
every identity). An ArtifactStep lowers to a StepSpec pinned at `{name}/{version}` whose
`hash_attrs` carry its fingerprint and version. `marin_lab.marin.step_runner` runs these on
marin_lab's executor.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from functools import cached_property
from typing import Any

from marin_lab.store.layout import default_prefix

__all__ = ["StepSpec", "marin_prefix", "marin_region", "prefix_join"]


def marin_prefix() -> str:
    """The storage prefix: `$MARIN_PREFIX` when set, else marin_lab's default store."""
    return default_prefix()


def marin_region() -> str | None:
    """The region this process runs in, when `$MARIN_REGION` says so."""
    return os.environ.get("MARIN_REGION") or None


def prefix_join(prefix: str, relative: str) -> str:
    """`prefix/relative`, without doubling a slash the prefix already ends with."""
    return f"{prefix}{relative}" if prefix.endswith("/") else f"{prefix}/{relative}"


def _is_relative_path(path: str) -> bool:
    return "://" not in path and not path.startswith("/")


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """Step identity, dependencies and the function that builds its output."""

    name: str
    output_path_prefix: str | None = None
    """Where the output goes; default `marin_prefix()`."""
    deps: list[StepSpec] = dataclasses.field(default_factory=list)
    hash_attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """JSON values that enter the step's hash (and, for an artifact, its fingerprint and version)."""
    override_output_path: str | None = None
    """A fixed output path (relative ones are under the prefix) instead of `name_hash`."""
    fn: Callable[[str], Any] | None = None
    """`fn(output_path)` builds the output; a returned pydantic model is saved as `.artifact.json`."""
    fingerprint_payload: str | None = None
    """An artifact's canonical config (what its fingerprint hashes), for the drift diff."""
    writes_record: bool = False
    """True when `fn` writes its own `.artifact.json` (an ArtifactStep), so the runner does not."""

    @cached_property
    def dep_paths(self) -> list[str]:
        return [dep.output_path for dep in self.deps]

    @cached_property
    def hash_id(self) -> str:
        content = json.dumps(
            {"name": self.name, "attrs": self.hash_attrs, "deps": sorted(d.name_with_hash for d in self.deps)},
            sort_keys=True,
        )
        return hashlib.sha256(content.encode()).hexdigest()[:8]

    @cached_property
    def name_with_hash(self) -> str:
        return f"{self.name}_{self.hash_id}"

    @cached_property
    def output_path(self) -> str:
        prefix = self.output_path_prefix or marin_prefix()
        if self.override_output_path is not None:
            if _is_relative_path(self.override_output_path):
                return prefix_join(prefix, self.override_output_path)
            return self.override_output_path
        return prefix_join(prefix, self.name_with_hash)
