"""The fine-tuning quickstart's recipe at a tiny size, run through the executor as a user runs it:
pretrain -> section questions -> tokenize_instructions -> quantize_base -> QLoRA fine-tune (adapters
plus the embedding, as experiments/finetune_quickstart.py trains them) -> evaluate the merged model.

experiments/finetune_quickstart.py itself takes ~30 min on real manuals; this is the same chain of
recipe helpers and step functions on made-up HTML."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from marin_lab.execution import Executor, ExecutorMainConfig
from marin_lab.execution.main import capture_steps
from tests.data_fixtures import make_html_site

RECIPE = textwrap.dedent("""
    import os

    from experiments.defaults import (default_download, default_extract, default_tokenize, default_train,
                                      default_train_tokenizer)
    from experiments.finetune_defaults import default_finetune, default_quantize_base, default_tokenize_instructions
    from experiments.simple_train_config import SimpleTrainConfig
    from marin_lab.evaluation import EvalLmConfig, evaluate_lm
    from marin_lab.execution import ExecutorStep, executor_main, output_path_of, this_output_path, versioned
    from marin_lab.peft import LoraConfig
    from marin_lab.processing.section_qa import ManualSource, SectionQaConfig, make_section_qa
    from marin_lab.training import CheckpointConfig, LlamaConfig, OptimizerConfig

    raw = default_download("site", source=os.environ["SITE"])
    docs = default_extract("site", raw, num_shards=1)
    tok = default_train_tokenizer("site", docs, vocab_size=300)
    data = default_tokenize("site", docs, tokenizer=tok, validation_fraction=0.3)
    tiny = LlamaConfig(vocab_size=None, hidden_dim=16, intermediate_dim=32, num_layers=1, num_heads=2,
                       num_kv_heads=1, max_seq_len=64)
    pretrained = default_train("tiny", data, tiny, SimpleTrainConfig(
        resources={"num_cpus": 1}, train_batch_size=2, num_train_steps=2, train_seq_len=32, learning_rate=1e-2,
        compute_dtype="float32", checkpoint=CheckpointConfig(save_every_steps=2, keep_last=1)))
    questions = ExecutorStep(
        name="instructions/site-sections",
        fn=make_section_qa,
        config=SectionQaConfig(
            sources=(ManualSource(versioned("site"), versioned("site manual"), output_path_of(raw, "data")),),
            output_path=this_output_path(),
        ),
    )
    instructions = default_tokenize_instructions("site-sections", questions, tok)
    quantized = default_quantize_base("tiny", pretrained)
    qlora = default_finetune(
        "site-sections-qlora", quantized, instructions, mode="qlora",
        lora=LoraConfig(rank=4, alpha=8.0, dropout=0.0, modules_to_save=("embed_tokens",)),
        optimizer=OptimizerConfig(learning_rate=2e-3, warmup=0.0, schedule="constant", weight_decay=0.0),
        num_train_steps=2, batch_size=4, seq_len=64, compute_dtype="float32", eval_max_sequences=None,
        checkpoint=CheckpointConfig(save_every_steps=2, keep_last=1), resources={"num_cpus": 1})
    evaluation = ExecutorStep(
        name="evaluation/site-sections-qlora",
        fn=evaluate_lm,
        config=EvalLmConfig(
            checkpoint_path=output_path_of(qlora, "merged"),
            output_path=this_output_path(),
            caches={"site": output_path_of(data)},
            seq_len=versioned(32),
            max_sequences=versioned(4),
        ),
    )

    if __name__ == "__main__":
        executor_main(steps=[evaluation])
""")


@pytest.mark.slow
def test_qlora_fine_tune_from_the_quantize_step_through_the_executor(tmp_path, monkeypatch):
    make_html_site(tmp_path / "site", n=24)
    monkeypatch.setenv("SITE", str(tmp_path / "site"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    script = tmp_path / "finetune_recipe.py"
    script.write_text(RECIPE)
    steps, _ = capture_steps(str(script))
    experiment = (
        Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local"), script=str(script))
        .run(steps)
        .experiment_path
    )
    out = {s["name"]: s["output_path"] for s in json.loads(Path(experiment).read_text())["steps"]}

    # The quantize step wrote the projections as NF4 fields; the fine-tune read them and the embedding.
    index = json.loads(next(Path(out["quantized/tiny"]).glob("checkpoints/step-*/index.json")).read_text())
    assert "['params']['layers']['w_down'].packed" in {leaf["name"] for leaf in index["leaves"]}
    summary = json.loads(Path(out["finetunes/site-sections-qlora"], "finetune_summary.json").read_text())
    assert summary["mode"] == "qlora" and summary["final_step"] == 2
    assert summary["eval_loss_before"] and summary["eval_loss_after"]
    assert summary["bytes"]["frozen"] > 0 and summary["trainable_params"] > 300 * 16  # the embedding trains
    results = json.loads(Path(out["evaluation/site-sections-qlora"], "results.json").read_text())
    assert results["perplexity"]["site"] > 1
