"""Run every shipped experiment file end to end, as a user would, and print one line per experiment.

Each experiment runs as `python experiments/X.py --prefix ...` in a subprocess with a timeout, in
order: the quickstart's store first, since finetune_quickstart.py and fp8_nano.py import the
quickstart's steps (same identities) and reuse its outputs when pointed at the same --prefix.
The two that need accelerators or 8B/70B weights (tootsie_8b.py, finetune_70b_qlora.py) run
their `--dry_run` only; the line says why, and which test covers the recipe at a tiny size.

    python benchmarks/run_experiments.py --prefix /tmp/rx
    python benchmarks/run_experiments.py --quickstart_store /tmp/qw/store   # reuse a quickstart store (copied)
    python benchmarks/run_experiments.py --only fp8_nano --fp8_run_only 'fp8-nano-fp8-seed0'

Each line: name, exit code, wall time, how it ran, and the last summary line of its output
(the last stdout line, and the executor's "N executed, M reused" line when it printed one).
Full logs go to PREFIX/logs/NAME.log.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXP = os.path.join(ROOT, "experiments")

ORDER = (
    "quickstart",
    "finetune_quickstart",
    "fp8_nano",
    "tiny_multihost",
    "word_lengths",
    "tutorial/train_tiny_model_cpu",
    "tootsie_8b",
    "finetune_70b_qlora",
)

DRY_ONLY = {
    "tootsie_8b": (
        "full run needs TPU slices (2x v5e-256, v4-2048) and DCLM/FineMath downloads; "
        "tests/unit/training/test_train_tootsie.py checks this dry run; no test trains the recipe at a tiny size"
    ),
    "finetune_70b_qlora": (
        "full run needs Llama-2-70B weights ($LLAMA2_70B) and two GPUs; the recipe (QLoRA, FSDP, offload, "
        "remat) runs at tiny size in tests/integration/test_finetune_mesh.py and "
        "tests/integration/test_finetune_recipe.py; its memory plan in tests/unit/training/test_finetune.py"
    ),
}


def _truthy(s: str) -> bool:
    return s.lower() in ("1", "true", "yes")


def _store_statuses(store: str) -> dict[str, str]:
    out = {}
    for path in glob.glob(os.path.join(store, "*", "*", ".executor_status")):
        try:
            with open(path) as f:
                out[os.path.relpath(os.path.dirname(path), store)] = json.load(f).get("status", "?")
        except (OSError, ValueError):
            out[os.path.relpath(os.path.dirname(path), store)] = "unreadable"
    return out


def _run(name: str, argv: list[str], timeout: float, log_dir: str, env: dict | None = None, cwd: str = ROOT):
    """(exit code, wall seconds, stdout, stderr); exit code 'timeout' when it ran past `timeout`."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            [sys.executable, *argv],
            cwd=cwd,
            env=env or dict(os.environ),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    wall = time.monotonic() - t0
    with open(os.path.join(log_dir, name.replace("/", "_") + ".log"), "w") as f:
        f.write(f"$ python {' '.join(argv)}\nexit {rc}, {wall:.1f} s\n--- stdout\n{out}\n--- stderr\n{err}\n")
    return rc, wall, out, err


POINTER = re.compile(r"^(Browse the records|The curves side by side|then open|Records: )")
COUNTS = re.compile(r"\d+ executed, \d+ reused(, \d+ failed)?")


def _summary(out: str, err: str) -> str:
    # The last result line: pointers to the data browser come after it.
    # A JSON dump at the end (finetune_quickstart prints its rows) is skipped too.
    lines = [ln.strip() for ln in out.splitlines() if ln.strip() and not POINTER.match(ln.strip())]
    lines = [ln for ln in lines if ln[0] not in '{}[]"']
    last = lines[-1] if lines else ""
    counts = [m.group(0) for m in map(COUNTS.search, err.splitlines()) if m]
    parts = [p for p in (counts[-1] if counts else "", last[:200]) if p]
    if not parts:
        tail = [ln.strip() for ln in err.splitlines() if ln.strip()]
        parts = [tail[-1][:200]] if tail else []
    return " | ".join(parts)


def _tutorial_hub(folder: str) -> str:
    """A small TinyStories stand-in and tokenizer in a hub cache (the tutorial names hub paths; offline here)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    sys.path.insert(0, ROOT)
    from tests.integration.test_marin_tutorial import _snapshot, _stories

    data = os.path.join(_snapshot(folder, "datasets", "roneneldan/TinyStories"), "data")
    os.makedirs(data, exist_ok=True)
    train, valid = _stories(3000, 0), _stories(100, 1)
    pq.write_table(pa.table({"text": train}), os.path.join(data, "train-00000-of-00001.parquet"))
    pq.write_table(pa.table({"text": valid}), os.path.join(data, "validation-00000-of-00001.parquet"))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        train,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok.save(os.path.join(_snapshot(folder, "models", "stanford-crfm/marin-tokenizer"), "tokenizer.json"))
    return folder


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prefix", default="/tmp/run_experiments", help="working folder (stores, logs)")
    p.add_argument("--only", action="append", help="run only this experiment (repeatable): " + ", ".join(ORDER))
    p.add_argument(
        "--quickstart_store",
        default=None,
        help="reuse this quickstart store (every step must be SUCCESS); it is copied to PREFIX/store first",
    )
    p.add_argument("--in_place", type=_truthy, default=False, help="use --quickstart_store itself, not a copy")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per experiment")
    p.add_argument("--fp8_run_only", default=None, help="--run_only REGEX for fp8_nano (default: all 10 runs)")
    p.add_argument(
        "--finetune_run_only", default=None, help="--run_only REGEX for finetune_quickstart (default: all steps)"
    )
    p.add_argument("--multihost_args", default="", help="extra arguments for tiny_multihost.py")
    args = p.parse_args(argv)

    names = [n for n in ORDER if not args.only or n in args.only or os.path.basename(n) in args.only]
    os.makedirs(args.prefix, exist_ok=True)
    log_dir = os.path.join(args.prefix, "logs")
    os.makedirs(log_dir, exist_ok=True)
    store = os.path.join(args.prefix, "store")

    if args.quickstart_store:
        statuses = _store_statuses(args.quickstart_store)
        ok = sum(s == "SUCCESS" for s in statuses.values())
        others = {k: v for k, v in statuses.items() if v != "SUCCESS"}
        print(f"quickstart store {args.quickstart_store}: {ok} SUCCESS, others {others or 'none'}", flush=True)
        if args.in_place:
            store = args.quickstart_store
        elif not os.path.exists(store):
            shutil.copytree(args.quickstart_store, store, symlinks=True)

    failures = 0
    for name in names:
        script = os.path.join(EXP, name + ".py")
        env = None
        cwd = ROOT
        how = "full run"
        if name in DRY_ONLY:
            argv_ = [script, "--prefix", os.path.join(args.prefix, name), "--dry_run", "true"]
            how = "dry run only: " + DRY_ONLY[name]
        elif name == "quickstart":
            argv_ = [script, "--prefix", store]
            how = "rerun on reused store" if args.quickstart_store else "full run"
            if args.quickstart_store:
                # Which of its steps would run: none, when the store is complete.
                rc, _, out, err = _run("quickstart-dry", [script, "--prefix", store, "--dry_run", "true"], 600, log_dir)
                to_run = [ln.split()[1] for ln in (out + err).splitlines() if re.match(r"\s+run\s", ln)]
                how += f" (dry run first: {len(to_run)} step(s) to run{': ' + ', '.join(to_run) if to_run else ''})"
        elif name == "finetune_quickstart":
            argv_ = [script, "--prefix", store]
            if args.finetune_run_only:
                argv_ += ["--run_only", args.finetune_run_only]
                how = f"--run_only '{args.finetune_run_only}' on the quickstart store"
            else:
                how = "full run on the quickstart store"
        elif name == "fp8_nano":
            argv_ = [script, "--prefix", store]
            if args.fp8_run_only:
                argv_ += ["--run_only", args.fp8_run_only]
                how = f"--run_only '{args.fp8_run_only}' on the quickstart store"
            else:
                how = "full run (10 runs) on the quickstart store"
        elif name == "tiny_multihost":
            argv_ = [script, "--prefix", os.path.join(args.prefix, "mh"), *args.multihost_args.split()]
            how = "full run, local Ray cluster (2 hosts x 2 CPU devices)" + (
                f" {args.multihost_args}" if args.multihost_args else ""
            )
        elif name == "tutorial/train_tiny_model_cpu":
            hub = _tutorial_hub(os.path.join(args.prefix, "hub"))
            env = dict(
                os.environ,
                HF_HUB_CACHE=hub,
                HF_HUB_OFFLINE="1",
                HF_DATASETS_OFFLINE="1",
                WANDB_MODE="offline",
                WANDB_DIR=args.prefix,
            )
            argv_ = [script, "--prefix", os.path.join(args.prefix, "tutorial"), "--backend", "local"]
            how = "full run, offline, on a TinyStories stand-in in a local hub cache"
        else:
            argv_ = [script, "--prefix", os.path.join(args.prefix, name)]
        rc, wall, out, err = _run(name, argv_, args.timeout, log_dir, env=env, cwd=cwd)
        if name == "tiny_multihost" and rc != 0 and "ray" in (err[-3000:]).lower():
            print(f"{name:<30} exit {rc!s:>7} {wall:8.1f} s  (first try; retrying once)", flush=True)
            rc, wall, out, err = _run(name, argv_, args.timeout, log_dir, env=env, cwd=cwd)
            how += "; second try"
        failures += rc != 0
        print(f"{name:<30} exit {rc!s:>7} {wall:8.1f} s  [{how}]  {_summary(out, err)}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
