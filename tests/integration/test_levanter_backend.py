"""The Levanter backend for real: PyPI's levanter 1.1 in its locked environment trains a tiny llama offline.

The environment is built from requirements/levanter.lock on first use (pip from PyPI, ~70 s on an idle
2-core machine, 1.4 GB) and cached under $MARIN_ENV_CACHE or ~/.cache/marin_lab/envs, so reruns only
train (~70-80 s, most of it Levanter starting Ray and building its token cache). The documents are
real text nobody here wrote: the docstrings of the Python standard library's modules.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import pytest

from experiments.levanter_backend import (
    LevanterTrainConfig,
    levanter_environment,
    train_lm_levanter,
)
from marin_lab.environments import read_environment_record
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path


def _stdlib_documents() -> list[dict]:
    docs = []
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in ("antigravity", "this", "idlelib", "turtledemo", "tkinter", "turtle"):
            continue
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - platform-specific modules
            continue
        text = (module.__doc__ or "").strip()
        if len(text) > 300:
            docs.append({"id": f"stdlib/{name}", "text": text, "source": "python-stdlib-docstrings"})
    return docs


@pytest.mark.slow
def test_levanter_step_trains_tiny_llama_offline_in_its_locked_environment(tmp_path: Path) -> None:
    docs = _stdlib_documents()
    assert len(docs) > 40
    train, validation = tmp_path / "train.jsonl", tmp_path / "validation.jsonl"
    train.write_text("".join(json.dumps(d) + "\n" for i, d in enumerate(docs) if i % 10))
    validation.write_text("".join(json.dumps(d) + "\n" for i, d in enumerate(docs) if not i % 10))

    environment = levanter_environment()
    step = ExecutorStep(
        name="train/levanter-tiny",
        fn=train_lm_levanter,
        config=LevanterTrainConfig(
            output_path=this_output_path(),
            train_urls=(str(train),),
            validation_urls=(str(validation),),
            tokenizer_vocab_size=512,
            seq_len=64,
            hidden_dim=32,
            intermediate_dim=64,
            num_layers=2,
            num_heads=2,
            num_train_steps=4,
            train_batch_size=4,
            steps_per_eval=4,
            max_eval_batches=1,
            checkpoint_every_steps=2,
        ),
        environment=environment,
    )
    Executor(ExecutorMainConfig(prefix=str(tmp_path / "prefix"), backend="local", max_failure_retries=0)).run([step])

    [info_path] = (tmp_path / "prefix" / "train").glob("levanter-tiny-*/.executor_info")
    out = info_path.parent
    info = json.loads(info_path.read_text())
    assert info["status"] == "SUCCESS"
    assert info["step_environment"]["lock_hash"] == environment.lock_hash()
    record = read_environment_record(info["step_environment"]["python"])
    assert record["packages"]["levanter"] == "1.1" and record["packages"]["jax"] == "0.4.20"
    assert record["unpinned"] == []  # the lock pins every installed package

    # Checkpoints land under the step's output path, marked complete like the native trainer's.
    checkpoints = sorted(out.glob("checkpoints/*/step-*"))
    assert checkpoints, f"no checkpoint under {out}/checkpoints"
    assert all((c / "metadata.json").exists() and (c / "COMPLETE").exists() for c in checkpoints)
    assert "step-2" in {c.name for c in checkpoints}

    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2, 3]
    assert all(math.isfinite(m["loss"]) and m["loss"] > 0 for m in metrics)
    assert all(m["learning_rate"] > 0 for m in metrics)
    # An untrained 512-token model starts near ln(512); a few steps on real text must not diverge.
    assert abs(metrics[0]["loss"] - math.log(512)) < 1.0

    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["backend"] == "levanter" and summary["levanter"] == "1.1"
    assert info["result"]["final_loss"] == summary["final_loss"] == metrics[-1]["loss"]
    assert (out / "tokenizer" / "tokenizer.json").exists()
    assert (out / "levanter" / "train_lm.yaml").exists()
