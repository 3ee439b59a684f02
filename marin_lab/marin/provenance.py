"""Who launched a build, from where, with what: Marin's `rigging.provenance`, over marin_lab.

`Provenance.capture()` is taken once per launch and recorded in every `.artifact.json` that launch
writes. `username_segment()` is the user a mutable (`dev`) artifact is namespaced under
(`marin_lab.marin.namespacing`); it refuses to guess when no user resolves.
"""

from __future__ import annotations

import datetime
import getpass
import os
import re
import socket
import subprocess
import sys

from pydantic import BaseModel, Field

__all__ = ["Provenance", "username_segment"]


def _getuser() -> str | None:
    """The launching user's name, or None when none resolves (no $USER and no passwd entry)."""
    for var in ("MARIN_USER", "USER", "LOGNAME"):
        value = os.environ.get(var)
        if value:
            return value
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):
        return None


def username_segment() -> str:
    """The user as one safe path segment; raises RuntimeError when no user resolves."""
    user = _getuser()
    if not user:
        raise RuntimeError(
            "cannot resolve a username for a mutable (dev) artifact's users/<name>/ namespace; "
            "set $USER (or $MARIN_USER)"
        )
    segment = re.sub(r"[^A-Za-z0-9_.-]", "_", user).strip(".")
    if not segment:
        raise RuntimeError(f"username {user!r} leaves no usable path segment; set $MARIN_USER")
    return segment


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


class Provenance(BaseModel):
    """One launch: user, host, time, command line and git commit (None where unknown)."""

    user: str | None = None
    hostname: str | None = None
    command_line: list[str] = Field(default_factory=list)
    git_commit: str | None = None
    launched_at: str | None = None

    @classmethod
    def capture(cls) -> Provenance:
        return cls(
            user=_getuser(),
            hostname=socket.gethostname(),
            command_line=list(sys.argv),
            git_commit=_git_commit(),
            launched_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        )
