"""Training throughput: our JAX train step vs the same Llama architecture in PyTorch.

The peer is `transformers.LlamaForCausalLM` (torch 2.13) with `torch.optim.AdamW`, same shape,
same batch, same sequence length, fp32 on CPU. Both sides are built and warmed up first
(`--warmup` untimed steps; compilation for JAX); then each repeat times `--steps` steps of one side
and then of the other, the order alternating between repeats, so both see the same machine
state. The median step time over `--repeats` repeats is reported, with the ratio ours / theirs in
tokens per second (> 1: we are faster) and the ratio of every repeat pair. Threads: XLA's CPU
client and PyTorch (intra-op) each use every core (`torch.set_num_threads(os.cpu_count())`); the
script prints both settings. Under other load both sides lose, PyTorch's spin-waiting OpenMP
threads more, which is why ratios measured under load overstate ours.

    python benchmarks/train_throughput.py                           # CPU: nano and 100m
    python benchmarks/train_throughput.py --models llama_1b --device gpu --batch 8 --seq 2048
        # on a GPU: bf16 compute, cuDNN attention; prints MFU against the device's peak

Precision policies instead of the PyTorch peer: `--precisions bf16,fp8` times our own
step under each policy (bf16 compute; 'fp8' adds float8 weight matmuls, marin_lab.precision),
alternating the sides in the same way, and reads each side's compiled HLO for float8 GEMMs:
on Hopper GPUs XLA can turn the fp8 path's "upcast, times scale, dot" into cuBLASLt custom calls
whose target names f8 (the counts say whether it did; docs/benchmarks.md has what we saw); on
CPU the float8 matmuls run emulated and the count is 0. MFU is against the device's
dense *bf16* peak for every side (fp8's own peak is twice that on H100).

    python benchmarks/train_throughput.py --models llama_1b --device gpu --batch 8 --seq 2048 \
        --precisions bf16,fp8 --no-torch --remat --out results.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import time

import jax  # noqa: E402

jax.config.update("jax_enable_x64", False)

import numpy as np  # noqa: E402

from experiments.models import MODELS  # noqa: E402
from marin_lab.models.llama import LlamaConfig  # noqa: E402
from marin_lab.precision.policy import PrecisionConfig  # noqa: E402
from marin_lab.training.mesh import MeshConfig  # noqa: E402
from marin_lab.training.metrics import device_peak_flops  # noqa: E402
from marin_lab.training.optimizer import OptimizerConfig  # noqa: E402
from marin_lab.training.train_step import StepSettings, make_init_fn, make_train_step, state_shardings  # noqa: E402

POLICIES = {
    "bf16": PrecisionConfig(),
    "fp8": PrecisionConfig(matmul="fp8"),
    "fp8_delayed": PrecisionConfig(matmul="fp8_delayed"),
    "scalify": PrecisionConfig(matmul="scalify"),
    "scalify_fp16": PrecisionConfig(
        matmul="scalify", master_weights="float16_scaled", optimizer_state="float16_scaled"
    ),
}
"""`--precisions` sides: each runs with fp32 parameters (scalify_fp16: float16 masters) and bf16
compute, except the scalify policies: float16 data with propagated scales (COMPUTE)."""
COMPUTE = {"scalify": "float16", "scalify_fp16": "float16"}


def hlo_float8_counts(hlo: str) -> dict[str, int]:
    """Float8 work in compiled HLO text: GEMM custom calls naming f8, and dots with f8 operands."""
    custom = [line for line in hlo.splitlines() if "custom-call(" in line or "custom_call_target" in line]
    return {
        "f8_gemm_custom_calls": sum(1 for line in custom if re.search(r'custom_call_target="[^"]*f8', line)),
        "gemm_custom_calls": sum(1 for line in custom if re.search(r'custom_call_target="__cublas', line)),
        "f8_dots": sum(1 for line in hlo.splitlines() if re.search(r"\bdot\(f8e", line)),
        # Triton GEMM fusions: "__triton_gemm" in older XLA, "__triton_nested_gemm_fusion" in newer.
        "triton_gemm_fusions": len(re.findall(r'"kind":"__triton(?:_nested)?_gemm', hlo)),
        "f8_converts": len(re.findall(r"f8e4m3fn\[[^\]]*\][^=\n]* convert\(|f8e5m2\[[^\]]*\][^=\n]* convert\(", hlo)),
    }


def build_ours(
    model: LlamaConfig,
    batch: int,
    seq: int,
    warmup: int,
    compute_dtype: str,
    attention_impl: str | None,
    remat: bool,
    precision: PrecisionConfig | None = None,
    report: dict | None = None,
):
    """A function running `n` timed train steps of ours (compiled and warmed up already).

    With `report`, the compile time and the compiled HLO's float8 counts are written into it.
    """
    precision = precision or PrecisionConfig()
    precision.validate(model.param_shapes())
    mesh_cfg = MeshConfig(data=1, fsdp=-1, model=1)
    mesh = mesh_cfg.build()
    opt_cfg = OptimizerConfig(learning_rate=1e-4, warmup=0)
    opt = opt_cfg.build(moments=precision.optimizer_state)
    shard = state_shardings(model, opt, mesh, "fsdp", np.float32, precision)
    state = make_init_fn(model, opt, shard, np.float32, precision)(jax.random.key(0))
    settings = StepSettings(
        compute_dtype=compute_dtype, attention_impl=attention_impl, gradient_checkpointing=remat, precision=precision
    )
    jitted = make_train_step(model, opt, opt_cfg.lr_schedule(10_000), settings, mesh, shard)
    tokens = jax.numpy.asarray(np.random.default_rng(0).integers(0, model.vocab_size, (batch, seq + 1)), np.int32)
    t0 = time.perf_counter()
    step = jitted.lower(state, tokens).compile()  # the program we time is the one we inspect
    if report is not None:
        report["compile_s"] = round(time.perf_counter() - t0, 1)
        hlo = step.as_text()
        report["hlo"] = hlo
        report.update(hlo_float8_counts(hlo))
        report["custom_call_targets"] = sorted(set(re.findall(r'custom_call_target="([^"]+)"', hlo)))
        report["f8_gemm_example"] = next(
            (line.strip()[:400] for line in hlo.splitlines() if re.search(r'custom_call_target="[^"]*f8', line)), None
        )
    holder = {"state": state}

    def run(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            holder["state"], out = step(holder["state"], tokens)
        jax.block_until_ready(out)
        return (time.perf_counter() - t0) / n

    run(warmup)
    return run


def build_torch(model: LlamaConfig, batch: int, seq: int, warmup: int, device: str):
    """A function running `n` timed train steps of the PyTorch peer (warmed up already)."""
    import torch
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM

    from marin_lab.training.hf_export import hf_config

    torch.manual_seed(0)
    cfg = HFConfig(**{k: v for k, v in hf_config(model).items() if k not in ("architectures", "model_type")})
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    net = LlamaForCausalLM(cfg).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, weight_decay=0.1)
    data = torch.as_tensor(np.random.default_rng(0).integers(0, model.vocab_size, (batch, seq + 1)), device=device)
    inputs, labels = data[:, :-1], data[:, 1:]

    def one() -> None:
        with torch.autocast(device_type=device, dtype=dtype, enabled=device == "cuda"):
            logits = net(inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def run(n: int) -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            one()
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n

    run(warmup)
    return run


def _attention(requested: str, gpu: bool) -> str | None:
    if requested == "auto":
        return "cudnn" if gpu else None
    return None if requested == "einsum" else requested


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="lab_nano,llama_100m")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch peer")
    p.add_argument("--remat", action="store_true", help="gradient checkpointing (ours)")
    p.add_argument(
        "--attention",
        choices=("auto", "cudnn", "xla", "einsum"),
        default="auto",
        help="our attention: auto is cuDNN's fused kernel on a GPU, einsum on a CPU; scalify interprets "
        "plain ops only, so its sides need xla or einsum",
    )
    p.add_argument(
        "--precisions", default="", help=f"compare our step under these policies ({','.join(POLICIES)}), bf16 compute"
    )
    p.add_argument("--out", default="", help="also write the results as JSON here")
    p.add_argument("--hlo-dir", default="", help="also write each side's compiled HLO text here")
    args = p.parse_args()
    if args.precisions:
        precision_main(args)
        return

    gpu = args.device == "gpu"
    compute_dtype = "bfloat16" if gpu else "float32"
    attention = _attention(args.attention, gpu)
    devices = jax.devices()
    peak = device_peak_flops(devices[0].device_kind)
    threads = ""
    if not args.no_torch:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        threads = f"torch intra-op threads {torch.get_num_threads()}, "
    print(
        f"# devices: {len(devices)} x {devices[0].device_kind}; jax {jax.__version__}; "
        f"compute {compute_dtype}; batch {args.batch} x seq {args.seq}; {threads}"
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; median of {args.repeats} repeats x {args.steps} steps, "
        f"sides alternating; 1-min load average {os.getloadavg()[0]:.1f} at the start"
    )
    header = (
        f"{'model':<12} {'params':>8} {'ours tok/s':>11} {'torch tok/s':>12} {'ratio':>6} "
        f"{'ours MFU':>9} {'torch MFU':>9}  ratio per repeat"
    )
    print(header)
    print("-" * len(header))
    for name in args.models.split(","):
        model = dataclasses.replace(MODELS[name], max_seq_len=max(MODELS[name].max_seq_len, args.seq))
        tokens = args.batch * args.seq
        sides = {"ours": build_ours(model, args.batch, args.seq, args.warmup, compute_dtype, attention, args.remat)}
        if not args.no_torch:
            sides["torch"] = build_torch(model, args.batch, args.seq, args.warmup, "cuda" if gpu else "cpu")
        times: dict[str, list[float]] = {k: [] for k in sides}
        order = list(sides)
        for rep in range(args.repeats):
            for side in order if rep % 2 == 0 else order[::-1]:
                times[side].append(sides[side](args.steps))
        ours = statistics.median(times["ours"])
        theirs = statistics.median(times["torch"]) if "torch" in times else None
        pairs = " ".join(f"{t / o:.2f}" for o, t in zip(times["ours"], times.get("torch", []), strict=False))
        flops = model.flops_per_token(args.seq) * tokens
        ours_mfu = f"{flops / ours / (peak * len(devices)):.1%}" if peak else "-"
        theirs_mfu = f"{flops / theirs / (peak * len(devices)):.1%}" if peak and theirs else "-"
        print(
            f"{name:<12} {model.num_params() / 1e6:>7.1f}M {tokens / ours:>11.0f} "
            f"{(tokens / theirs) if theirs else float('nan'):>12.0f} "
            f"{(theirs / ours) if theirs else float('nan'):>6.2f} {ours_mfu:>9} {theirs_mfu:>9}  {pairs}"
        )
    print(f"# 1-min load average {os.getloadavg()[0]:.1f} at the end")


def precision_main(args: argparse.Namespace) -> None:
    """Our step under several precision policies, sides alternating; float8 GEMMs in the HLO."""
    names = args.precisions.split(",")
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise SystemExit(f"--precisions: {unknown} not among {sorted(POLICIES)}")
    gpu = args.device == "gpu"
    attention = _attention(args.attention, gpu)
    devices = jax.devices()
    peak = device_peak_flops(devices[0].device_kind)
    results: dict = {
        "devices": f"{len(devices)} x {devices[0].device_kind}",
        "jax": jax.__version__,
        "batch": args.batch,
        "seq": args.seq,
        "steps": args.steps,
        "repeats": args.repeats,
        "remat": args.remat,
        "attention": attention or "einsum",
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
        "load_start": os.getloadavg()[0],
        "models": {},
    }
    print(
        f"# devices: {results['devices']}; jax {jax.__version__}; compute bfloat16 (scalify: float16 data, "
        f"scaled); batch {args.batch} x seq {args.seq}; remat {args.remat}; attention {results['attention']}; "
        f"XLA_FLAGS={results['XLA_FLAGS']!r}; "
        f"median of {args.repeats} repeats x {args.steps} steps, "
        f"sides alternating; 1-min load average {results['load_start']:.1f} at the start",
        flush=True,
    )
    for name in args.models.split(","):
        model = dataclasses.replace(MODELS[name], max_seq_len=max(MODELS[name].max_seq_len, args.seq))
        tokens = args.batch * args.seq
        reports = {n: {} for n in names}
        sides = {
            n: build_ours(
                model,
                args.batch,
                args.seq,
                args.warmup,
                COMPUTE.get(n, "bfloat16"),
                attention,
                args.remat,
                POLICIES[n],
                reports[n],
            )
            for n in names
        }
        if args.hlo_dir:
            for n in names:
                with open(os.path.join(args.hlo_dir, f"{name}_{n}.hlo.txt"), "w") as f:
                    f.write(reports[n].pop("hlo"))
        for r in reports.values():
            r.pop("hlo", None)
        times: dict[str, list[float]] = {n: [] for n in names}
        for rep in range(args.repeats):
            for side in names if rep % 2 == 0 else names[::-1]:
                times[side].append(sides[side](args.steps))
        flops = model.flops_per_token(args.seq) * tokens
        base = statistics.median(times[names[0]])
        print(
            f"{'model':<10} {'side':<12} {'tok/s':>9} {'MFU(bf16 pk)':>12} {'vs ' + names[0]:>8} "
            f"{'f8 GEMM calls':>13} {'GEMM calls':>10} {'f8 dots':>7} {'triton':>6} {'f8 converts':>11} "
            f"{'compile s':>9}"
        )
        for n in names:
            med = statistics.median(times[n])
            r = reports[n]
            r.update(
                {
                    "step_s": times[n],
                    "median_step_s": med,
                    "tokens_per_s": tokens / med,
                    "mfu_bf16_peak": flops / med / (peak * len(devices)) if peak else None,
                    "speedup_vs_first": base / med,
                }
            )
            mfu_text = f"{r['mfu_bf16_peak']:.1%}" if peak else "-"
            print(
                f"{name:<10} {n:<12} {tokens / med:>9.0f} {mfu_text:>12} {base / med:>8.2f} "
                f"{r['f8_gemm_custom_calls']:>13} {r['gemm_custom_calls']:>10} {r['f8_dots']:>7} "
                f"{r['triton_gemm_fusions']:>6} {r['f8_converts']:>11} {r['compile_s']:>9}",
                flush=True,
            )
        results["models"][name] = {"params": model.num_params(), "flops_per_step": flops, "sides": reports}
    results["load_end"] = os.getloadavg()[0]
    print(f"# 1-min load average {results['load_end']:.1f} at the end")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
