"""Peak accelerator memory and step time of full fine-tuning, LoRA and QLoRA; ours against torch + peft.

Question: does our QLoRA step fit where fsdp_qlora's does (Llama-2-7B, batch 1, context 2048,
gradient checkpointing, LoRA r=64 alpha=16 dropout 0.1 on all seven projections: 5.21 GiB per
GPU on 2 GPUs, their benchmarks_03_2024.md), how do full / LoRA / QLoRA compare in memory and
speed, and how does each compare with the PyTorch peer (transformers + peft, the same settings)?

Weights are random and built in place, leaf by leaf, in their stored form (NF4 bytes and codes for
QLoRA, bf16 for LoRA, fp32 for full): no full-precision copy ever exists, so a process's peak is
its step's. Each (side, shape, mode) runs in a fresh process: compile, one warm-up step, `--steps`
timed steps; the device's `peak_bytes_in_use` (JAX) or `max_memory_allocated` (torch) after them,
and the median step time. On CPU (no allocator statistics) the compiled step's `memory_analysis()`
total stands in for ours. Our LoRA and QLoRA steps then also run in ONE process alternating step by
step (the tokens/s ratio the issue asks for); the peer runs in its own processes (torch and JAX in
one process would share one GPU's allocators), one after ours, on the same otherwise idle device.
bitsandbytes is not on the device image, so the peer has no QLoRA: its LoRA has a bf16 base.

    python benchmarks/qlora_memory.py --plan 7b:qlora,lora,peer-lora --out results.json     # GPU
    python benchmarks/qlora_memory.py --plan tiny:full,lora,qlora,peer-full,peer-lora --steps 2   # CPU
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
    "7b": dict(
        vocab_size=32000,
        hidden_dim=4096,
        intermediate_dim=11008,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        max_seq_len=4096,
        rope_theta=10000.0,
        norm_eps=1e-5,
    ),
    # TinyLlama-1.1B's shape (grouped-query attention, 4 KV heads)
    "1b": dict(
        vocab_size=32000,
        hidden_dim=2048,
        intermediate_dim=5632,
        num_layers=22,
        num_heads=32,
        num_kv_heads=4,
        max_seq_len=2048,
        rope_theta=10000.0,
        norm_eps=1e-5,
    ),
    "tiny": dict(
        vocab_size=512,
        hidden_dim=128,
        intermediate_dim=384,
        num_layers=2,
        num_heads=4,
        num_kv_heads=4,
        max_seq_len=512,
        rope_theta=10000.0,
        norm_eps=1e-5,
    ),
}
FSDP_QLORA_7B_GIB = 5.21  # per GPU, 2 GPUs, bs 1, ctx 2048 (Answer.AI fsdp_qlora benchmarks_03_2024.md)
GIB = 2**30
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _rank(shape: str) -> int:
    return 8 if shape == "tiny" else 64  # fsdp_qlora's r=64


OFFLOADS = ("offload_base", "offload_optimizer_state")


def _parse_run(run: str) -> tuple[str, dict[str, bool]]:
    """'qlora+offload_base' -> ('qlora', {'offload_base': True, 'offload_optimizer_state': False})."""
    mode, *options = run.split("+")
    unknown = [o for o in options if o not in OFFLOADS]
    if mode not in ("full", "lora", "qlora") or unknown:
        raise SystemExit(f"run '{run}': MODE[+{'][+'.join(OFFLOADS)}] with MODE full, lora or qlora")
    if "offload_base" in options and mode == "full":
        raise SystemExit(f"run '{run}': offload_base needs lora or qlora (full fine-tuning freezes nothing)")
    return mode, {o: o in options for o in OFFLOADS}


def _setup(shape: str, run: str, seq_len: int, attention: str | None):
    """(step, state, frozen, tokens, mask, settings) with random weights in their stored form.

    `run` is a mode with optional offloads, e.g. 'qlora+offload_base+offload_optimizer_state':
    the frozen projections and/or the AdamW moments then live in pinned host memory between steps.
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from marin_lab.models.llama import LlamaConfig, init_params
    from marin_lab.peft.lora import LoraConfig
    from marin_lab.training.base_model import QuantConfig, quantize_params
    from marin_lab.training.finetune_state import (
        StepPlan,
        compile_step,
        frozen_base,
        frozen_shardings,
        init_trainable,
        optimizer_shardings,
        trainable_shardings,
    )
    from marin_lab.training.mesh import MeshConfig
    from marin_lab.training.optimizer import OptimizerConfig

    mode, offload = _parse_run(run)
    model = LlamaConfig(**SHAPES[shape])
    lora = LoraConfig(rank=_rank(shape), alpha=16.0, dropout=0.1)  # fsdp_qlora's defaults
    plan = StepPlan(mode, model, lora, "bfloat16", True, offload["offload_optimizer_state"], 0, attention)
    mesh = MeshConfig(data=1, fsdp=1).build()
    frozen, frozen_sh = None, None
    if mode != "full":
        abstract = jax.eval_shape(lambda: init_params(model, jax.random.key(0), jnp.bfloat16))
        if mode == "qlora":
            abstract = jax.eval_shape(lambda p: quantize_params(p, QuantConfig()), abstract)
        frozen_abs = jax.eval_shape(lambda p: frozen_base(p, mode, "bfloat16", offload["offload_base"]), abstract)
        frozen_sh = frozen_shardings(frozen_abs, mesh, "fsdp")
        leaves, treedef = jax.tree_util.tree_flatten(frozen_abs)
        shardings = jax.tree_util.tree_leaves(frozen_sh, is_leaf=lambda s: isinstance(s, NamedSharding))
        values = []
        for i, (leaf, sh) in enumerate(zip(leaves, shardings, strict=True)):
            if leaf.dtype == jnp.uint8:  # NF4 level pairs or absmax codes: any byte is a valid weight

                def fn(k, s=leaf.shape):
                    return jax.random.bits(k, s, jnp.uint8)
            elif leaf.dtype == jnp.float32:  # second-level absmax scales and offsets (the rest is bf16)

                def fn(k, s=leaf.shape):
                    return jax.random.uniform(k, s, jnp.float32, 0.01, 0.03)
            else:

                def fn(k, s=leaf.shape, d=leaf.dtype):
                    return (0.02 * jax.random.normal(k, s)).astype(d)

            values.append(jax.jit(fn, out_shardings=sh)(jax.random.key(i)))
        frozen = jax.tree_util.tree_unflatten(treedef, values)

    optimizer_config = OptimizerConfig(learning_rate=2e-4, weight_decay=0.0, warmup=0, schedule="constant")
    optimizer = optimizer_config.build()
    if mode == "full":

        def make():
            return init_params(model, jax.random.key(1), jnp.float32)  # fp32 masters
    else:

        def make():
            return init_trainable(plan, None, jax.random.key(1), jnp.float32)

    trainable_abs = jax.eval_shape(make)
    train_sh = trainable_shardings(trainable_abs, mode, mesh, "fsdp")
    opt_sh = optimizer_shardings(
        jax.eval_shape(optimizer.init, trainable_abs), train_sh, trainable_abs, mesh, offload["offload_optimizer_state"]
    )
    state_sh = {"trainable": train_sh, "opt_state": opt_sh, "step": NamedSharding(mesh, P())}
    trainable = jax.jit(make, out_shardings=train_sh)()
    state = {
        "trainable": trainable,
        "opt_state": jax.jit(optimizer.init, out_shardings=opt_sh)(trainable),
        "step": jnp.zeros((), jnp.int32),
    }
    step = compile_step(plan, optimizer, optimizer_config.lr_schedule(1000), mesh, state_sh, frozen_sh)
    tokens = jax.random.randint(jax.random.key(7), (1, seq_len + 1), 0, model.vocab_size)
    mask = jnp.ones_like(tokens)
    compiled = step.lower(state, frozen, tokens, mask).compile()
    return compiled, state, frozen, tokens, mask, dict(model=model, lora=lora, mode=mode, **offload)


def _attention(requested: str) -> str | None:
    import jax

    if requested == "auto":
        return "cudnn" if jax.default_backend() == "gpu" else None
    return None if requested == "einsum" else requested


def child_ours(shape: str, mode: str, seq_len: int, steps: int, attention: str) -> dict:
    """One mode of ours in a fresh process: peak device memory, compiled sizes, median step time."""
    import jax

    from marin_lab.training.memory_plan import plan_memory

    attn = _attention(attention)
    t0 = time.perf_counter()
    step, state, frozen, tokens, mask, s = _setup(shape, mode, seq_len, attn)
    setup_s = time.perf_counter() - t0
    analysis = step.memory_analysis()
    times, losses = [], []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        state, out = step(state, frozen, tokens, mask)
        losses.append(float(jax.device_get(out["loss"])))
        if i:  # the first: warm-up
            times.append(time.perf_counter() - t0)
    stats = jax.devices()[0].memory_stats() or {}
    plan = plan_memory(
        s["model"],
        mode=s["mode"],
        num_devices=1,
        batch_size=1,
        seq_len=seq_len,
        lora=s["lora"],
        gradient_checkpointing=True,
        attention_impl=attn,
        offload_base=s["offload_base"],
        offload_optimizer_state=s["offload_optimizer_state"],
    )
    compiled = {
        k: int(getattr(analysis, k))
        for k in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes")
    }
    return {
        "side": "ours",
        "mode": mode,
        "losses": losses,
        "peak_bytes": stats.get("peak_bytes_in_use"),
        "bytes_in_use": stats.get("bytes_in_use"),
        "compiled": compiled,
        "compiled_total": compiled["argument_size_in_bytes"]
        + compiled["output_size_in_bytes"]
        + compiled["temp_size_in_bytes"]
        - compiled["alias_size_in_bytes"],
        "planned_bytes": plan.device_total,
        "planned_host_bytes": plan.host_total,
        "attention": attn,
        "setup_s": setup_s,
        "step_s": times,
        "median_step_s": statistics.median(times),
    }


def child_peer(shape: str, mode: str, seq_len: int, steps: int) -> dict:
    """The same step in PyTorch: transformers' Llama, bf16 autocast, gradient checkpointing, AdamW;
    full: fp32 weights; lora: bf16 base + peft adapters (fp32) on all seven projections."""
    import torch
    import transformers

    s = SHAPES[shape]
    cfg = transformers.LlamaConfig(
        vocab_size=s["vocab_size"],
        hidden_size=s["hidden_dim"],
        intermediate_size=s["intermediate_dim"],
        num_hidden_layers=s["num_layers"],
        num_attention_heads=s["num_heads"],
        num_key_value_heads=s["num_kv_heads"],
        max_position_embeddings=s["max_seq_len"],
        rope_theta=s["rope_theta"],
        rms_norm_eps=s["norm_eps"],
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = "sdpa"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float32 if mode == "full" else torch.bfloat16)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    info = {}
    if mode == "lora":
        import peft

        info["peft"] = peft.__version__
        model = peft.get_peft_model(
            model,
            peft.LoraConfig(
                r=_rank(shape), lora_alpha=16, lora_dropout=0.1, target_modules=TARGETS, task_type="CAUSAL_LM"
            ),
        )
        for p in model.parameters():  # adapters in fp32, as ours (trainable_dtype float32)
            if p.requires_grad:
                p.data = p.data.float()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=2e-4, weight_decay=0.0, fused=device == "cuda")
    tokens = torch.randint(0, s["vocab_size"], (1, seq_len + 1), device=device)
    setup_s = time.perf_counter() - t0
    if device == "cuda":
        torch.cuda.synchronize()
    times, losses = [], []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=tokens[:, :-1], labels=tokens[:, 1:]).loss  # labels already shifted
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if device == "cuda":
            torch.cuda.synchronize()
        if i:
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    return {
        "side": "peer",
        "mode": mode,
        "losses": losses,
        "peak_bytes": peak,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        **info,
        "setup_s": setup_s,
        "trainable_params": sum(p.numel() for p in params),
        "step_s": times,
        "median_step_s": statistics.median(times),
    }


def child_alternate(shape: str, modes: list[str], seq_len: int, steps: int, attention: str) -> dict:
    """Our modes in one process, stepping in turn: median seconds per step and tokens/s of each."""
    import jax

    attn = _attention(attention)
    sides = {mode: list(_setup(shape, mode, seq_len, attn)[:5]) for mode in modes}
    times: dict[str, list[float]] = {mode: [] for mode in sides}
    for i in range(steps + 1):
        for mode, side in sides.items():
            step, state, frozen, tokens, mask = side
            t0 = time.perf_counter()
            state, out = step(state, frozen, tokens, mask)
            jax.block_until_ready(out["loss"])
            if i:
                times[mode].append(time.perf_counter() - t0)
            side[1] = state
    med = {m: statistics.median(t) for m, t in times.items()}
    return {
        "median_step_s": med,
        "tokens_per_s": {m: seq_len / t for m, t in med.items()},
        "steps": steps,
        "attention": attn,
    }


def _run_child(args: list[str], env: dict, timeout: float) -> tuple[dict | None, str]:
    try:
        proc = subprocess.run(
            [sys.executable, __file__, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=min(max(timeout, 1), 86400),
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    if proc.returncode:
        return None, f"exit {proc.returncode}: {proc.stderr[-1500:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), ""


def _summary(result: dict) -> list[str]:
    lines = [
        f"device {result['device']} ({result['backend']}), jax {result['jax']}, bs 1, remat, "
        f"LoRA alpha 16 dropout 0.1 on all seven projections"
    ]
    for shape, runs in result["runs"].items():
        seq = result["seq_len"][shape]
        lines.append(f"{shape} (ctx {seq}, r={_rank(shape)}):")
        for key, r in runs.items():
            if "error" in r:
                lines.append(f"  {key:10s} FAILED/SKIPPED: {r['error'][:200]}")
                continue
            mem = r["peak_bytes"] if r["peak_bytes"] is not None else r.get("compiled_total")
            what = "peak" if r["peak_bytes"] is not None or r.get("side") == "peer" else "compiled total"
            extra = f", planned {r['planned_bytes'] / GIB:.2f} GiB" if "planned_bytes" in r else ""
            if r.get("planned_host_bytes"):
                extra += f" (+ {r['planned_host_bytes'] / GIB:.2f} GiB planned in host memory)"
            mem_text = f"{mem / GIB:7.2f} GiB" if mem is not None else "    n/a"
            lines.append(
                f"  {key:10s} {what} {mem_text}{extra}; median step {r['median_step_s']:.4f} s"
                f" ({seq / r['median_step_s']:.0f} tokens/s); losses "
                f"{r['losses'][0]:.3f}->{r['losses'][-1]:.3f}"
            )
        for mode in ("full", "lora", "qlora"):
            ours, peer = runs.get(mode), runs.get(f"peer-{mode}")
            if (
                ours
                and peer
                and "error" not in ours
                and "error" not in peer
                and ours["peak_bytes"]
                and peer["peak_bytes"]
            ):
                lines.append(
                    f"  {mode}: ours/peer memory {ours['peak_bytes'] / peer['peak_bytes']:.2f}, "
                    f"ours/peer step time {ours['median_step_s'] / peer['median_step_s']:.2f}"
                )
        q = runs.get("qlora")
        if shape == "7b" and q and "error" not in q and q["peak_bytes"]:
            lines.append(
                f"  QLoRA peak on 1 device / fsdp_qlora's {FSDP_QLORA_7B_GIB} GiB per GPU on 2: "
                f"{q['peak_bytes'] / GIB / FSDP_QLORA_7B_GIB:.2f}"
            )
        alt = result.get("alternating", {}).get(shape)
        if alt and "error" not in alt:
            tps = alt["tokens_per_s"]
            lines.append(
                "  alternating in one process: "
                + ", ".join(f"{m} {v:.0f} tokens/s" for m, v in tps.items())
                + (f"; QLoRA/LoRA {tps['qlora'] / tps['lora']:.2f}" if {"lora", "qlora"} <= set(tps) else "")
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--plan",
        default="7b:qlora,lora,peer-lora;1b:full,peer-full,lora,peer-lora,qlora",
        help="shape:run,run;... runs: full|lora|qlora (ours, each optionally +offload_base and/or "
        "+offload_optimizer_state), peer-full|peer-lora (torch+peft)",
    )
    ap.add_argument("--seq_len", type=int, default=None, help="default: 2048 (tiny: 128)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per run")
    ap.add_argument("--alternate", default="lora,qlora", help="our modes to time in one process, alternating")
    ap.add_argument("--attention", default="auto", help="auto (cudnn on GPUs), einsum, xla or cudnn")
    ap.add_argument("--budget_s", type=float, default=1e9, help="skip what would start after this many seconds")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--shape", default="tiny", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        seq_len = args.seq_len
        if args.child.startswith("peer-"):
            out = child_peer(args.shape, args.child[5:], seq_len, args.steps)
        elif args.child.startswith("alternate:"):
            out = child_alternate(args.shape, args.child.split(":")[1].split(","), seq_len, args.steps, args.attention)
        else:
            out = child_ours(args.shape, args.child, seq_len, args.steps, args.attention)
        print(json.dumps(out))
        return

    # Set before JAX starts here too: this process must not take the device's memory from its children.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    start = time.perf_counter()
    plan = [(shape, runs.split(",")) for shape, runs in (p.split(":") for p in args.plan.split(";") if p)]
    result = {
        "jax": jax.__version__,
        "device": str(jax.devices()[0].device_kind),
        "backend": jax.default_backend(),
        "command": " ".join(["python", *sys.argv]),
        "steps": args.steps,
        "runs": {},
        "alternating": {},
        "seq_len": {},
    }
    # Children allocate on demand (so the allocator's peak is what the step needed) and share compilations.
    env = dict(
        os.environ,
        XLA_PYTHON_CLIENT_PREALLOCATE="false",
        JAX_COMPILATION_CACHE_DIR=os.environ.get("JAX_COMPILATION_CACHE_DIR", "/tmp/qlora_memory_jax_cache"),
    )
    attention = args.attention

    def save() -> None:
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)

    for shape, runs in plan:
        seq_len = args.seq_len or (128 if shape == "tiny" else 2048)
        result["seq_len"][shape] = seq_len
        out = result["runs"].setdefault(shape, {})
        for run in runs:
            left = args.budget_s - (time.perf_counter() - start)
            if left < 20:
                out[run] = {"error": "skipped: out of time budget"}
                continue
            common = ["--shape", shape, "--seq_len", str(seq_len), "--steps", str(args.steps)]
            print(f"{shape} {run} ...", file=sys.stderr, flush=True)
            got, err = _run_child([*common, "--child", run, "--attention", attention], env, left)
            if got is None and not run.startswith("peer") and attention == "auto" and jax.default_backend() == "gpu":
                print(f"{err}\ncuDNN attention failed; falling back to XLA's", file=sys.stderr, flush=True)
                attention = "xla"
                got, err = _run_child([*common, "--child", run, "--attention", attention], env, left)
            out[run] = got if got is not None else {"error": err}
            print(json.dumps(out[run])[:600], file=sys.stderr, flush=True)
            save()
        modes = [m for m in args.alternate.split(",") if m in runs and "error" not in out[m]]
        left = args.budget_s - (time.perf_counter() - start)
        if len(modes) > 1 and left > 20:
            print(f"{shape} alternating {modes} ...", file=sys.stderr, flush=True)
            got, err = _run_child(
                [
                    "--shape",
                    shape,
                    "--seq_len",
                    str(seq_len),
                    "--steps",
                    str(2 * args.steps),
                    "--attention",
                    attention,
                    "--child",
                    "alternate:" + ",".join(modes),
                ],
                env,
                left,
            )
            result["alternating"][shape] = got if got is not None else {"error": err}
            save()
    result["summary"] = _summary(result)
    print("\n".join(result["summary"]))
    save()


if __name__ == "__main__":
    main()
