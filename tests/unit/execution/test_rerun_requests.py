"""What a rerun of finished work asks the store for, counted on a memory filesystem that counts.

On a bucket every request is a round trip, so a no-op rerun and its dry run must read each step's
files once (the status, and beside a SUCCESS the record it is checked against), never a lease, and
ask for the rest (the prefix probe, the experiment and run records) a fixed number of times,
whatever the number of steps. The batched reader must read every case as the one-step reader does.
"""

from __future__ import annotations

import collections
import json
import uuid

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, output_path_of, this_output_path, versioned
from marin_lab.execution.plan.hashing import unversioned_fingerprint
from marin_lab.execution.state.status import Status, info_url, write_status
from marin_lab.io.fs import atomic_write_bytes, cat_many
from marin_lab.store.layout import CORRUPT
from marin_lab.store.status import read_step_states, read_step_status
from tests.executor_steps import WriteConfig, write_text


class CountingFileSystem(MemoryFileSystem):
    """memory://, counting every call that would be a request to an object store, by path."""

    protocol = "countmem"
    calls: collections.Counter[tuple[str, str]] = collections.Counter()

    def _count(self, op: str, path: str) -> None:
        CountingFileSystem.calls[(op, self._strip_protocol(path))] += 1

    def cat_file(self, path, start=None, end=None, **kwargs):
        self._count("read", path)
        return super().cat_file(path, start=start, end=end, **kwargs)

    def ls(self, path, detail=True, **kwargs):
        self._count("list", path)
        return super().ls(path, detail=detail, **kwargs)

    def info(self, path, **kwargs):
        self._count("info", path)
        return super().info(path, **kwargs)

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        self._count("write", path)
        return super().pipe_file(path, value, mode=mode, **kwargs)

    def rm(self, path, recursive=False, maxdepth=None):
        self._count("delete", path if isinstance(path, str) else ",".join(path))
        return super().rm(path, recursive=recursive, maxdepth=maxdepth)


fsspec.register_implementation("countmem", CountingFileSystem, clobber=True)


def _dag(n: int) -> list[ExecutorStep]:
    """Half a chain, half a fan-out of one root: n trivial steps."""
    steps: list[ExecutorStep] = []
    for i in range(n):
        inputs = (output_path_of(steps[-1]),) if i < n // 2 and steps else ()
        if i >= n // 2:
            inputs = (output_path_of(steps[0]),)
        cfg = WriteConfig(output_path=this_output_path(), text=versioned(f"t{i}"), inputs=inputs)
        steps.append(ExecutorStep(name=f"rerun/s{i:03d}", fn=write_text, config=cfg))
    return steps


def _finished(prefix: str, steps: list[ExecutorStep], tmp_path) -> Executor:
    """Every step SUCCESS, with a record, as the executor's own writers leave them."""
    script = tmp_path / "rerun_experiment.py"
    script.write_text("# the experiment\n")
    executor = Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script=str(script))
    for ps in executor.plan(steps).steps:
        record = {"name": ps.name, "status": "SUCCESS", "output_path": ps.output_path}
        atomic_write_bytes(info_url(ps.output_path), json.dumps(record).encode())
        write_status(
            ps.output_path,
            Status.SUCCESS,
            attempt=1,
            driver="seed",
            config_fingerprint=unversioned_fingerprint(ps.scan.unversioned),
        )
    CountingFileSystem.calls.clear()
    return executor


def _per_step_and_rest(executor: Executor) -> tuple[dict[str, collections.Counter[str]], collections.Counter[str]]:
    """The counted calls, per step folder (by file and operation) and outside every step folder."""
    assert executor.last_plan is not None
    folders = {fsspec.core.strip_protocol(ps.output_path): ps.identity for ps in executor.last_plan.steps}
    per_step: dict[str, collections.Counter[str]] = {ident: collections.Counter() for ident in folders.values()}
    rest: collections.Counter[str] = collections.Counter()
    for (op, path), n in CountingFileSystem.calls.items():
        folder, _, name = path.rpartition("/")
        if folder in folders:
            per_step[folders[folder]][f"{op} {name}"] += n
        else:
            rest[op] += n
    return per_step, rest


@pytest.mark.parametrize("dry_run", [False, True], ids=["no-op rerun", "dry run"])
def test_a_rerun_reads_each_steps_status_and_record_once_and_nothing_else_per_step(tmp_path, dry_run):
    prefix = f"countmem://rerun-{uuid.uuid4().hex[:8]}"
    steps = _dag(40)
    executor = _finished(prefix, steps, tmp_path)

    report = executor.run(steps, dry_run=dry_run)

    assert all(d.action == "skip" for d in report.decisions), [d.reason for d in report.decisions]
    assert not report.executed
    per_step, rest = _per_step_and_rest(executor)
    for ident, calls in per_step.items():
        assert calls == {"read .executor_status": 1, "read .executor_info": 1}, (ident, calls)
    # The prefix probe, the experiment and run records, the stored script: a fixed number, not per step.
    assert sum(rest.values()) <= 16, rest


def test_a_step_without_a_status_is_read_once_and_its_record_not_at_all(tmp_path):
    prefix = f"countmem://rerun-{uuid.uuid4().hex[:8]}"
    steps = _dag(6)
    executor = Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script=str(tmp_path / "none.py"))
    plan = executor.plan(steps)
    CountingFileSystem.calls.clear()

    decisions = executor.decide(plan, plan.steps, explain=False)

    assert [d.reason for d in decisions] == ["no output yet"] * 6
    per_step, _ = _per_step_and_rest(executor)
    assert all(calls == {"read .executor_status": 1} for calls in per_step.values()), per_step


MARIN_EVENTS = (
    '{"date": "2025-01-01T00:00:00", "status": "RUNNING"}\n{"date": "2025-01-01T00:00:09", "status": "SUCCESS"}\n'
)
CASES = {  # folder: (.executor_status, .executor_info); None: no such file
    "ours-done": ('{"status": "SUCCESS", "time": "t"}', '{"name": "a", "status": "SUCCESS"}'),
    "damaged-record": ('{"status": "SUCCESS"}', "{garbage"),
    "wrong-type-record": ('{"status": "SUCCESS"}', '{"schema": 1, "attempts": "twice"}'),
    "no-record": ('{"status": "SUCCESS"}', None),
    "marin-events": (MARIN_EVENTS, None),
    "marin-word": ("SUCCESS\n", None),
    "failed-damaged-record": ('{"status": "FAILED", "error": "boom"}', "{garbage"),
    "damaged-status": ("\xff{", None),
    "no-object": ('["SUCCESS"]', None),
    "never-run": (None, None),
    "record-only": (None, '{"name": "r", "status": "FAILED"}'),
}


def test_the_batched_reader_reads_every_case_as_the_one_step_reader():
    root = f"countmem://states-{uuid.uuid4().hex[:8]}"
    paths = []
    for folder, (status, record) in CASES.items():
        path = f"{root}/{folder}"
        paths.append(path)
        if status is not None:
            atomic_write_bytes(f"{path}/.executor_status", status.encode("utf-8", "surrogateescape"))
        if record is not None:
            atomic_write_bytes(f"{path}/.executor_info", record.encode())

    states = read_step_states(paths)

    assert [s.status for s in states] == [read_step_status(p) for p in paths]
    by_folder = {p.rsplit("/", 1)[1]: s for p, s in zip(paths, states, strict=True)}
    assert by_folder["damaged-record"].status["status"] == CORRUPT
    assert by_folder["wrong-type-record"].status["status"] == CORRUPT
    assert by_folder["failed-damaged-record"].status["status"] == "FAILED"  # only a SUCCESS stands on its record
    assert by_folder["ours-done"].record is not None and by_folder["ours-done"].record.name == "a"
    assert by_folder["no-record"].status["status"] == "SUCCESS" and by_folder["no-record"].record is None
    assert by_folder["never-run"].status is None


def test_cat_many_answers_in_order_with_errors_in_place():
    root = f"countmem://cat-{uuid.uuid4().hex[:8]}"
    atomic_write_bytes(f"{root}/a", b"A")
    atomic_write_bytes(f"{root}/c", b"C")
    got = cat_many([f"{root}/c", f"{root}/missing", f"{root}/a"])
    assert got[0] == b"C" and got[2] == b"A"
    assert isinstance(got[1], FileNotFoundError)
