"""Evaluation throughput: our lm-eval adapter (MarinLM, JAX) against lm-eval's own `hf` backend (torch).

The same model (the quickstart's nano shape, random weights, exported with hf_export), the same tasks
and items (offline documents), the same machine, in one run. Each side runs every task twice: the first
pass includes compilation (ours) or warm-up (theirs); requests/s is taken from the second pass, and
both passes are reported. Needs the test extra (torch, transformers, accelerate).

Our first pass reads its programs from JAX's persistent compilation cache when an earlier process
compiled them (`import marin_lab` sets `~/.cache/marin_lab/jax`; `MARIN_JAX_CACHE=DIR` or `off`): run
it twice with one `MARIN_JAX_CACHE` folder for the first pass a rerun of an evaluation sees, or with
`MARIN_JAX_CACHE=off` for a cold one.

    PYTHONPATH=. python benchmarks/eval_throughput.py [--limit 100] [--tasks arc_easy:0,piqa:0,hellaswag:0]
        [--model lab_nano|lab_30m]

Before a task is timed, one untimed pass with a model that answers at once loads lm-eval's modules
and the task's documents, so neither side's first pass pays for them. Where a pass's time goes:
`model_s` is the time inside the model's own calls (lm-eval's `loglikelihood`,
`loglikelihood_rolling`, `generate_until`: tokenizing, batching, the forward passes), `harness_s`
the rest of the pass (lm-eval building the task's documents and requests, metrics, results), which
is the same code on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import jax

from experiments.models import MODELS
from marin_lab.evaluation.evaluate_lm import parse_task
from marin_lab.evaluation.harness import MarinLM, run_task
from marin_lab.models.llama import init_params
from marin_lab.training.hf_export import export_hf


def _tokenizer(vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = [
        Path(os.path.join(here, "docs", name)).read_text()
        for name in sorted(os.listdir(os.path.join(here, "docs")))
        if name.endswith(".md")
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=vocab, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return tok


def _requests(res: dict) -> int:
    return sum(len(s["resps"]) for samples in res["samples"].values() for s in samples)


def _warmup_lm() -> object:
    """An lm-eval model that answers every request at once: one untimed pass of a task with it loads
    lm-eval's modules and the task's documents, which would otherwise land in the first pass of
    whichever side ran first."""
    from lm_eval.api.model import LM

    class Answer(LM):  # type: ignore[misc]
        def loglikelihood(self, requests: list, disable_tqdm: bool = False) -> list:
            return [(0.0, False) for _ in requests]

        def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list:
            return [0.0 for _ in requests]

        def generate_until(self, requests: list, disable_tqdm: bool = False) -> list:
            return ["" for _ in requests]

    return Answer()


def _timed(lm: object) -> list[float]:
    """`lm`'s request methods wrapped to add their seconds to the returned one-item list."""
    spent = [0.0]
    for name in ("loglikelihood", "loglikelihood_rolling", "generate_until"):
        call = getattr(lm, name)

        def timed(*args: object, _call: object = call, **kwargs: object) -> object:
            t = time.perf_counter()
            try:
                return _call(*args, **kwargs)  # type: ignore[operator]
            finally:
                spent[0] += time.perf_counter() - t

        setattr(lm, name, timed)
    return spent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--tasks", default="arc_easy:0,piqa:0,hellaswag:0")
    ap.add_argument("--batch_size", type=int, default=16)
    ap.add_argument("--model", default="lab_nano", choices=["lab_nano", "lab_30m"])
    args = ap.parse_args()
    import dataclasses

    import torch
    from lm_eval.models.huggingface import HFLM

    torch.set_num_threads(os.cpu_count() or 1)
    shape = MODELS[args.model]
    tok = _tokenizer(shape.vocab_size or 4096)
    cfg = dataclasses.replace(shape, vocab_size=tok.get_vocab_size())
    params = init_params(cfg, jax.random.key(0))
    tmp = tempfile.mkdtemp(prefix="eval-throughput-")
    with open(os.path.join(tmp, "tokenizer.json"), "w") as f:
        f.write(tok.to_str())
    export_hf(
        params,
        cfg,
        os.path.join(tmp, "hf"),
        tokenizer_url=os.path.join(tmp, "tokenizer.json"),
        eos_id=tok.token_to_id("<|endoftext|>"),
    )
    with open(os.path.join(tmp, "hf", "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<|endoftext|>",
                "model_max_length": cfg.max_seq_len,
            },
            f,
        )
    ours = MarinLM(params, cfg, tok, batch_size=args.batch_size)
    theirs = HFLM(
        pretrained=os.path.join(tmp, "hf"),
        backend="causal",
        device="cpu",
        dtype=torch.float32,
        batch_size=args.batch_size,
        max_length=cfg.max_seq_len,
        logits_cache=False,
    )
    model_s = {"ours": _timed(ours), "hf": _timed(theirs)}
    rows = []
    for task in args.tasks.split(","):
        spec = parse_task(task, args.limit)
        row = {"task": task, "limit": args.limit}
        run_task(_warmup_lm(), spec, data="offline")
        for side, lm in (("ours", ours), ("hf", theirs)):
            times, inside = [], []
            for _ in range(2):
                model_s[side][0] = 0.0
                t = time.perf_counter()
                res = run_task(lm, spec, data="offline")
                times.append(time.perf_counter() - t)
                inside.append(model_s[side][0])
                if side == "ours" and "programs" not in row:
                    row["programs"] = res["marin_lab_programs"]
            n = _requests(res)
            row[f"{side}_requests"] = n
            row[f"{side}_first_s"], row[f"{side}_s"] = round(times[0], 2), round(times[1], 2)
            row[f"{side}_req_per_s"] = round(n / times[1], 1)
            row[f"{side}_model_s"] = round(inside[1], 2)
            row[f"{side}_harness_s"] = round(times[1] - inside[1], 2)
        row["ratio"] = round(row["ours_req_per_s"] / row["hf_req_per_s"], 2)
        row["model_ratio"] = round(row["hf_model_s"] / max(row["ours_model_s"], 1e-9), 2)  # > 1: ours faster
        row["first_pass_ratio"] = round(row["hf_first_s"] / row["ours_first_s"], 2)  # > 1: ours faster
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(
        json.dumps(
            {
                "model": dataclasses.asdict(cfg),
                "load": os.getloadavg(),
                "cpus": os.cpu_count(),
                "jax_cache": os.environ.get("JAX_COMPILATION_CACHE_DIR"),
                "model_name": args.model,
                "rows": rows,
            }
        ),
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
