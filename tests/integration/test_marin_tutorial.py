"""Marin's tiny-model CPU tutorial (experiments/tutorial/train_tiny_model_cpu.py, ported with import
changes only) runs end to end, offline, on a small TinyStories stand-in this test makes.

The tutorial names a Hugging Face dataset (roneneldan/TinyStories) and Marin's tokenizer
(stanford-crfm/marin-tokenizer); the code keeps those hub paths. The test puts a small data set
and a small tokenizer where the hub cache would hold them, and runs with HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from tests.conftest import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "experiments", "tutorial", "train_tiny_model_cpu.py")
SHA = "0123456789abcdef0123456789abcdef01234567"

NAMES = ["Lily", "Tom", "Sam", "Mia", "Ben", "Zoe"]
THINGS = ["ball", "cat", "kite", "cake", "tree", "boat", "hat", "dog"]
FEELINGS = ["happy", "sad", "tired", "brave", "hungry"]


def _stories(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        who, what, how = rng.choice(NAMES), rng.choice(THINGS), rng.choice(FEELINGS)
        out.append(
            f"Once upon a time, {who} had a {what}. {who} was {how}. "
            f"One day the {what} was lost. {who} looked for the {what} and found it. "
            f"{who} was {rng.choice(FEELINGS)} again. The end."
        )
    return out


def _snapshot(hub: str, kind: str, repo: str) -> str:
    root = os.path.join(hub, f"{kind}--{repo.replace('/', '--')}")
    os.makedirs(os.path.join(root, "refs"), exist_ok=True)
    with open(os.path.join(root, "refs", "main"), "w") as f:
        f.write(SHA)
    folder = os.path.join(root, "snapshots", SHA)
    os.makedirs(folder, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> str:
    hub = str(tmp_path_factory.mktemp("hub"))
    data = os.path.join(_snapshot(hub, "datasets", "roneneldan/TinyStories"), "data")
    os.makedirs(data)
    train, valid = _stories(3000, 0), _stories(100, 1)
    pq.write_table(pa.table({"text": train}), os.path.join(data, "train-00000-of-00001.parquet"))
    pq.write_table(pa.table({"text": valid}), os.path.join(data, "validation-00000-of-00001.parquet"))
    with open(os.path.join(data, "README.md"), "w") as f:
        f.write("not a document\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        train,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok.save(os.path.join(_snapshot(hub, "models", "stanford-crfm/marin-tokenizer"), "tokenizer.json"))
    return hub


@pytest.mark.slow
def test_marin_tutorial_trains_offline(hub_cache, tmp_path):
    env = dict(
        os.environ,
        HF_HUB_CACHE=hub_cache,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        WANDB_MODE="offline",
        WANDB_DIR=str(tmp_path),
    )
    prefix = str(tmp_path / "store")

    def run():
        return subprocess.run(
            [sys.executable, SCRIPT, "--prefix", prefix, "--backend", "local"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    first = run()
    assert first.returncode == 0, first.stderr[-4000:]
    assert "3 executed" in first.stderr
    (train_dir,) = (tmp_path / "store" / "checkpoints").glob("marin-nano-tinystories-*")
    summary = json.loads((train_dir / "train_summary.json").read_text())
    assert summary["final_step"] == 100
    lines = [json.loads(line) for line in (train_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in lines if "loss" in r]
    assert losses[-1] < losses[0] - 1.0  # the stories are learnable
    evals = [r for r in lines if "eval/TinyStories/loss" in r]
    assert [r["step"] for r in evals] == [100]
    info = json.loads((train_dir / ".executor_info").read_text())
    tokenizer = os.path.join(hub_cache, "models--stanford-crfm--marin-tokenizer", "snapshots", SHA, "tokenizer.json")
    vocab = Tokenizer.from_file(tokenizer).get_vocab_size(with_added_tokens=True)
    assert info["config"]["model"]["vocab_size"] == vocab and info["resources"] == {"num_cpus": 1}
    assert info["config"]["wandb"]["tags"] == ["llama", "nano", "tinystories", "tutorial", "marin-nano-tinystories"]
    second = run()
    assert second.returncode == 0 and "0 executed, 3 reused" in second.stderr
