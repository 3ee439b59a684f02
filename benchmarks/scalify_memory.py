"""Train-state bytes of a model under the master-weight and Adam-state formats, from abstract shapes.

The state is built by the trainer's own `make_init_fn` under `jax.eval_shape` (nothing is
allocated, nothing compiled), so every leaf counted is a leaf the train step carries: parameters
(float32, or float16 data + a float32 power-of-two scale per tensor, per layer for the stacked
weights), Adam's two moments (float32, or float16 + scales) and the step counter. Optionally
(`--compile`) the train step is also compiled on this host's backend for `--batch x --seq` and
XLA's `memory_analysis()` gives argument / temporary / output bytes per device, which adds the
activations and gradients; at 1B that compile needs a GPU-sized host.

    python benchmarks/scalify_memory.py                    # llama_1b, abstract state only
    python benchmarks/scalify_memory.py --models lab_nano --compile
"""

from __future__ import annotations

import argparse
import os

import jax
import numpy as np

from experiments.models import MODELS
from marin_lab.precision import PrecisionConfig
from marin_lab.training.mesh import MeshConfig
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.training.train_step import StepSettings, make_init_fn, make_train_step, state_shardings

FORMATS = {
    "fp32 masters + fp32 Adam": ("bfloat16", PrecisionConfig()),
    "fp32 masters + fp16-scaled Adam": ("bfloat16", PrecisionConfig(optimizer_state="float16_scaled")),
    "scalify, fp32 masters + fp32 Adam": ("float16", PrecisionConfig(matmul="scalify")),
    "scalify, fp16 masters + fp16-scaled Adam": (
        "float16",
        PrecisionConfig(matmul="scalify", master_weights="float16_scaled", optimizer_state="float16_scaled"),
    ),
}


def _bytes(tree: object) -> int:
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(tree))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="llama_1b")
    p.add_argument("--compile", action="store_true", help="also XLA's memory_analysis of the compiled step")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    args = p.parse_args()
    print(f"# jax {jax.__version__} on {jax.devices()[0].device_kind}; 1-min load {os.getloadavg()[0]:.1f}")
    mesh = MeshConfig(param_sharding="replicated").build(jax.devices()[:1])
    opt = OptimizerConfig()
    for name in args.models.split(","):
        model = MODELS[name]
        print(f"\n{name}: {model.num_params():,} parameters")
        print(
            f"{'format':<42} {'params B':>15} {'Adam B':>15} {'state B':>15} {'state GB':>9} {'vs first':>8}"
            f" {'saved B':>15}" + ("  compiled arg/temp/out GB" if args.compile else "")
        )
        first = None
        for label, (compute, policy) in FORMATS.items():
            tx = opt.build(moments=policy.optimizer_state)
            shard = state_shardings(model, tx, mesh, "replicated", np.float32, policy)
            init = make_init_fn(model, tx, shard, np.float32, policy)
            state = jax.eval_shape(init, jax.random.key(0))
            params, adam, total = _bytes(state["params"]), _bytes(state["opt_state"]), _bytes(state)
            first = first or total
            line = (
                f"{label:<42} {params:>15,} {adam:>15,} {total:>15,} {total / 1e9:>9.3f} {total / first:>8.2f}"
                f" {first - total:>15,}"
            )
            if args.compile:
                step = make_train_step(
                    model, tx, opt.lr_schedule(10), StepSettings(compute, "float32", precision=policy), mesh, shard
                )
                mem = step.lower(state, jax.ShapeDtypeStruct((args.batch, args.seq + 1), np.int32)).compile()
                m = mem.memory_analysis()
                line += (
                    f"  {m.argument_size_in_bytes / 1e9:.3f} / {m.temp_size_in_bytes / 1e9:.3f} / "
                    f"{m.output_size_in_bytes / 1e9:.3f}"
                )
            print(line, flush=True)
    print(f"# 1-min load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
