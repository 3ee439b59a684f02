"""Which collectives of train_lm's step cross slices, per mesh, compiled for 2 TPU slices with libtpu.

The step is the trainer's own (`train_step.make_train_step`, abstract state: nothing is allocated),
for a small Llama (4 layers, width 256) on two slices of a TPU topology (default `v5e:2x2`, 8 chips),
compiled by the real TPU compiler on this CPU machine (needs `jax[tpu]`, see docs/training.md).
A multislice program is compiled per slice: traffic between slices shows up as host transfers
tagged `_xla_megascale_transfer_type`, counted here by kind; in-slice collectives are the usual
HLO ops. The meshes compared: `slices=1` (the in-slice axes span both slices), `slices=2` (fsdp
inside each slice, a `replica` axis across) and `slices=2` data-parallel.

    python benchmarks/multislice_collectives.py [--topology v5e:2x2]

Several processes loading libtpu on one machine need ALLOW_MULTIPLE_LIBTPU_LOAD=1.
"""

from __future__ import annotations

import argparse
import collections
import re
import time

import jax
import jax.numpy as jnp
from jax.experimental import topologies

from marin_lab.models.llama import LlamaConfig
from marin_lab.training.config import OptimizerConfig
from marin_lab.training.mesh import MeshConfig, batch_sharding
from marin_lab.training.train_step import StepSettings, make_init_fn, make_train_step, state_shardings

MESHES = {
    "slices=1 (fsdp over both slices)": MeshConfig(),
    "slices=2 (fsdp in each slice)": MeshConfig(slices=2),
    "slices=2, data parallel": MeshConfig(slices=2, data=-1, fsdp=1, param_sharding="replicated"),
}
DCN = re.compile(r'_xla_megascale_transfer_type="?([A-Z_]+)')
ICI = re.compile(r"= \S+ (all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")


def compiled_hlo(mesh_config: MeshConfig, devices: list, model: LlamaConfig, batch: int, seq_len: int) -> str:
    mesh = mesh_config.build(devices)
    opt_config = OptimizerConfig(learning_rate=1e-3, warmup=0)
    optimizer = opt_config.build()
    shardings = state_shardings(model, optimizer, mesh, mesh_config.param_sharding, jnp.float32)
    step = make_train_step(model, optimizer, opt_config.lr_schedule(10), StepSettings(), mesh, shardings)
    abstract = jax.eval_shape(make_init_fn(model, optimizer, shardings, jnp.float32), jax.random.key(0))
    state = jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
    tokens = jax.ShapeDtypeStruct((batch, seq_len + 1), jnp.int32, sharding=batch_sharding(mesh))
    return step.lower(state, tokens).compile().as_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="v5e:2x2", help="one slice's TPU topology")
    args = parser.parse_args()
    devices = topologies.get_topology_desc(platform="tpu", topology_name=args.topology, num_slices=2).devices
    model = LlamaConfig(
        vocab_size=1024,
        hidden_dim=256,
        intermediate_dim=768,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        max_seq_len=128,
    )
    print(
        f"{model.num_params():,}-parameter Llama, 2 x {args.topology} ({len(devices)} chips), "
        f"jax {jax.__version__}, {time.strftime('%Y-%m-%d')}\n"
    )
    print("| mesh | axes | cross-slice (DCN) transfers | in-slice collectives | compile s |")
    print("|---|---|---|---|---|")
    for name, mesh_config in MESHES.items():
        started = time.perf_counter()
        hlo = compiled_hlo(mesh_config, devices, model, batch=16, seq_len=128)
        seconds = time.perf_counter() - started
        dcn = collections.Counter(DCN.findall(hlo))
        ici = collections.Counter(ICI.findall(hlo))
        axes = " x ".join(f"{a} {n}" for a, n in mesh_config.build(devices).shape.items() if n > 1)
        print(
            f"| {name} | {axes} | {', '.join(f'{k} {v}' for k, v in sorted(dcn.items())) or 'none'} "
            f"| {', '.join(f'{k} {v}' for k, v in sorted(ici.items()))} | {seconds:.1f} |"
        )


if __name__ == "__main__":
    main()
