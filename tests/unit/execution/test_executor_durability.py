"""The per-step writes: only what SUCCESS stands on is flushed to disk, and it is flushed first."""

from __future__ import annotations

import json
import os
from pathlib import Path

from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from tests.executor_steps import WriteConfig, write_text


def test_full_record_is_flushed_before_success_and_transient_writes_are_not(tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst) -> None:
        content = Path(src).read_bytes() if os.path.basename(str(dst)) == ".executor_status" else b""
        events.append(("replace", f"{src} -> {dst} {content[:40]!r}"))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    step = ExecutorStep(
        name="durable/a", fn=write_text, config=WriteConfig(output_path=this_output_path(), text=versioned("x"))
    )
    report = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).run([step])
    out = report.plan.steps[0].output_path
    mine = [e for e in events if out in e[1]]
    flushed = [path for kind, path in mine if kind == "fsync"]
    # One flush per step: the full record, just before it is renamed into place.
    assert len(flushed) == 1 and ".tmp..executor_info." in flushed[0]
    i_flush = mine.index(("fsync", flushed[0]))
    success = next(
        i
        for i, (kind, what) in enumerate(mine)
        if kind == "replace"
        and b'"SUCCESS"' in what.encode()
        and what.split(" -> ")[1].split(" ")[0].endswith(".executor_status")
    )
    record_in_place = next(
        i for i, (kind, what) in enumerate(mine) if kind == "replace" and what.startswith(flushed[0] + " -> ")
    )
    assert i_flush < record_in_place < success
    assert json.loads(Path(os.path.join(out, ".executor_info")).read_text())["status"] == "SUCCESS"
