"""Bad shards are quarantined: the others finish, the step fails naming each bad one (or succeeds
within its allowance), a killed or hung worker is an attempt spent, and nothing waits forever."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import resource
import shutil
import signal
import time
from pathlib import Path

import pytest
import zstandard

from marin_lab.io.documents import write_documents
from marin_lab.processing import attempts, shards
from marin_lab.processing.dedup import DedupConfig, DedupError, dedup_exact, dedup_fuzzy
from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.instruction import TokenizeInstructionsConfig, tokenize_instructions
from marin_lab.processing.quality import HeuristicFilterConfig, filter_heuristics
from marin_lab.processing.quarantine import (
    REPORT_FILE,
    BadShardsError,
    Quarantine,
    ShardPolicy,
    read_report,
)
from marin_lab.processing.shards import run_shards
from marin_lab.processing.tokenize import TokenizeConfig, TrainTokenizerConfig, tokenize, train_tokenizer
from marin_lab.store.bad_shards import request_rerun
from tests.data_fixtures import make_document_shards


def shard_fn(task: tuple[str, str]) -> str:
    """Writes `out/NAME` unless NAME says how to misbehave: raise, die (SIGKILL), hang, oom, mem
    (allocates past a memory limit)."""
    name, out = task
    with open(os.path.join(out, f"{name}.attempts"), "a") as f:
        f.write("x")
    if name.startswith("raise"):
        raise ValueError(f"cannot parse {name}")
    if name.startswith("die"):
        os.kill(os.getpid(), signal.SIGKILL)
    if name.startswith("hang"):
        time.sleep(3600)
    if name.startswith("mem"):  # an address-space limit 256 MB above what the process maps now, then 1 GB
        with open("/proc/self/status") as f:
            mapped = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (mapped + 256 * 2**20, resource.getrlimit(resource.RLIMIT_AS)[1]))
        bytearray(2**30)
    if name.startswith("oom"):  # what the kernel does: count an oom_kill in the cgroup, then SIGKILL
        events = os.environ["FAKE_MEMORY_EVENTS"]
        n = int(Path(events).read_text().split()[1])
        Path(events).write_text(f"oom_kill {n + 1}\n")
        os.kill(os.getpid(), signal.SIGKILL)
    with open(os.path.join(out, name), "w") as f:
        f.write(name.upper())
    return name.upper()


def _attempts(out, name) -> int:
    return len(Path(out / f"{name}.attempts").read_text())


@pytest.mark.slow
def test_a_bad_shard_is_retried_then_named_and_the_others_finish(tmp_path):
    tasks = [(n, str(tmp_path)) for n in ("a", "raise-1", "b")]
    with pytest.raises(BadShardsError) as info:
        run_shards(
            shard_fn,
            tasks,
            num_workers=2,
            desc="tokenize",
            policy=ShardPolicy(retries=1),
            rerun="python x.py --run_only '^tok$' --force_run_failed true",
        )
    text = str(info.value)
    assert "tokenize: 1 of 3 shards are bad (allowed: 0); the other 2 finished and are kept" in text
    assert "('raise-1'," in text and "2 attempt(s), last exception: ValueError: cannot parse raise-1" in text
    assert "python x.py --run_only '^tok$' --force_run_failed true" in text
    assert [a["kind"] for a in info.value.bad[0]["attempts"]] == ["exception", "exception"]
    assert _attempts(tmp_path, "raise-1") == 2
    assert (tmp_path / "a").read_text() == "A" and (tmp_path / "b").read_text() == "B"


def test_within_the_allowance_the_step_succeeds_and_lists_what_was_left_out(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="marin_lab.processing.shards")
    monkeypatch.setattr(shards, "PROGRESS_EVERY_S", 0.0)
    tasks = [(n, str(tmp_path)) for n in ("a", "die-1")]
    outcome = run_shards(
        shard_fn, tasks, num_workers=2, desc="extract", policy=ShardPolicy(retries=0, max_bad_shards=1)
    )
    assert outcome.results == ["A", None]
    (bad,) = outcome.bad
    assert bad["task"] == 1 and bad["attempts"][0]["kind"] == "worker_died"
    assert "SIGKILL" in bad["attempts"][0]["error"]
    # The engine's progress counts a bad shard as done (it is not tried again) and says so.
    assert any(r.getMessage().startswith("extract: 2/2 shards done (1 bad) in ") for r in caplog.records)


@pytest.mark.slow
def test_a_hung_shard_is_killed_at_its_time_limit(tmp_path):
    start = time.monotonic()
    outcome = run_shards(
        shard_fn,
        [("hang-1", str(tmp_path)), ("a", str(tmp_path))],
        num_workers=2,
        desc="dedup",
        policy=ShardPolicy(retries=0, time_limit_s=2, max_bad_shards=1),
    )
    assert time.monotonic() - start < 60  # bounded: not the hour the shard would sleep
    assert outcome.bad[0]["attempts"][0]["kind"] == "time_limit" and outcome.results[1] == "A"


@pytest.mark.slow
def test_when_every_worker_dies_the_step_fails_saying_so(tmp_path, monkeypatch):
    events = tmp_path / "memory.events"
    events.write_text("oom_kill 0\n")
    monkeypatch.setattr(attempts, "CGROUP_EVENTS", str(events))
    monkeypatch.setenv("FAKE_MEMORY_EVENTS", str(events))
    tasks = [(n, str(tmp_path)) for n in ("die-1", "oom-2")]
    with pytest.raises(BadShardsError, match="every one of 2 shards lost its worker on every attempt") as info:
        run_shards(shard_fn, tasks, num_workers=1, desc="quality", policy=ShardPolicy(retries=0))
    kinds = {b["shard"]: b["attempts"][0]["kind"] for b in info.value.bad}
    # An out-of-memory kill is told apart from a plain kill.
    assert sorted(kinds.values()) == ["out_of_memory", "worker_died"], kinds


@pytest.mark.slow
def test_extract_keeps_good_shards_and_records_a_bad_one_within_its_allowance(tmp_path):
    from marin_lab.io.documents import list_shards, read_documents
    from marin_lab.processing.extract import ExtractConfig, extract
    from tests.data_fixtures import make_html_site

    make_html_site(tmp_path / "html", n=4)
    (tmp_path / "html" / "zz-vanished.html").symlink_to(tmp_path / "nowhere.html")  # unreadable
    config = ExtractConfig(
        input_path=str(tmp_path / "html"), output_path=str(tmp_path / "out"), num_shards=5, num_workers=2
    )
    with pytest.raises(BadShardsError, match=r"(?s)extract: 1 of 5 shards are bad .*zz-vanished.html") as info:
        extract(dataclasses.replace(config, shard_policy=ShardPolicy(retries=0)))
    assert "FileNotFoundError" in str(info.value)
    assert len(list_shards(str(tmp_path / "out" / "data"))) == 4  # the others finished and are kept
    result = extract(dataclasses.replace(config, shard_policy=ShardPolicy(retries=0, max_bad_shards=1)))
    assert result["documents"] == 4 and result["files_left_out"] == 1 and result["shards_reused"] == 4
    assert result["bad_shards"][0]["shard"].startswith("shard-00004.jsonl.zst (1 files from 'zz-vanished.html')")
    assert sum(1 for s in list_shards(str(tmp_path / "out" / "data")) for _ in read_documents(s)) == 4


@pytest.mark.slow
def test_a_shard_that_runs_out_of_memory_is_told_apart_from_an_exception(tmp_path):
    """A real allocation past the shard's address-space limit: MemoryError, recorded as out_of_memory."""
    tasks = [(n, str(tmp_path)) for n in ("mem-1", "raise-2")]
    outcome = run_shards(
        shard_fn, tasks, num_workers=2, desc="tokenize", policy=ShardPolicy(retries=0, max_bad_shards=2)
    )
    kinds = {b["shard"].split("'")[1]: b["attempts"][0] for b in outcome.bad}
    assert kinds["mem-1"]["kind"] == "out_of_memory" and "MemoryError" in kinds["mem-1"]["error"]
    assert kinds["raise-2"]["kind"] == "exception"


@pytest.mark.parametrize(
    "field, value",
    [("retries", -1), ("max_bad_shards", 1.5), ("time_limit_s", 0), ("memory_bytes", -5), ("preemption_retries", None)],
)
def test_a_policy_that_cannot_work_is_one_line_naming_the_step_and_field(field, value, tmp_path):
    policy = dataclasses.replace(ShardPolicy(), **{field: value})
    with pytest.raises(ProcessingError, match=rf"^tokenize: shard_policy\.{field}={value!r}: expected"):
        Quarantine("tokenize", str(tmp_path), policy)


def _corrupt_corpus(root, shards: int = 3, bad: tuple[int, ...] = (1,)) -> list[dict]:
    """Document shards `part-0000i.jsonl.gz`; those in `bad` are not gzip at all (every read fails)."""
    docs = make_document_shards(root, shards=shards, per_shard=12, ext="jsonl.gz")
    for i in bad:
        (root / f"part-{i:05d}.jsonl.gz").write_bytes(b"this is not gzip")
    return docs


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    make_document_shards(root / "docs", shards=1, per_shard=40, ext="jsonl.gz")
    train_tokenizer(
        TrainTokenizerConfig(input_path=str(root / "docs"), output_path=str(root / "tokenizer"), vocab_size=300)
    )
    return str(root / "tokenizer")


@pytest.mark.slow
def test_tokenize_names_a_bad_shard_and_the_rerun_command_or_leaves_it_out_within_its_allowance(
    tmp_path, tokenizer_dir
):
    _corrupt_corpus(tmp_path / "docs")
    out = tmp_path / "cache"
    config = TokenizeConfig(
        input_path=str(tmp_path / "docs"),
        output_path=str(out),
        tokenizer=tokenizer_dir,
        num_workers=2,
        shard_policy=ShardPolicy(retries=1),
    )
    with pytest.raises(BadShardsError) as info:
        tokenize(config)
    text = str(info.value)
    assert "tokenize: 1 of 3 shards are bad (allowed: 0)" in text and "part-00001.jsonl.gz" in text
    assert f"marin-lab rerun-shards {out}" in text
    report = read_report(str(out))
    assert report["step"] == "tokenize" and [b["task"] for b in report["bad"]] == [1]
    assert [a["kind"] for a in report["bad"][0]["attempts"]] == ["exception", "exception"]
    assert sorted(p.name for p in (out / "progress").glob("*.done")) == ["shard-00000.done", "shard-00002.done"]

    result = tokenize(dataclasses.replace(config, shard_policy=ShardPolicy(retries=0, max_bad_shards=1)))
    assert result["shards_reused"] == 2 and [b["task"] for b in result["bad_shards"]] == [1]
    ledger = json.loads((out / "ledger.json").read_text())
    assert [e["shard"] for e in ledger["left_out"]] == [report["bad"][0]["shard"]]
    assert "BadGzipFile" in ledger["left_out"][0]["error"] or "gzip" in ledger["left_out"][0]["error"].lower()
    assert read_report(str(out)) is None  # the step ended well: no report left to rerun from


@pytest.mark.slow
def test_a_ledger_without_left_out_shards_is_unchanged(tmp_path, tokenizer_dir):
    make_document_shards(tmp_path / "docs", shards=2, per_shard=10, ext="jsonl.gz")
    plain = tokenize(
        TokenizeConfig(input_path=str(tmp_path / "docs"), output_path=str(tmp_path / "a"), tokenizer=tokenizer_dir)
    )
    guarded = tokenize(
        TokenizeConfig(
            input_path=str(tmp_path / "docs"),
            output_path=str(tmp_path / "b"),
            tokenizer=tokenizer_dir,
            shard_policy=ShardPolicy(max_bad_shards=1),
        )
    )
    assert (tmp_path / "a" / "ledger.json").read_bytes() == (tmp_path / "b" / "ledger.json").read_bytes()
    assert "bad_shards" not in plain and guarded["bad_shards"] == []


@pytest.mark.slow
def test_a_rerun_of_bad_shards_allows_none(tmp_path):
    """`marin-lab rerun-shards` marks the report: the step is SUCCESS only when every shard is done."""
    report = {"step": "x", "bad": [{"task": 1, "shard": "b", "attempts": []}]}
    (tmp_path / REPORT_FILE).write_text(json.dumps(report))
    request_rerun(str(tmp_path))
    shards = Quarantine("filter", str(tmp_path), ShardPolicy(retries=0, max_bad_shards=5))
    with pytest.raises(
        BadShardsError,
        match=r"1 of 2 shards are bad \(allowed: 0; a rerun of bad shards must "
        r"finish every shard\)",
    ):
        shards.map(shard_fn, [("a", str(tmp_path)), ("raise-b", str(tmp_path))], num_workers=2, desc="filter")
    assert [b["shard"] for b in read_report(str(tmp_path))["bad"]] == ["('raise-b', " + repr(str(tmp_path)) + ")"]


def test_filter_heuristics_leaves_a_bad_shard_out_within_its_allowance(tmp_path):
    docs = _corrupt_corpus(tmp_path / "docs")
    config = HeuristicFilterConfig(
        input_path=str(tmp_path / "docs"),
        output_path=str(tmp_path / "out"),
        num_workers=2,
        shard_policy=ShardPolicy(retries=0, max_bad_shards=1),
    )
    result = filter_heuristics(config)
    assert result["shards"] == 2 and result["documents_read"] == len(docs) - 12
    (bad,) = result["bad_shards"]
    assert bad["shard"].endswith("part-00001.jsonl.gz") and bad["phase"] == "filter_heuristics"
    assert not (tmp_path / "out" / "data" / "part-00001.jsonl.gz").exists()


@pytest.mark.slow
def test_dedup_needs_every_shard_and_a_rerun_gives_the_bytes_of_a_clean_run(tmp_path):
    """Dedup is global: no allowance (one line), a bad shard fails the step with the others' hashes
    kept, and once it reads again the rerun redoes only it and writes what a clean run writes."""
    docs = _corrupt_corpus(tmp_path / "docs", bad=(1,))
    docs[24] = {**docs[24], "text": docs[12]["text"]}  # shard 2 repeats a document of the bad shard 1
    write_documents(str(tmp_path / "docs" / "part-00002.jsonl.gz"), docs[24:36])
    out = tmp_path / "out"
    config = DedupConfig(
        input_path=str(tmp_path / "docs"),
        output_path=str(out),
        num_workers=2,
        shard_policy=ShardPolicy(retries=0, max_bad_shards=1),
    )
    with pytest.raises(
        DedupError,
        match=r"^dedup_exact: shard_policy.max_bad_shards=1: a dedup step needs every "
        r"shard",
    ):
        dedup_exact(config)
    config = dataclasses.replace(config, shard_policy=ShardPolicy(retries=0))
    with pytest.raises(
        BadShardsError,
        match=r"dedup_exact: hashes: 1 of 3 shards are bad \(allowed: 0; "
        r"this phase needs every shard\)",
    ):
        dedup_exact(config)
    hashed = sorted(p.name for p in (out / ".work" / "exact").glob("*.done"))
    assert hashed == ["part-00000.jsonl.gz.npz.done", "part-00002.jsonl.gz.npz.done"]
    before = {p: (out / ".work" / "exact" / p).stat().st_mtime_ns for p in hashed}
    write_documents(str(tmp_path / "docs" / "part-00001.jsonl.gz"), docs[12:24])  # the store answers again
    again = dedup_exact(config)
    assert {p: (out / ".work" / "exact" / p).stat().st_mtime_ns for p in hashed} == before  # kept, not redone
    assert read_report(str(out)) is None
    shutil.copytree(tmp_path / "docs", tmp_path / "docs2")
    clean = dedup_exact(DedupConfig(input_path=str(tmp_path / "docs2"), output_path=str(tmp_path / "clean")))
    assert again["kept"] == clean["kept"] == len(docs) - 1
    with open(out / "removed" / "part-00002.jsonl.zst", "rb") as f:
        removed = [json.loads(line) for line in zstandard.ZstdDecompressor().stream_reader(f).read().splitlines()]
    assert [(r["id"], r["duplicate_of"]) for r in removed] == [(docs[24]["id"], docs[12]["id"])]
    for name in ("part-00000.jsonl.gz", "part-00001.jsonl.gz", "part-00002.jsonl.gz"):
        assert (out / "data" / name).read_bytes() == (tmp_path / "clean" / "data" / name).read_bytes()


@pytest.mark.slow
def test_tokenize_instructions_leaves_a_bad_shard_out_and_its_ledger_says_so(tmp_path, tokenizer_dir):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(
        "".join(json.dumps({"id": f"r{i}", "prompt": "the river", "response": "the stone"}) + "\n" for i in range(6))
    )
    (tmp_path / "in" / "b.jsonl.gz").write_bytes(b"not gzip")
    out = tmp_path / "cache"
    config = TokenizeInstructionsConfig(
        input_path=str(tmp_path / "in"),
        output_path=str(out),
        tokenizer=tokenizer_dir,
        shard_policy=ShardPolicy(retries=0),
    )
    with pytest.raises(BadShardsError, match=r"(?s)tokenize instructions: 1 of 2 shards are bad .*b\.jsonl\.gz"):
        tokenize_instructions(config)
    result = tokenize_instructions(dataclasses.replace(config, shard_policy=ShardPolicy(retries=0, max_bad_shards=1)))
    assert result["records"] == 6 and result["shards_reused"] == 1
    ledger = json.loads((out / "ledger.json").read_text())
    assert [e["shard"] for e in ledger["left_out"]] == [str(tmp_path / "in" / "b.jsonl.gz")]


@pytest.mark.slow
def test_fuzzy_dedup_names_a_bad_shard_in_its_signature_phase_and_reruns_only_it(tmp_path):
    docs = _corrupt_corpus(tmp_path / "docs", bad=(0,))
    out = tmp_path / "out"
    config = DedupConfig(
        input_path=str(tmp_path / "docs"),
        output_path=str(out),
        num_workers=2,
        lsh_partitions=2,
        shard_policy=ShardPolicy(retries=0),
    )
    with pytest.raises(
        BadShardsError,
        match=r"(?s)dedup_fuzzy: signatures: 1 of 3 shards are bad \(allowed: 0; "
        r"this phase needs every shard\).*part-00000\.jsonl\.gz",
    ):
        dedup_fuzzy(config)
    assert read_report(str(out))["phase"] == "dedup_fuzzy: signatures"
    kept = sorted(p.name for p in (out / ".work" / "minhash").glob("*.done"))
    assert kept == ["part-00001.jsonl.gz.done", "part-00002.jsonl.gz.done"]
    write_documents(str(tmp_path / "docs" / "part-00000.jsonl.gz"), docs[:12])
    result = dedup_fuzzy(config)
    assert result["documents_read"] == len(docs) and read_report(str(out)) is None
