"""Per-chip memory of the Llama-3-8B train step under each attention and loss setting, from the TPU compiler.

Nothing runs: the step that `train_lm` builds (`make_train_step`, abstract parameters and optimizer
state) is compiled for a TPU topology with libtpu (deviceless, `jax.experimental.topologies`), and
`compiled.memory_analysis()` gives each chip's argument, temporary and output bytes. The model is
Llama-3-8B's layer and vocabulary (d 4096, 32 heads on 8 kv heads, vocab 128,256, seq 4096) with
fewer layers, so it compiles in seconds: the temporaries of a scanned layer stack are one layer's
activations plus what remat keeps per layer, so the attention and loss buffers show at any depth.
Per-chip batch 2 sequences is Tootsie's kestrel phase (1,024 sequences on 512 chips).

    python benchmarks/attention_memory.py                         # v5e:2x2, 2 layers, full remat
    python benchmarks/attention_memory.py --layers 4 --remat save_dots --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import time

# Compiling attaches no TPU; other processes may hold libtpu's lockfile.
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

from pathlib import Path

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from jax.experimental import topologies  # noqa: E402

from marin_lab.models.llama import LlamaConfig, init_params  # noqa: E402
from marin_lab.training.mesh import MeshConfig, batch_sharding  # noqa: E402
from marin_lab.training.train_step import StepSettings, make_train_step, state_shardings  # noqa: E402

GIB = 1024**3
SETTINGS = {  # name -> (attention_impl, loss_chunk_size)
    "einsum, whole logits": (None, None),
    "einsum, chunked loss": (None, 512),
    "splash, whole logits": ("splash", None),
    "splash, chunked loss": ("splash", 512),
}


def compile_step(
    model: LlamaConfig,
    topology: str,
    per_chip_batch: int,
    seq: int,
    attention: str | None,
    chunk: int | None,
    remat: bool | str,
) -> dict:
    devices = topologies.get_topology_desc(platform="tpu", topology_name=topology).devices
    mesh = MeshConfig(fsdp=-1).build(devices)
    optimizer = optax.adamw(1e-4)
    shardings = state_shardings(model, optimizer, mesh, "fsdp", jnp.float32)
    abstract = jax.eval_shape(
        lambda: {
            "params": (p := init_params(model, jax.random.key(0))),
            "opt_state": optimizer.init(p),
            "step": jnp.zeros((), jnp.int32),
        }
    )
    state = jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
    tokens = jax.ShapeDtypeStruct((per_chip_batch * len(devices), seq + 1), jnp.int32, sharding=batch_sharding(mesh))
    settings = StepSettings(attention_impl=attention, loss_chunk_size=chunk, gradient_checkpointing=remat)
    step = make_train_step(model, optimizer, lambda s: 1e-4, settings, mesh, shardings)
    start = time.perf_counter()
    compiled = step.lower(state, tokens).compile()
    seconds = time.perf_counter() - start
    mem = compiled.memory_analysis()
    return {
        "compile_s": round(seconds, 1),
        "argument_gib": mem.argument_size_in_bytes / GIB,
        "temp_gib": mem.temp_size_in_bytes / GIB,
        "output_gib": mem.output_size_in_bytes / GIB,
        "tpu_custom_calls": compiled.as_text().count('custom_call_target="tpu_custom_call"'),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topology", default="v5e:2x2")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--per-chip-batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--remat", default="full", help="full, save_dots or none")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    remat = {"none": False, "full": True}.get(args.remat, args.remat)
    model = LlamaConfig(
        vocab_size=128256,
        hidden_dim=4096,
        intermediate_dim=14336,
        num_layers=args.layers,
        num_heads=32,
        num_kv_heads=8,
        max_seq_len=args.seq,
        rope_theta=500000.0,
    )
    print(
        f"load {Path('/proc/loadavg').read_text().split()[:3]}; {args.topology}, {args.layers} layers of Llama-3-8B, "
        f"{args.per_chip_batch} x {args.seq} tokens per chip, remat {args.remat}"
    )
    print("| setting | temporaries GiB/chip | arguments | outputs | tpu_custom_calls | compile s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for name, (attention, chunk) in SETTINGS.items():
        row = {
            "setting": name,
            **compile_step(model, args.topology, args.per_chip_batch, args.seq, attention, chunk, remat),
        }
        rows.append(row)
        print(
            f"| {name} | {row['temp_gib']:.2f} | {row['argument_gib']:.2f} | {row['output_gib']:.2f} | "
            f"{row['tpu_custom_calls']} | {row['compile_s']} |",
            flush=True,
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
