"""Bad shards are quarantined: the others finish, the step fails naming each bad one (or succeeds
within its allowance), a killed or hung worker is an attempt spent, and nothing waits forever."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import pytest

from marin_lab.processing import quarantine
from marin_lab.processing.quarantine import BadShardsError, ShardPolicy, map_shards_quarantined


def shard_fn(task: tuple[str, str]) -> str:
    """Writes `out/NAME` unless NAME says how to misbehave: raise, die (SIGKILL), hang, oom."""
    name, out = task
    with open(os.path.join(out, f"{name}.attempts"), "a") as f:
        f.write("x")
    if name.startswith("raise"):
        raise ValueError(f"cannot parse {name}")
    if name.startswith("die"):
        os.kill(os.getpid(), signal.SIGKILL)
    if name.startswith("hang"):
        time.sleep(3600)
    if name.startswith("oom"):  # what the kernel does: count an oom_kill in the cgroup, then SIGKILL
        events = os.environ["FAKE_MEMORY_EVENTS"]
        n = int(open(events).read().split()[1])
        open(events, "w").write(f"oom_kill {n + 1}\n")
        os.kill(os.getpid(), signal.SIGKILL)
    with open(os.path.join(out, name), "w") as f:
        f.write(name.upper())
    return name.upper()


def _attempts(out, name) -> int:
    return len(open(out / f"{name}.attempts").read())


def test_a_bad_shard_is_retried_then_named_and_the_others_finish(tmp_path):
    tasks = [(n, str(tmp_path)) for n in ("a", "raise-1", "b")]
    with pytest.raises(BadShardsError) as info:
        map_shards_quarantined(shard_fn, tasks, num_workers=2, desc="tokenize", policy=ShardPolicy(retries=1),
                               rerun="python x.py --run_only '^tok$' --force_run_failed true")
    text = str(info.value)
    assert "tokenize: 1 of 3 shards are bad (allowed: 0); the other 2 finished and are kept" in text
    assert "('raise-1'," in text and "2 attempt(s), last exception: ValueError: cannot parse raise-1" in text
    assert "python x.py --run_only '^tok$' --force_run_failed true" in text
    assert [a["kind"] for a in info.value.bad[0]["attempts"]] == ["exception", "exception"]
    assert _attempts(tmp_path, "raise-1") == 2
    assert (tmp_path / "a").read_text() == "A" and (tmp_path / "b").read_text() == "B"


def test_within_the_allowance_the_step_succeeds_and_lists_what_was_left_out(tmp_path):
    tasks = [(n, str(tmp_path)) for n in ("a", "die-1")]
    outcome = map_shards_quarantined(shard_fn, tasks, num_workers=2, desc="extract",
                                     policy=ShardPolicy(retries=0, max_bad_shards=1))
    assert outcome.results == ["A", None]
    (bad,) = outcome.bad
    assert bad["task"] == 1 and bad["attempts"][0]["kind"] == "worker_died"
    assert "SIGKILL" in bad["attempts"][0]["error"]


def test_a_hung_shard_is_killed_at_its_time_limit(tmp_path):
    start = time.monotonic()
    outcome = map_shards_quarantined(shard_fn, [("hang-1", str(tmp_path)), ("a", str(tmp_path))], num_workers=2,
                                     desc="dedup", policy=ShardPolicy(retries=0, time_limit_s=2, max_bad_shards=1))
    assert time.monotonic() - start < 60  # bounded: not the hour the shard would sleep
    assert outcome.bad[0]["attempts"][0]["kind"] == "time_limit" and outcome.results[1] == "A"


def test_when_every_worker_dies_the_step_fails_saying_so(tmp_path, monkeypatch):
    events = tmp_path / "memory.events"
    events.write_text("oom_kill 0\n")
    monkeypatch.setattr(quarantine, "CGROUP_EVENTS", str(events))
    monkeypatch.setenv("FAKE_MEMORY_EVENTS", str(events))
    tasks = [(n, str(tmp_path)) for n in ("die-1", "oom-2")]
    with pytest.raises(BadShardsError, match="every one of 2 shards lost its worker on every attempt") as info:
        map_shards_quarantined(shard_fn, tasks, num_workers=1, desc="quality", policy=ShardPolicy(retries=0))
    kinds = {b["shard"]: b["attempts"][0]["kind"] for b in info.value.bad}
    # An out-of-memory kill is told apart from a plain kill.
    assert sorted(kinds.values()) == ["out_of_memory", "worker_died"], kinds


def test_extract_keeps_good_shards_and_records_a_bad_one_within_its_allowance(tmp_path):
    from marin_lab.io.documents import list_shards, read_documents
    from marin_lab.processing.extract import ExtractConfig, extract
    from tests.data_fixtures import make_html_site

    make_html_site(tmp_path / "html", n=4)
    (tmp_path / "html" / "zz-vanished.html").symlink_to(tmp_path / "nowhere.html")  # unreadable
    config = ExtractConfig(input_path=str(tmp_path / "html"), output_path=str(tmp_path / "out"), num_shards=5,
                           num_workers=2)
    with pytest.raises(BadShardsError, match=r"(?s)extract: 1 of 5 shards are bad .*zz-vanished.html") as info:
        extract(dataclasses.replace(config, shard_policy=ShardPolicy(retries=0)))
    assert "FileNotFoundError" in str(info.value)
    assert len(list_shards(str(tmp_path / "out" / "data"))) == 4  # the others finished and are kept
    result = extract(dataclasses.replace(config, shard_policy=ShardPolicy(retries=0, max_bad_shards=1)))
    assert result["documents"] == 4 and result["files_left_out"] == 1 and result["shards_reused"] == 4
    assert result["bad_shards"][0]["shard"].startswith("shard-00004.jsonl.zst (1 files from 'zz-vanished.html')")
    assert sum(1 for s in list_shards(str(tmp_path / "out" / "data")) for _ in read_documents(s)) == 4

