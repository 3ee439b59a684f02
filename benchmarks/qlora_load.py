"""Load time and peak host memory of a QLoRA base: the whole-model loader against the streaming one.

For each model size a synthetic bf16 Llama checkpoint (safetensors, written tensor by tensor) is
loaded as a fine-tune's frozen QLoRA base on one CPU device, in a fresh process per load:

- whole: `load_base` (every tensor read and converted to fp32 in host memory, the whole model on
  the device) -> `quantize_params` -> `frozen_base` -> `device_put` into the step's shardings;
- stream: `open_base` (headers only) -> `load_frozen` (one ranged read per tensor, quantized on
  the device, placed into the shardings layer by layer).

Each child process reports its runtime baseline (resident memory after importing JAX and the
trainer and compiling one small quantization), its peak resident memory (`ru_maxrss`), the load's wall time
and a digest of the loaded bytes (the two loaders must agree). On a CPU the "device" is host
memory, so the peak counts the placed base too.

    python benchmarks/qlora_load.py                          # sizes 0.3b and 0.85b, 3 repeats
    python benchmarks/qlora_load.py --sizes 0.3b --repeats 1 --workdir /tmp/qlora_load

`--step` measures the quantize step as users run it instead: an experiment with one
`default_quantize_base` step, run by `executor_main --backend local` in a fresh process tree (the
driver and its step worker), the tree's summed resident memory (RSS of every process in it)
sampled every 50 ms. The baseline is the same step on a tiny 1-layer checkpoint (`RUNTIME`: the
runtime, the executor and the step's fixed costs, nothing of the model's size); the figure is the
peak over it, as a fraction of the bf16 checkpoint's bytes:

    python benchmarks/qlora_load.py --step --sizes 0.85b --repeats 3 --workdir /tmp/qlora_load
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = {  # name -> LlamaConfig fields
    "0.3b": dict(vocab_size=32000, hidden_dim=1024, intermediate_dim=2816, num_layers=8, num_heads=8, num_kv_heads=8),
    "0.85b": dict(
        vocab_size=32000, hidden_dim=2048, intermediate_dim=5632, num_layers=14, num_heads=16, num_kv_heads=16
    ),
}

RUNTIME = dict(vocab_size=256, hidden_dim=64, intermediate_dim=128, num_layers=1, num_heads=2, num_kv_heads=2)
"""The `--step` baseline's checkpoint: the step's runtime with nothing of the model's size."""


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(loader: str, path: str) -> dict:
    """One load in this (fresh) process; returns the measurements."""
    import jax
    import jax.numpy as jnp

    from marin_lab.models.llama import init_params
    from marin_lab.training.base_model import QuantConfig, load_base, quantize_one, quantize_params
    from marin_lab.training.base_stream import load_frozen, open_base
    from marin_lab.training.finetune_state import frozen_base, frozen_shardings
    from marin_lab.training.mesh import MeshConfig

    # The runtime's baseline: JAX and the trainer imported, and XLA's compiler initialised by one
    # small quantization (its first compile grows the heap by ~45 MiB, whatever the model size).
    quantize_one(64, True)(jnp.zeros((256, 256), jnp.bfloat16)).packed.block_until_ready()
    baseline = _rss()
    mesh = MeshConfig(data=1, fsdp=-1).build()
    quant = QuantConfig()
    started = time.perf_counter()
    source = open_base(path)
    model = source.model
    params_abs = jax.eval_shape(
        lambda p: quantize_params(p, quant), jax.eval_shape(lambda: init_params(model, jax.random.key(0)))
    )
    frozen_abs = jax.eval_shape(lambda p: frozen_base(p, "qlora", "bfloat16", False), params_abs)
    frozen_sh = frozen_shardings(frozen_abs, mesh, "fsdp")
    if loader == "whole":
        _, params, _ = load_base(path)
        params = quantize_params(params, quant)
        frozen = jax.device_put(frozen_base(params, "qlora", "bfloat16", False), frozen_sh)
        del params
    else:
        frozen = load_frozen(source, frozen_abs, frozen_sh, quant)
    leaves = jax.tree_util.tree_leaves(frozen)
    jax.block_until_ready(leaves)
    seconds = time.perf_counter() - started
    digest = hashlib.sha256()
    for leaf in leaves:
        digest.update(bytes(jax.device_get(leaf).tobytes()))
    return {
        "loader": loader,
        "seconds": seconds,
        "baseline_bytes": baseline,
        "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "placed_bytes": sum(x.nbytes for x in leaves),
        "digest": digest.hexdigest()[:16],
    }


def _run_child(loader: str, path: str) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", loader, "--path", path],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode:
        raise RuntimeError(f"{loader} load of {path} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


_STEP_SCRIPT = """
import sys
from experiments.finetune_defaults import default_quantize_base
from marin_lab.execution import executor_main

if __name__ == "__main__":
    executor_main(steps=[default_quantize_base("bench", sys.argv.pop(1))])
"""


def _tree_rss(root: int) -> int:
    """Summed RSS of process `root` and all its descendants (0 when it is gone)."""
    import psutil

    try:
        procs = [psutil.Process(root)]
        procs += procs[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += p.memory_info().rss
    return total


def run_step(checkpoint: str, workdir: str, interval_s: float = 0.05) -> dict:
    """The quantize step through the executor (local backend) in a fresh process tree; its peak summed RSS."""
    script = os.path.join(workdir, "quantize_step.py")
    with open(script, "w") as f:
        f.write(_STEP_SCRIPT)
    prefix = tempfile.mkdtemp(prefix="store_", dir=workdir)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]),
    }
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, script, checkpoint, "--prefix", prefix, "--backend", "local"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=repo,
    )
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        time.sleep(interval_s)
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    if proc.returncode:
        raise RuntimeError(f"quantize step on {checkpoint} failed ({proc.returncode}): {out[-3000:]}")
    import shutil

    shutil.rmtree(prefix, ignore_errors=True)
    return {"peak_bytes": peak, "seconds": time.perf_counter() - started}


def main_step(args: argparse.Namespace) -> None:
    from marin_lab.models.llama import LlamaConfig
    from marin_lab.testing.hf_synthetic import write_synthetic_llama

    gib = 2**30
    workdir = args.workdir or tempfile.mkdtemp(prefix="qlora_step_")
    rows = []
    for size in args.sizes.split(","):
        paths = {}
        for kind, shape in (("model", SIZES[size]), ("baseline", RUNTIME)):
            paths[kind] = os.path.join(workdir, size if kind == "model" else "runtime-1layer")
            if not os.path.exists(os.path.join(paths[kind], "config.json")):
                write_synthetic_llama(paths[kind], LlamaConfig(max_seq_len=2048, **shape), shards=2)
        ckpt_bytes = sum(
            os.path.getsize(os.path.join(paths["model"], f))
            for f in os.listdir(paths["model"])
            if f.endswith(".safetensors")
        )
        runs: dict[str, list[dict]] = {"baseline": [], "model": []}
        for _ in range(args.repeats):
            for kind in runs:
                runs[kind].append(run_step(paths[kind], workdir))
                print(
                    f"  {size} {kind}: {runs[kind][-1]}  load {Path('/proc/loadavg').read_text().split()[0]}",
                    file=sys.stderr,
                )
        base = statistics.median(r["peak_bytes"] for r in runs["baseline"])
        peak = statistics.median(r["peak_bytes"] for r in runs["model"])
        rows.append(
            (
                size,
                ckpt_bytes,
                base,
                peak,
                statistics.median(r["seconds"] for r in runs["model"]),
                [r["peak_bytes"] for r in runs["model"]],
            )
        )
    print(f"\nload average at the end: {Path('/proc/loadavg').read_text().strip()}; repeats: {args.repeats}")
    print(
        "| model | checkpoint (bf16) | baseline peak (tiny, 1 layer) | step peak | over baseline "
        "| x checkpoint | step s |"
    )
    print("|---|---|---|---|---|---|---|")
    for size, ckpt_bytes, base, peak, seconds, peaks in rows:
        print(
            f"| {size} | {ckpt_bytes / gib:.2f} GiB | {base / gib:.2f} GiB | {peak / gib:.2f} GiB "
            f"({', '.join(f'{p / gib:.2f}' for p in peaks)}) | {(peak - base) / gib:.2f} GiB | "
            f"{(peak - base) / ckpt_bytes:.2f} | {seconds:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="0.3b,0.85b")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=None, help="where the synthetic checkpoints go (default: a temp dir)")
    parser.add_argument(
        "--step",
        action="store_true",
        help="measure the quantize step through executor_main --backend local (process tree RSS)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.path)))
        return
    if args.step:
        main_step(args)
        return

    from marin_lab.models.llama import LlamaConfig
    from marin_lab.testing.hf_synthetic import write_synthetic_llama

    gib = 2**30
    workdir = args.workdir or tempfile.mkdtemp(prefix="qlora_load_")
    rows = []
    for size in args.sizes.split(","):
        path = os.path.join(workdir, size)
        model = LlamaConfig(max_seq_len=2048, **SIZES[size])
        if not os.path.exists(os.path.join(path, "config.json")):
            write_synthetic_llama(path, model, shards=2)
        ckpt_bytes = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".safetensors"))
        results = {"whole": [], "stream": []}
        for _ in range(args.repeats):
            for loader in results:  # interleaved, so a change in machine load hits both alike
                results[loader].append(_run_child(loader, path))
                print(
                    f"  {size} {loader}: {results[loader][-1]}  load {Path('/proc/loadavg').read_text().split()[0]}",
                    file=sys.stderr,
                )
        assert results["whole"][0]["digest"] == results["stream"][0]["digest"], "loaders disagree"
        summary = {}
        for loader, runs in results.items():
            over = statistics.median(r["peak_bytes"] - r["baseline_bytes"] for r in runs)
            summary[loader] = {
                "seconds": statistics.median(r["seconds"] for r in runs),
                "peak_over_baseline": over,
                "baseline": statistics.median(r["baseline_bytes"] for r in runs),
                "placed": runs[0]["placed_bytes"],
            }
        rows.append((size, model.num_params(), ckpt_bytes, summary))

    print(f"\nload average at the end: {Path('/proc/loadavg').read_text().strip()}; repeats: {args.repeats}")
    print(
        "| model | params | checkpoint (bf16) | loader | load s (median) | peak RSS over baseline | x checkpoint | "
        "baseline RSS | placed base |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for size, params, ckpt_bytes, summary in rows:
        for loader, s in summary.items():
            print(
                f"| {size} | {params / 1e6:.0f}M | {ckpt_bytes / gib:.2f} GiB | {loader} | {s['seconds']:.1f} | "
                f"{s['peak_over_baseline'] / gib:.2f} GiB | {s['peak_over_baseline'] / ckpt_bytes:.2f} | "
                f"{s['baseline'] / gib:.2f} GiB | {s['placed'] / gib:.2f} GiB |"
            )
        w, st = summary["whole"], summary["stream"]
        print(
            f"| {size} | | | whole / stream | {w['seconds'] / st['seconds']:.2f}x time | "
            f"{w['peak_over_baseline'] / st['peak_over_baseline']:.2f}x memory | | | |"
        )


if __name__ == "__main__":
    main()
