"""Per-user names for mutable artifacts (Marin's `marin.experiment.namespacing`).

A `dev` (or `<label>-dev`) artifact lives at `{name}/dev` for everyone, so two people iterating on
one experiment would overwrite each other: `user_namespaced_name` moves a mutable artifact under
`users/{user}/`. Calendar-versioned artifacts keep their shared names.
"""

from __future__ import annotations

from marin_lab.marin.artifact import is_mutable_version
from marin_lab.marin.provenance import username_segment

__all__ = ["user_namespaced_name"]

_USERS = "users/"


def user_namespaced_name(name: str, version: str) -> str:
    """`users/{user}/{name}` for a mutable version, `name` otherwise; idempotent."""
    if not is_mutable_version(version) or name.startswith(_USERS):
        return name
    return f"{_USERS}{username_segment()}/{name}"
