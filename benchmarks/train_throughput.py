"""Training throughput: our JAX train step vs the same Llama architecture in PyTorch.

The peer is `transformers.LlamaForCausalLM` (torch 2.13) with `torch.optim.AdamW`, same shape,
same batch, same sequence length, fp32 on CPU. Each side runs `--steps` timed steps after
`--warmup` untimed ones (compilation for JAX); the median step time of `--repeats` repeats is
reported, and the ratio is ours / theirs in tokens per second (> 1: we are faster).

    python benchmarks/train_throughput.py                           # CPU: nano and 100m
    python benchmarks/train_throughput.py --models llama_1b --device gpu --batch 8 --seq 2048
        # on a GPU: bf16 compute, cuDNN attention; prints MFU against the device's peak
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time


import jax  # noqa: E402

jax.config.update("jax_enable_x64", False)

import numpy as np  # noqa: E402

from marin_lab.training.mesh import MeshConfig  # noqa: E402
from marin_lab.training.metrics import device_peak_flops  # noqa: E402
from marin_lab.training.model import LlamaConfig  # noqa: E402
from marin_lab.training.optimizer import OptimizerConfig  # noqa: E402
from marin_lab.training.train_step import StepSettings, make_init_fn, make_train_step, state_shardings  # noqa: E402
from experiments.models import MODELS  # noqa: E402


def bench_ours(model: LlamaConfig, batch: int, seq: int, steps: int, warmup: int, repeats: int,
               compute_dtype: str, attention_impl: str | None, remat: bool) -> list[float]:
    mesh_cfg = MeshConfig(data=1, fsdp=-1, model=1)
    mesh = mesh_cfg.build()
    opt_cfg = OptimizerConfig(learning_rate=1e-4, warmup=0)
    opt = opt_cfg.build()
    shard = state_shardings(model, opt, mesh, "fsdp", np.float32)
    state = make_init_fn(model, opt, shard, np.float32)(jax.random.key(0))
    settings = StepSettings(compute_dtype=compute_dtype, attention_impl=attention_impl,
                            gradient_checkpointing=remat)
    step = make_train_step(model, opt, opt_cfg.lr_schedule(10_000), settings, mesh, shard)
    tokens = jax.numpy.asarray(np.random.default_rng(0).integers(0, model.vocab_size, (batch, seq + 1)), np.int32)
    for _ in range(warmup):
        state, out = step(state, tokens)
    jax.block_until_ready(out)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            state, out = step(state, tokens)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / steps)
    return times


def bench_torch(model: LlamaConfig, batch: int, seq: int, steps: int, warmup: int, repeats: int,
                device: str) -> list[float]:
    import torch
    from transformers import LlamaConfig as HFConfig, LlamaForCausalLM

    from marin_lab.training.hf_export import hf_config

    torch.manual_seed(0)
    cfg = HFConfig(**{k: v for k, v in hf_config(model).items() if k not in ("architectures", "model_type")})
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    net = LlamaForCausalLM(cfg).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, weight_decay=0.1)
    data = torch.as_tensor(np.random.default_rng(0).integers(0, model.vocab_size, (batch, seq + 1)),
                           device=device)
    inputs, labels = data[:, :-1], data[:, 1:]

    def one() -> None:
        with torch.autocast(device_type=device, dtype=dtype, enabled=device == "cuda"):
            logits = net(inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        one()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            one()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / steps)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="llama_nano,llama_100m")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch peer")
    p.add_argument("--remat", action="store_true", help="gradient checkpointing (ours)")
    args = p.parse_args()

    gpu = args.device == "gpu"
    compute_dtype = "bfloat16" if gpu else "float32"
    attention = "cudnn" if gpu else None
    devices = jax.devices()
    peak = device_peak_flops(devices[0].device_kind)
    print(f"# devices: {len(devices)} x {devices[0].device_kind}; jax {jax.__version__}; "
          f"compute {compute_dtype}; batch {args.batch} x seq {args.seq}; "
          f"median of {args.repeats} repeats x {args.steps} steps")
    header = f"{'model':<12} {'params':>8} {'ours tok/s':>11} {'torch tok/s':>12} {'ratio':>6} {'ours MFU':>9} {'torch MFU':>9}"
    print(header)
    print("-" * len(header))
    for name in args.models.split(","):
        model = dataclasses.replace(MODELS[name], max_seq_len=max(MODELS[name].max_seq_len, args.seq))
        tokens = args.batch * args.seq
        ours = statistics.median(bench_ours(model, args.batch, args.seq, args.steps, args.warmup,
                                            args.repeats, compute_dtype, attention, args.remat))
        theirs = None
        if not args.no_torch:
            theirs = statistics.median(bench_torch(model, args.batch, args.seq, args.steps, args.warmup,
                                                   args.repeats, "cuda" if gpu else "cpu"))
        flops = model.flops_per_token(args.seq) * tokens
        ours_mfu = f"{flops / ours / (peak * len(devices)):.1%}" if peak else "-"
        theirs_mfu = f"{flops / theirs / (peak * len(devices)):.1%}" if peak and theirs else "-"
        print(f"{name:<12} {model.num_params() / 1e6:>7.1f}M {tokens / ours:>11.0f} "
              f"{(tokens / theirs) if theirs else float('nan'):>12.0f} "
              f"{(theirs / ours) if theirs else float('nan'):>6.2f} {ours_mfu:>9} {theirs_mfu:>9}")


if __name__ == "__main__":
    main()
