"""Step functions for tests of Marin's current API that run on Ray workers (importable there)."""

from __future__ import annotations

import os
from pathlib import Path

from marin_lab.marin.artifact import Artifact


class Where(Artifact):
    pid: int = 0


def where_it_ran(config: dict) -> Where:
    os.makedirs(config["out"], exist_ok=True)
    Path(config["out"], "ok").write_text("ok")
    return Where(pid=os.getpid())
