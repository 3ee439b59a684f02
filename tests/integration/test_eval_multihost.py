"""Evaluation on the training mesh: lm-eval tasks scored by 2 processes (simulated hosts joined by
jax.distributed over gloo, 2 CPU devices each) with the parameters sharded over both, against one
process holding the whole model on one device.

A 2-process `train_lm` run scores its validation set and copa in the loop (rows in
metrics.jsonl); its final checkpoint is then evaluated by `evaluate_lm` as 2 processes (a mesh of
the 4 devices, parameters fsdp-sharded as in training) and in this process (one device, no mesh).

Tolerance: each choice's log-likelihood agrees within 1e-6 relative (8 float32 ulps), not bit for
bit. With the parameters split over their contracting dimension, XLA sums partial matmul products
across the 4 devices (all-reduce) where one device sums them in one matmul, so a token's
log-probability can move by an ulp; a continuation's sum (here -240 to -90 nats, float32 ulps of
up to 1.5e-5) then differs in its last bit or two. Measured: 28 of 32 bit-identical, the others
1 ulp apart (at most 1.5e-5 absolute, 9.4e-8 relative). A wrong row, token, position or padding
moves a sum by whole nats. The choices (acc) are then equal item by item, and so is the accuracy.
"""

import dataclasses
import json
import os
import sys
import types

import jax
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from marin_lab.evaluation import EvalLmConfig, evaluate_lm
from marin_lab.main.train_lm import train_lm
from marin_lab.testing.training import tiny_model, tiny_train_config, write_synthetic_cache
from marin_lab.training.local_hosts import run_hosts

pytestmark = pytest.mark.slow

RTOL = 1e-6
ITEMS = 16
STEPS = 4


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def trained(tmp_path_factory, monkeypatch_module):
    """A 2 hosts x 2 devices train_lm run with in-loop evaluation (validation loss and copa every 2 steps)."""
    monkeypatch_module.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    root = tmp_path_factory.mktemp("eval-multihost")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        ["Question: which answer is right? The man broke his toe because he dropped a hammer."] * 20,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    cache = write_synthetic_cache(str(root / "cache"), tokenizer_json=tok.to_str())
    config = tiny_train_config(
        str(root / "train"),
        {"c": cache},
        model=tiny_model(vocab_size=512),
        num_train_steps=STEPS,
        export_hf=False,
        steps_per_eval=2,
        max_eval_batches=1,
        eval_tasks=("copa:0",),
        eval_task_limit=ITEMS,
        steps_per_task_eval=2,
    )
    result = run_hosts(config, hosts=2, devices_per_host=2, workdir=str(root / "w-train"), fn=train_lm)
    assert result.ok, "\n---\n".join(result.stderr_tails)
    return root, cache, config, result.summary


def _metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _samples(out, key):
    with open(os.path.join(out, f"samples_{key}.jsonl")) as f:
        return {r["doc_id"]: r for r in map(json.loads, f)}


def test_in_loop_evaluation_runs_in_a_two_process_training_run(trained):
    _, _, config, summary = trained
    assert summary["environment"]["process_count"] == 2 and summary["final_step"] == STEPS
    lines = _metrics(config.output_path)
    validation = [r for r in lines if "eval/c/loss" in r]
    tasks = [r for r in lines if "eval/copa/acc" in r]
    assert [r["step"] for r in validation] == [2, 4] and [r["step"] for r in tasks] == [2, 4]
    for r in tasks:  # the value with its Wilson interval, over the items scored
        assert r["eval/copa/acc_low"] <= r["eval/copa/acc"] <= r["eval/copa/acc_high"]
        assert r["eval/copa/coverage"] == 1.0
    assert summary["tasks"]["eval/copa/acc"] == tasks[-1]["eval/copa/acc"]
    assert summary["eval"]["eval/c/loss"] == validation[-1]["eval/c/loss"]


def _eval_config(trained, output_path):
    _, cache, train_config, _ = trained
    return EvalLmConfig(
        checkpoint_path=train_config.output_path,
        output_path=str(output_path),
        caches={"c": cache},
        seq_len=train_config.seq_len,
        max_sequences=train_config.max_eval_batches * train_config.batch_size,
        tasks=(f"copa:0:{ITEMS}",),
        data="offline",
        tokenizer_path=f"{cache}/tokenizer.json",
        contamination=False,
    )


def test_two_processes_score_every_item_as_one_process_does(trained, tmp_path):
    train_config = trained[2]
    config = _eval_config(trained, tmp_path / "two")
    workdir = tmp_path / "w-eval"
    result = run_hosts(config, hosts=2, devices_per_host=2, workdir=str(workdir), fn=evaluate_lm)
    assert result.ok, "\n---\n".join(result.stderr_tails)
    two = result.summary
    one = evaluate_lm(dataclasses.replace(config, output_path=str(tmp_path / "one")))
    assert jax.process_count() == 1 and jax.device_count() == 1  # the reference: the whole model on one device

    # Process 1 scored the same items and returned the same document (contamination is measured by
    # process 0, from the samples files it wrote); process 0 wrote it.
    with open(workdir / "host-1.json") as f:
        other = json.load(f)
    assert {k: {f: v for f, v in e.items() if f != "contamination"} for k, e in two["marin_lab"]["tasks"].items()} == (
        other["marin_lab"]["tasks"]
    )
    with open(tmp_path / "two" / "results.json") as f:
        assert json.load(f)["marin_lab"]["tasks"] == two["marin_lab"]["tasks"]

    a, b = _samples(tmp_path / "two", "copa"), _samples(tmp_path / "one", "copa")
    assert sorted(a) == sorted(b) and len(a) == ITEMS
    for doc_id in a:
        assert a[doc_id]["arguments"] == b[doc_id]["arguments"]  # the same prompts
        left = [float(r[0]) for r in a[doc_id]["filtered_resps"]]
        right = [float(r[0]) for r in b[doc_id]["filtered_resps"]]
        assert left == pytest.approx(right, rel=RTOL, abs=0), doc_id
        assert a[doc_id]["acc"] == b[doc_id]["acc"]
    assert two["results"]["copa"]["acc,none"] == one["results"]["copa"]["acc,none"]
    assert two["perplexity"]["c"] == pytest.approx(one["perplexity"]["c"], rel=1e-5)

    # The last in-loop evaluation scored the final parameters on the training mesh: the same copa
    # items (copa:0 capped at ITEMS is the same seeded sample) and the same validation windows.
    in_loop = [r for r in _metrics(train_config.output_path) if "eval/copa/acc" in r][-1]
    assert in_loop["step"] == STEPS and in_loop["eval/copa/acc"] == one["results"]["copa"]["acc,none"]
    validation = [r for r in _metrics(train_config.output_path) if "eval/c/loss" in r][-1]
    assert validation["eval/c/loss"] == pytest.approx(one["details"]["c"]["loss"], rel=1e-5)


def test_a_process_other_than_0_returns_the_document_and_writes_nothing(trained, tmp_path, monkeypatch):
    """What processes 1.. of a multi-host evaluate_lm do once scored, seen from one process."""
    module = sys.modules["marin_lab.evaluation.evaluate_lm"]  # the package exports the function under its name
    monkeypatch.setattr(module, "jax", types.SimpleNamespace(process_index=lambda: 1))
    out = tmp_path / "process-1"
    results = evaluate_lm(dataclasses.replace(_eval_config(trained, out), caches={}))
    assert results["marin_lab"]["tasks"]["copa"]["scored"] == ITEMS
    assert "contamination" not in results["marin_lab"]["tasks"]["copa"]  # measured by process 0 only
    assert not out.exists() or not list(out.iterdir())
