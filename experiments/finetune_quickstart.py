"""Fine-tuning quickstart: the quickstart's tiny Llama taught an instruction task three ways.

Question: on a small model and a task made from real text, how close do LoRA and QLoRA (4-bit
NF4 base) come to full fine-tuning? Baseline: the un-fine-tuned model (the quickstart's
pretrained nano Llama), scored on the same held-out questions.

The task (marin_lab.processing.section_qa): for each section of the Python 3.11 manual and the
Debian Reference, "here is how a section begins: ... what is its title?" and "which manual has a
section titled ...?". Questions about one section share a split; the loss counts answer tokens
only; the score is the mean answer-token loss on sections never trained on.

    quickstart steps (download ... tokenizer, tokenize, train nano) -> section questions
      -> tokenize_instructions -> finetune full | lora | qlora (quantize_base first) -> evaluate_lm

    python experiments/finetune_quickstart.py                 # ~30 min on 2 busy CPU cores
    python experiments/finetune_quickstart.py --dry_run true
"""

from __future__ import annotations

import json
import os
from typing import Any

from experiments.finetune_defaults import default_finetune, default_quantize_base, default_tokenize_instructions
from experiments.quickstart import debian_raw, python_raw, tokenized, tokenizer
from experiments.quickstart import model as pretrained
from marin_lab.evaluation import EvalLmConfig, evaluate_lm
from marin_lab.execution import ExecutorStep, executor_main, output_path_of, this_output_path, versioned
from marin_lab.io.fs import read_json
from marin_lab.peft import LoraConfig
from marin_lab.processing.section_qa import ManualSource, SectionQaConfig, make_section_qa
from marin_lab.training import CheckpointConfig, OptimizerConfig

questions = ExecutorStep(
    name="instructions/manual-sections",
    fn=make_section_qa,
    config=SectionQaConfig(
        sources=(
            ManualSource(versioned("python-docs"), versioned("Python 3.11 manual"), output_path_of(python_raw, "data")),
            ManualSource(
                versioned("debian-reference"),
                versioned("Debian Reference"),
                output_path_of(debian_raw, "data"),
                pattern=versioned("*.en.html"),
            ),
        ),
        output_path=this_output_path(),
        # As many Python sections as the Debian Reference has (~400), so "which manual" is not a given.
        max_sections_per_manual=versioned(400),
    ),
    description="title and manual questions from the sections of two manuals",
)
instructions = default_tokenize_instructions("manual-sections", questions, tokenizer)

# The nano model: 4 layers, d=64 (k/v projections 64x32), tied embeddings of 8192 x 64: the
# embedding is 68% of its 0.77M parameters, and the answers (section titles) are mostly about which
# tokens to emit. Adapters on the projections alone plateau at a ~26% cut whatever the rank or
# learning rate (r=8 and r=32 alike; benchmarks/finetune_sweep.py), so LoRA and QLoRA also train
# the embedding, as peft's modules_to_save=["embed_tokens"]: it counts in their trainable bytes.
lora = LoraConfig(rank=32, alpha=64.0, dropout=0.0, modules_to_save=("embed_tokens",))
common: dict[str, Any] = dict(
    num_train_steps=200,
    batch_size=16,
    seq_len=256,
    compute_dtype="float32",
    eval_max_sequences=None,
    checkpoint=CheckpointConfig(save_every_steps=100, keep_last=1),
    resources={"num_cpus": min(2, os.cpu_count() or 1)},
)
full = default_finetune(
    "manual-sections-full",
    pretrained,
    instructions,
    mode="full",
    optimizer=OptimizerConfig(learning_rate=1e-3, warmup=0.05, schedule="cosine", weight_decay=0.0),
    **common,
)
# Adapters start at B = 0 and move slowly: a higher learning rate than full fine-tuning (as in
# QLoRA): 2e-3, not the 1e-2 that suits projection adapters alone, since the trained embedding
# overfits at higher rates (3e-3: cut 49% vs 51% at 2e-3; the sweep is in benchmarks/results/finetune_sweep.jsonl).
adapter_opt = OptimizerConfig(learning_rate=2e-3, warmup=0.05, schedule="cosine", weight_decay=0.0)
lora_ft = default_finetune(
    "manual-sections-lora", pretrained, instructions, mode="lora", lora=lora, optimizer=adapter_opt, **common
)
quantized = default_quantize_base("quickstart-nano", pretrained)
qlora_ft = default_finetune(
    "manual-sections-qlora", quantized, instructions, mode="qlora", lora=lora, optimizer=adapter_opt, **common
)
runs = {"full": full, "lora": lora_ft, "qlora": qlora_ft}
# Forgetting check: each merged model's perplexity on the pretraining validation set.
evals = {
    mode: ExecutorStep(
        name=f"evaluation/manual-sections-{mode}",
        fn=evaluate_lm,
        config=EvalLmConfig(
            checkpoint_path=output_path_of(step, "merged"),
            output_path=this_output_path(),
            caches={"quickstart": output_path_of(tokenized)},
            seq_len=versioned(256),
            max_sequences=versioned(64),
        ),
        description="perplexity of the merged model on the pretraining validation set",
    )
    for mode, step in runs.items()
}


def _report(report) -> None:
    steps = {s.name: s for s in report.plan.steps}
    rows = {}
    done = {i for i, o in report.outcomes.items() if o.status == "SUCCESS"}
    for mode, step in runs.items():
        if steps[step.name].identity not in done or steps[evals[mode].name].identity not in done:
            continue  # not run, or not finished, by this run (--run_only, a failure): nothing to report
        out = steps[step.name].output_path
        summary = read_json(f"{out}/finetune_summary.json")
        before = summary["eval_loss_before"]["manual-sections"]
        after = summary["eval_loss_after"]["manual-sections"]
        ppl = read_json(f"{steps[evals[mode].name].output_path}/results.json")["perplexity"]["quickstart"]
        rows[mode] = {
            "before": before,
            "after": after,
            "cut": 1 - after / before,
            "trainable_params": summary["trainable_params"],
            "bytes": summary["bytes"],
            "pretraining_perplexity": ppl,
        }
    print("\nHeld-out answer loss (nats/token), before -> after fine-tuning:")
    for mode, r in rows.items():
        print(
            f"  {mode:6s} {r['before']:.3f} -> {r['after']:.3f}  (cut {r['cut']:.0%}; "
            f"{r['trainable_params']:,} trainable params; pretraining perplexity {r['pretraining_perplexity']})"
        )
    if {"qlora", "lora", "full"} - rows.keys():
        print(json.dumps(rows, indent=1))
        return
    q, lo, fu = rows["qlora"]["after"], rows["lora"]["after"], rows["full"]["after"]
    print(
        f"QLoRA vs LoRA: {q / lo - 1:+.1%} ({q - lo:+.3f} nats; target within 5% or 0.05 nats); "
        f"QLoRA vs full: {q / fu - 1:+.1%} (target within 15%); cuts: "
        + ", ".join(f"{mode} {r['cut']:.1%}" for mode, r in rows.items())
        + " (target >= 50% each)"
    )
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    report = executor_main(steps=[*evals.values()], description="Fine-tuning quickstart: full vs LoRA vs QLoRA")
    if report is not None and report.experiment_path:
        _report(report)
