"""Peak accelerator memory of one QLoRA step, and tokens/s of LoRA vs QLoRA, on a Llama-2-7B shape.

Question: does our QLoRA step fit where fsdp_qlora's does (Llama-2-7B, batch 1, context 2048,
gradient checkpointing, LoRA r=64 on all seven projections: 5.21 GiB per GPU on 2 GPUs, their
benchmarks_03_2024.md), and what does NF4 cost in speed against a bf16 base (LoRA)?

Weights are random and built in place, leaf by leaf, in their stored form (NF4 bytes and codes
for QLoRA, bf16 for LoRA): no full-precision copy of the model ever exists, so the process's peak
is the step's. Each mode's peak is measured in a fresh subprocess (`peak_bytes_in_use` of the
device; on CPU, which reports none, the compiled step's `memory_analysis()` instead) and set
beside our planner's figure for the same settings on one device. Speed: both modes' steps in
one process, alternating LoRA and QLoRA step by step, median step time -> tokens/s, and the ratio.

    python benchmarks/qlora_memory.py --shape 7b --out benchmarks/results/qlora_memory_h100.json   # GPU
    python benchmarks/qlora_memory.py --shape tiny --steps 3                                       # CPU check
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPES = {
    "7b": dict(vocab_size=32000, hidden_dim=4096, intermediate_dim=11008, num_layers=32, num_heads=32,
               num_kv_heads=32, max_seq_len=4096, rope_theta=10000.0, norm_eps=1e-5),
    "tiny": dict(vocab_size=512, hidden_dim=128, intermediate_dim=384, num_layers=2, num_heads=4,
                 num_kv_heads=4, max_seq_len=512, rope_theta=10000.0, norm_eps=1e-5),
}
FSDP_QLORA_7B_GIB = 5.21  # per GPU, 2 GPUs, bs 1, ctx 2048 (Answer.AI fsdp_qlora benchmarks_03_2024.md)
GIB = 2**30


def _setup(shape: str, mode: str, seq_len: int, attention: str | None):
    """(step, state, frozen, tokens, mask, plan settings) with random weights in their stored form."""
    import jax
    import jax.numpy as jnp

    from marin_lab.peft.lora import LoraConfig
    from marin_lab.training.base_model import QuantConfig, quantize_params
    from marin_lab.training.finetune_state import (StepPlan, compile_step, frozen_base, frozen_shardings,
                                                   init_trainable, optimizer_shardings, trainable_shardings)
    from marin_lab.training.mesh import MeshConfig
    from marin_lab.training.model import LlamaConfig, init_params
    from marin_lab.training.optimizer import OptimizerConfig
    from jax.sharding import NamedSharding, PartitionSpec as P

    model = LlamaConfig(**SHAPES[shape])
    lora = LoraConfig(rank=64 if shape == "7b" else 8, alpha=16.0, dropout=0.1)  # fsdp_qlora's defaults
    plan = StepPlan(mode, model, lora, "bfloat16", True, False, 0, attention)
    mesh = MeshConfig(data=1, fsdp=1).build()
    abstract = jax.eval_shape(lambda: init_params(model, jax.random.key(0), jnp.bfloat16))
    if mode == "qlora":
        abstract = jax.eval_shape(lambda p: quantize_params(p, QuantConfig()), abstract)
    frozen_abs = jax.eval_shape(lambda p: frozen_base(p, mode, "bfloat16", False), abstract)
    frozen_sh = frozen_shardings(frozen_abs, mesh, "fsdp")

    leaves, treedef = jax.tree_util.tree_flatten(frozen_abs)
    shardings = jax.tree_util.tree_leaves(frozen_sh, is_leaf=lambda s: isinstance(s, NamedSharding))
    values = []
    for i, (leaf, sh) in enumerate(zip(leaves, shardings)):
        key = jax.random.key(i)
        if leaf.dtype == jnp.uint8:  # NF4 level pairs or absmax codes: any byte is a valid weight
            fn = lambda k, s=leaf.shape: jax.random.bits(k, s, jnp.uint8)
        elif leaf.dtype == jnp.float32:  # second-level absmax scales and offsets (the rest is bf16)
            fn = lambda k, s=leaf.shape: jax.random.uniform(k, s, jnp.float32, 0.01, 0.03)
        else:
            fn = lambda k, s=leaf.shape, d=leaf.dtype: (0.02 * jax.random.normal(k, s)).astype(d)
        values.append(jax.jit(fn, out_shardings=sh)(key))
    frozen = jax.tree_util.tree_unflatten(treedef, values)

    optimizer_config = OptimizerConfig(learning_rate=2e-4, weight_decay=0.0, warmup=0, schedule="constant")
    optimizer = optimizer_config.build()
    trainable_abs = jax.eval_shape(lambda: init_trainable(plan, None, jax.random.key(0), jnp.float32))
    train_sh = trainable_shardings(trainable_abs, mode, mesh, "fsdp")
    opt_sh = optimizer_shardings(jax.eval_shape(optimizer.init, trainable_abs), train_sh, trainable_abs, mesh, False)
    state_sh = {"trainable": train_sh, "opt_state": opt_sh, "step": NamedSharding(mesh, P())}
    trainable = jax.jit(lambda: init_trainable(plan, None, jax.random.key(1), jnp.float32), out_shardings=train_sh)()
    state = {"trainable": trainable, "opt_state": jax.jit(optimizer.init, out_shardings=opt_sh)(trainable),
             "step": jnp.zeros((), jnp.int32)}
    step = compile_step(plan, optimizer, optimizer_config.lr_schedule(1000), mesh, state_sh, frozen_sh)
    tokens = jax.random.randint(jax.random.key(7), (1, seq_len + 1), 0, model.vocab_size)
    mask = jnp.ones_like(tokens)
    settings = dict(model=model, lora=lora, attention=attention)
    return step, state, frozen, tokens, mask, settings


def _attention(requested: str) -> str | None:
    import jax

    if requested == "auto":
        return "cudnn" if jax.default_backend() == "gpu" else None
    return None if requested == "einsum" else requested


def child_memory(shape: str, mode: str, seq_len: int, steps: int, attention: str) -> dict:
    """One mode in a fresh process: the device's peak after `steps` steps, and the planner's figure."""
    import jax

    from marin_lab.training.memory_plan import plan_memory

    attn = _attention(attention)
    step, state, frozen, tokens, mask, s = _setup(shape, mode, seq_len, attn)
    analysis = step.lower(state, frozen, tokens, mask).compile().memory_analysis()
    for _ in range(steps):
        state, out = step(state, frozen, tokens, mask)
    loss = float(jax.device_get(out["loss"]))
    stats = jax.devices()[0].memory_stats() or {}
    plan = plan_memory(s["model"], mode=mode, num_devices=1, batch_size=1, seq_len=seq_len, lora=s["lora"],
                       gradient_checkpointing=True, attention_impl=attn)
    compiled = {k: int(getattr(analysis, k)) for k in ("argument_size_in_bytes", "output_size_in_bytes",
                                                        "temp_size_in_bytes", "alias_size_in_bytes")}
    return {"mode": mode, "loss": loss, "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
            "bytes_in_use": stats.get("bytes_in_use"), "compiled": compiled,
            "compiled_total": compiled["argument_size_in_bytes"] + compiled["output_size_in_bytes"]
            + compiled["temp_size_in_bytes"] - compiled["alias_size_in_bytes"],
            "planned_bytes": plan.device_total, "plan": plan.device, "attention": attn}


def speed(shape: str, seq_len: int, steps: int, attention: str) -> dict:
    """LoRA and QLoRA steps alternating in one process: median seconds per step and tokens/s."""
    import jax

    attn = _attention(attention)
    sides = {mode: list(_setup(shape, mode, seq_len, attn)[:5]) for mode in ("lora", "qlora")}
    times: dict[str, list[float]] = {mode: [] for mode in sides}
    for i in range(steps + 2):
        for mode, side in sides.items():
            step, state, frozen, tokens, mask = side
            t0 = time.perf_counter()
            state, out = step(state, frozen, tokens, mask)
            jax.block_until_ready(out["loss"])
            if i >= 2:  # the first two: compilation and warm-up
                times[mode].append(time.perf_counter() - t0)
            side[1] = state
    med = {m: statistics.median(t) for m, t in times.items()}
    return {"median_step_s": med, "tokens_per_s": {m: seq_len / t for m, t in med.items()},
            "qlora_over_lora_tokens_per_s": med["lora"] / med["qlora"], "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="7b")
    ap.add_argument("--seq_len", type=int, default=None, help="default: 2048 (7b), 128 (tiny)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per side")
    ap.add_argument("--attention", default="auto", help="auto (cudnn on GPUs), einsum, xla or cudnn")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", choices=["lora", "qlora"], default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    seq_len = args.seq_len or (2048 if args.shape == "7b" else 128)
    if args.child:
        print(json.dumps(child_memory(args.shape, args.child, seq_len, 2, args.attention)))
        return

    import jax

    result = {"shape": args.shape, "seq_len": seq_len, "batch_size": 1, "jax": jax.__version__,
              "device": str(jax.devices()[0].device_kind), "backend": jax.default_backend(),
              "command": " ".join([os.path.basename(sys.executable), *sys.argv])}
    # Children allocate on demand, so the allocator's peak is what the step needed.
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    attention = args.attention
    for mode in ("qlora", "lora"):
        print(f"measuring {mode} memory in a fresh process ...", file=sys.stderr, flush=True)
        proc = subprocess.run([sys.executable, __file__, "--shape", args.shape, "--seq_len", str(seq_len),
                               "--attention", attention, "--child", mode], capture_output=True, text=True, env=env)
        if proc.returncode and attention == "auto" and jax.default_backend() == "gpu":
            sys.stderr.write(proc.stderr[-2000:] + "\ncuDNN attention failed; falling back to XLA's\n")
            attention = "xla"
            proc = subprocess.run([sys.executable, __file__, "--shape", args.shape, "--seq_len", str(seq_len),
                                   "--attention", attention, "--child", mode], capture_output=True, text=True, env=env)
        if proc.returncode:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"{mode} memory child failed (exit {proc.returncode})")
        result[f"memory_{mode}"] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps(result[f"memory_{mode}"]), file=sys.stderr, flush=True)
    print("timing LoRA and QLoRA, alternating ...", file=sys.stderr, flush=True)
    result["speed"] = speed(args.shape, seq_len, args.steps, attention)

    q = result["memory_qlora"]
    measured = q["peak_bytes_in_use"] or q["compiled_total"]
    what = "peak_bytes_in_use" if q["peak_bytes_in_use"] else "compiled memory_analysis total"
    print(f"{args.shape} QLoRA step, bs 1, ctx {seq_len}, remat, r={64 if args.shape == '7b' else 8}, "
          f"attention {q['attention']}, on {result['device']} (jax {jax.__version__}):")
    for mode in ("qlora", "lora"):
        m = result[f"memory_{mode}"]
        got = m["peak_bytes_in_use"] or m["compiled_total"]
        print(f"  {mode:5s} measured {got / GIB:6.2f} GiB ({what}), planned {m['planned_bytes'] / GIB:6.2f} GiB, "
              f"measured/planned {got / m['planned_bytes']:.2f}; compiled temp {m['compiled']['temp_size_in_bytes'] / GIB:.2f} GiB")
    if args.shape == "7b":
        result["qlora_over_fsdp_qlora"] = measured / GIB / FSDP_QLORA_7B_GIB
        print(f"  QLoRA on 1 device vs fsdp_qlora's {FSDP_QLORA_7B_GIB} GiB per GPU on 2: "
              f"ratio {result['qlora_over_fsdp_qlora']:.2f}")
    sp = result["speed"]
    print(f"  tokens/s (median of {args.steps}, alternating): LoRA {sp['tokens_per_s']['lora']:.0f}, "
          f"QLoRA {sp['tokens_per_s']['qlora']:.0f}, QLoRA/LoRA {sp['qlora_over_lora_tokens_per_s']:.2f}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
