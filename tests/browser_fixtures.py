"""A small executor prefix, written in the executor's record formats, for the browser's tests.

It holds every case the browser must show: finished, running, failed, corrupt and missing steps;
an older version of a step (for explain); documents as .jsonl, .jsonl.gz and .jsonl.zst (one of
them a `<script>` payload, one line of broken JSON); a parquet table; a token cache; training
metrics and eval results; a secret in the environment; and a symlink that leaves the prefix.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

EXPERIMENT_ID = "quickstart-ab12cd34"
XSS_TEXT = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
SECRET_VALUE = "sk-fixture-secret-0123456789"
OUTSIDE_TEXT = "TOP SECRET FILE OUTSIDE THE PREFIX"
WORDS = ("the quick brown fox jumps over lazy dog data model token train step graph layer shard eval loss rate").split()


@dataclass(frozen=True)
class FixturePrefix:
    prefix: Path
    outside: Path
    raw: Path
    raw_old: Path
    tokenize: Path
    tokenize_old: Path
    train: Path
    evaluate: Path
    corrupt: Path
    missing: Path


def _doc(i: int) -> dict:
    words = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(8 + i % 5))
    return {"id": f"doc-{i:04d}", "text": f"Document {i}: {words}.", "source": "fixture", "metadata": {"n": i}}


def _write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))


def _record(
    out: Path,
    name: str,
    identity: str,
    status: str,
    *,
    version: dict,
    started: str,
    deps: list[tuple[str, str, Path]] = (),
    config: dict | None = None,
    attempts: list | None = None,
    result: object = None,
    env: dict | None = None,
) -> None:
    files = sorted(p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".executor"))
    manifest = {
        "files": [{"path": str(p.relative_to(out)), "size": p.stat().st_size, "sha256": "0" * 64} for p in files],
        "total_bytes": sum(p.stat().st_size for p in files),
        "count": len(files),
    }
    record = {
        "schema": 1,
        "name": name,
        "identity": identity,
        "hash": identity[-8:],
        "output_path": str(out),
        "fn": f"marin_lab.fixture:{name.split('/')[0]}",
        "description": f"fixture step {name}",
        "version": version,
        "config": config or {"output_path": str(out)},
        "unversioned": {"num_workers": 2},
        "config_fingerprint": "sha256:fixture",
        "dependencies": [{"name": n, "identity": i, "output_path": str(p)} for n, i, p in deps],
        "resources": None,
        "status": status,
        "status_history": [
            {"status": "RUNNING", "time": started, "attempt": 1, "driver": "host:1:abc", "message": None},
            {
                "status": status,
                "time": started.replace("00:00", "05:00"),
                "attempt": 1,
                "driver": "host:1:abc",
                "message": None,
            },
        ],
        "attempts": attempts
        or [{"attempt": 1, "kind": None, "started": started, "ended": started, "status": status, "error": None}],
        "timings": {"started": started, "ended": started.replace("00:00", "05:00"), "duration_s": 300.0},
        "result": result,
        "git": {"commit": "0123abcd", "dirty": False},
        "environment": {
            "python": "3.11.7",
            "packages": {"numpy": "2.4.6"},
            "host": "fixture-host",
            "platform": "linux",
            "accelerators": {"cpu": 2},
            "env": env or {"MARIN_PREFIX": "x"},
        },
        "manifest": manifest,
    }
    _write_json(out / ".executor_info", record)
    _write_json(out / ".executor_status", {"status": status, "time": started, "attempt": 1, "driver": "host:1:abc"})


def _tokenizer_json(path: Path, texts: list[str]) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(special_tokens=["<unk>", "<eos>"])
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.save(str(path))


def _token_cache(out: Path, texts: list[str]) -> None:
    from tokenizers import Tokenizer

    _tokenizer_json(out / "tokenizer.json", texts)
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    eos = tokenizer.token_to_id("<eos>")
    tokens: list[int] = []
    offsets = [0]
    for text in texts:
        tokens.extend(tokenizer.encode(text).ids + [eos])
        offsets.append(len(tokens))
    (out / "train").mkdir(parents=True, exist_ok=True)
    np.save(out / "train" / "shard-00000.tokens.npy", np.asarray(tokens, dtype=np.uint16))
    np.save(out / "train" / "shard-00000.offsets.npy", np.asarray(offsets, dtype=np.int64))
    _write_json(
        out / "ledger.json",
        {
            "format": "marin_lab.token_cache",
            "version": 1,
            "dtype": "uint16",
            "vocab_size": tokenizer.get_vocab_size(),
            "eos_id": eos,
            "bos_id": None,
            "tokenizer": {"file": "tokenizer.json", "sha256": "fixture"},
            "splits": {
                "train": {
                    "documents": len(texts),
                    "tokens": len(tokens),
                    "shards": [
                        {
                            "name": "shard-00000",
                            "documents": len(texts),
                            "tokens": len(tokens),
                            "tokens_sha256": "x",
                            "offsets_sha256": "y",
                        }
                    ],
                }
            },
        },
    )


def build_prefix(base: Path) -> FixturePrefix:
    """Write the fixture prefix under `base/prefix` (and a folder outside it, `base/outside`)."""
    prefix, outside = base / "prefix", base / "outside"
    outside.mkdir(parents=True)
    (outside / "secret.txt").write_text(OUTSIDE_TEXT)
    p = FixturePrefix(
        prefix,
        outside,
        prefix / "raw/docs-aaaa0001",
        prefix / "raw/docs-aaaa0000",
        prefix / "tokenize/docs-bbbb0002",
        prefix / "tokenize/docs-bbbb0001",
        prefix / "train/tiny-cccc0003",
        prefix / "eval/tiny-dddd0004",
        prefix / "report/summary-eeee0005",
        prefix / "report/missing-ffff0006",
    )

    docs = [_doc(i) for i in range(120)]
    docs[3] = {"id": "doc-xss", "text": XSS_TEXT, "source": "fixture"}
    data = p.raw / "data"
    data.mkdir(parents=True)
    lines = [json.dumps(d) for d in docs]
    lines.insert(10, '{"id": "broken", "text": ')  # a corrupt line is shown as such
    (data / "plain.jsonl").write_text("\n".join(lines) + "\n")
    with gzip.open(data / "docs-00000.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    (data / "docs-00001.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode()))
    table = pa.table({"id": [d["id"] for d in docs], "text": [d["text"] for d in docs], "n": list(range(len(docs)))})
    pq.write_table(table, data / "table.parquet", row_group_size=50)
    (p.raw / "notes.txt").write_text("line one\n" + XSS_TEXT + "\nAPI_KEY=should-not-show\n")
    os.symlink(outside, p.raw / "escape")
    os.symlink(outside / "secret.txt", p.raw / "link-secret.txt")
    raw_version = {"name": "raw/docs", "config": {"source": "file:///data/corpus-v2"}, "dependencies": []}
    _record(
        p.raw,
        "raw/docs",
        "raw/docs-aaaa0001",
        "SUCCESS",
        version=raw_version,
        started="2026-11-20T10:00:00Z",
        result={"documents": 120},
        env={"MARIN_PREFIX": str(prefix), "WANDB_API_KEY": SECRET_VALUE, "HF_TOKEN": SECRET_VALUE},
    )
    p.raw_old.mkdir(parents=True)
    _record(
        p.raw_old,
        "raw/docs",
        "raw/docs-aaaa0000",
        "SUCCESS",
        version={"name": "raw/docs", "config": {"source": "file:///data/corpus-v1"}, "dependencies": []},
        started="2026-11-01T10:00:00Z",
    )

    p.tokenize.mkdir(parents=True)
    _token_cache(p.tokenize, [d["text"] for d in docs[:40]])
    _record(
        p.tokenize,
        "tokenize/docs",
        "tokenize/docs-bbbb0002",
        "SUCCESS",
        started="2026-11-20T11:00:00Z",
        version={
            "name": "tokenize/docs",
            "config": {"tokenizer": "wordlevel", "input_path": "DEP[0]/data"},
            "dependencies": ["raw/docs-aaaa0001"],
        },
        deps=[("raw/docs", "raw/docs-aaaa0001", p.raw)],
        config={"tokenizer": "wordlevel", "input_path": str(p.raw / "data"), "max_tokens": 1000},
    )
    p.tokenize_old.mkdir(parents=True)
    _record(
        p.tokenize_old,
        "tokenize/docs",
        "tokenize/docs-bbbb0001",
        "SUCCESS",
        started="2026-11-01T11:00:00Z",
        version={
            "name": "tokenize/docs",
            "config": {"tokenizer": "gpt2", "input_path": "DEP[0]/data"},
            "dependencies": ["raw/docs-aaaa0000"],
        },
        deps=[("raw/docs", "raw/docs-aaaa0000", p.raw_old)],
    )

    p.train.mkdir(parents=True)
    rows = [
        {
            "step": s,
            "loss": 6.0 * 0.97**s + 1.0,
            "learning_rate": min(1e-3, s * 1e-4),
            "grad_norm": 1.0,
            "tokens_per_s": 14000.0 + s,
            "mfu": 0.1,
            "time": 1.0 * s,
        }
        for s in range(1, 101)
    ]
    (p.train / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    (p.train / "checkpoints/step-000100").mkdir(parents=True)
    (p.train / "checkpoints/step-000100/COMPLETE").write_text("")
    _record(
        p.train,
        "train/tiny",
        "train/tiny-cccc0003",
        "SUCCESS",
        started="2026-11-20T12:00:00Z",
        version={"name": "train/tiny", "config": {"lr": 0.001}, "dependencies": ["tokenize/docs-bbbb0002"]},
        deps=[("tokenize/docs", "tokenize/docs-bbbb0002", p.tokenize)],
    )

    p.evaluate.mkdir(parents=True)
    _write_json(
        p.evaluate / "results.json",
        {
            "perplexity": {"validation": 12.5},
            "bits_per_byte": {"validation": 1.23},
            "tasks": {"copy": {"accuracy": 0.5, "n": 10}},
        },
    )
    _record(
        p.evaluate,
        "eval/tiny",
        "eval/tiny-dddd0004",
        "FAILED",
        started="2026-11-20T13:00:00Z",
        version={"name": "eval/tiny", "dependencies": ["train/tiny-cccc0003"]},
        deps=[("train/tiny", "train/tiny-cccc0003", p.train)],
        attempts=[
            {
                "attempt": 1,
                "kind": "preemption",
                "started": "2026-11-20T13:00:00Z",
                "ended": "2026-11-20T13:01:00Z",
                "status": "FAILED",
                "error": None,
                "hardware": {"kind": "tpu", "type": "v4-16", "slices": 1, "hosts": 2, "slice_names": ["slice-0"]},
            },
            {
                "attempt": 2,
                "kind": "failure",
                "started": "2026-11-20T13:02:00Z",
                "ended": "2026-11-20T13:03:00Z",
                "status": "FAILED",
                "error": "Traceback (most recent call last):\nValueError: eval set <b>empty</b>",
            },
        ],
    )

    p.corrupt.mkdir(parents=True)
    (p.corrupt / ".executor_info").write_text('{"name": "report/summary", truncated')

    steps = [
        ("raw/docs", "raw/docs-aaaa0001", p.raw, []),
        ("tokenize/docs", "tokenize/docs-bbbb0002", p.tokenize, ["raw/docs-aaaa0001"]),
        ("train/tiny", "train/tiny-cccc0003", p.train, ["tokenize/docs-bbbb0002"]),
        ("eval/tiny", "eval/tiny-dddd0004", p.evaluate, ["train/tiny-cccc0003"]),
        ("report/summary", "report/summary-eeee0005", p.corrupt, ["eval/tiny-dddd0004", "train/tiny-cccc0003"]),
        ("report/missing", "report/missing-ffff0006", p.missing, ["eval/tiny-dddd0004"]),
    ]
    _write_json(
        prefix / "experiments" / f"{EXPERIMENT_ID}.json",
        {
            "schema": 1,
            "script": "experiments/quickstart.py",
            "name": "quickstart",
            "hash": "ab12cd34",
            "description": "A <b>fixture</b> experiment",
            "created": "2026-11-20T10:00:00Z",
            "command_line": ["python", "experiments/quickstart.py"],
            "git": {"commit": "0123abcd", "dirty": False},
            "prefix": str(prefix),
            "steps": [
                {
                    "name": n,
                    "identity": i,
                    "output_path": str(d),
                    "info_path": str(d / ".executor_info"),
                    "fn": f"marin_lab.fixture:{n.split('/')[0]}",
                    "dependencies": deps,
                }
                for n, i, d, deps in steps
            ],
        },
    )
    _write_json(
        prefix / "experiments" / "older-11112222.json",
        {
            "schema": 1,
            "script": "experiments/older.py",
            "name": "older",
            "hash": "11112222",
            "description": "an earlier run",
            "created": "2026-11-01T10:00:00Z",
            "prefix": str(prefix),
            "steps": [
                {
                    "name": "raw/docs",
                    "identity": "raw/docs-aaaa0000",
                    "output_path": str(p.raw_old),
                    "info_path": str(p.raw_old / ".executor_info"),
                    "fn": "marin_lab.fixture:raw",
                    "dependencies": [],
                }
            ],
        },
    )
    (prefix / "experiments" / "broken-deadbeef.json").write_text("{ this is not json")
    return p


def big_experiment(prefix: Path, steps: int, *, width: int = 25, exp_id: str = "big-0000abcd") -> str:
    """An experiment of `steps` SUCCESS steps in layers of `width`, each depending on two above."""
    entries = []
    for i in range(steps):
        layer, col = divmod(i, width)
        identity = f"layer{layer:03d}/step{col:03d}-{i:08x}"
        out = prefix / identity
        deps = []
        if layer > 0:
            deps = [
                entries[(layer - 1) * width + col]["identity"],
                entries[(layer - 1) * width + (col + 1) % width]["identity"],
            ]
        out.mkdir(parents=True, exist_ok=True)
        record = {
            "schema": 1,
            "name": identity.rsplit("-", 1)[0],
            "identity": identity,
            "output_path": str(out),
            "status": "SUCCESS",
            "version": {"i": i},
            "dependencies": [{"identity": d} for d in deps],
        }
        (out / ".executor_info").write_text(json.dumps(record))
        status = "FAILED" if i % 97 == 13 else "SUCCESS"
        (out / ".executor_status").write_text(json.dumps({"status": status, "time": "2026-11-20T10:00:00Z"}))
        entries.append(
            {
                "name": record["name"],
                "identity": identity,
                "output_path": str(out),
                "info_path": str(out / ".executor_info"),
                "fn": "bench:step",
                "dependencies": deps,
            }
        )
    _write_json(
        prefix / "experiments" / f"{exp_id}.json",
        {
            "schema": 1,
            "script": "experiments/big.py",
            "name": "big",
            "hash": exp_id[-8:],
            "created": "2026-11-21T00:00:00Z",
            "steps": entries,
        },
    )
    return exp_id


# ---- step functions for a run of the real executor (importable by its worker processes) ------
@dataclass(frozen=True)
class WordsConfig:
    output_path: str
    """Where the documents go."""
    word: str = "hello"
    """The word every document repeats."""


def write_words(config: WordsConfig) -> dict:
    os.makedirs(config.output_path, exist_ok=True)
    with open(os.path.join(config.output_path, "docs.jsonl"), "w") as f:
        for i in range(30):
            f.write(json.dumps({"id": str(i), "text": f"{config.word} <i>{i}</i>"}) + "\n")
    return {"documents": 30}


@dataclass(frozen=True)
class CountConfig:
    input_path: str
    """The documents to count."""
    output_path: str
    """Where metrics.jsonl goes."""


def count_words(config: CountConfig) -> dict:
    with open(os.path.join(config.input_path, "docs.jsonl")) as f:
        n = sum(1 for _ in f)
    os.makedirs(config.output_path, exist_ok=True)
    with open(os.path.join(config.output_path, "metrics.jsonl"), "w") as f:
        for step in range(1, 11):
            f.write(
                json.dumps({"step": step, "loss": 1.0 / step, "learning_rate": 0.1, "tokens_per_s": 100.0 * step})
                + "\n"
            )
    return {"documents": n}
