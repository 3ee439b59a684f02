"""Checkpoint overhead: save and restore time of the full train state, per host.

Ours (`marin_lab.training.checkpoint`: orbax's StandardCheckpointHandler run synchronously, each
process writing its own shards, then index/metadata/COMPLETE) vs plain orbax defaults
(`StandardCheckpointer`: async save, then `wait_until_finished`) on the same state, to a local
folder. The two sides alternate, save by save and restore by restore (not in blocks); medians of
`--repeats`. The fraction columns say how much one save costs in units of train steps, i.e. the
throughput lost by saving every k steps is save_fraction / k.

    python benchmarks/checkpoint_overhead.py --models lab_30m,llama_300m
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import tempfile
import time

import jax  # noqa: E402

jax.config.update("jax_enable_x64", False)

import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402

from experiments.models import MODELS  # noqa: E402
from marin_lab.training.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from marin_lab.training.mesh import MeshConfig  # noqa: E402
from marin_lab.training.optimizer import OptimizerConfig  # noqa: E402
from marin_lab.training.train_step import StepSettings, make_init_fn, make_train_step, state_shardings  # noqa: E402

# ~290M parameters (33M of them the tied embedding): the "~300M" size.
MODELS = {
    **MODELS,
    "llama_300m": dataclasses.replace(
        MODELS["lab_30m"], hidden_dim=1024, intermediate_dim=2816, num_layers=20, num_heads=16, num_kv_heads=16
    ),
}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_time(fn, repeats: int) -> float:
    return statistics.median(timed(fn) for _ in range(repeats))


def alternating(a, b, repeats: int, between=None) -> tuple[float, float]:
    """Medians of a and b, run a, b, b, a, a, b, ... (the order rotating pair by pair, so neither
    side is always the one that follows the other's writes); `between` (untimed) after each pair."""
    ta, tb = [], []
    for r in range(repeats):
        if r % 2 == 0:
            ta.append(timed(a))
            tb.append(timed(b))
        else:
            tb.append(timed(b))
            ta.append(timed(a))
        if between is not None:
            between()
    return statistics.median(ta), statistics.median(tb)


def _measure(name: str, args: argparse.Namespace) -> None:
    """One model's row: step, save and load times."""
    model = dataclasses.replace(MODELS[name], max_seq_len=max(MODELS[name].max_seq_len, args.seq))
    mesh = MeshConfig().build()
    opt_cfg = OptimizerConfig()
    opt = opt_cfg.build()
    shard = state_shardings(model, opt, mesh, "fsdp", np.float32)
    state = make_init_fn(model, opt, shard, np.float32)(jax.random.key(0))
    step = make_train_step(model, opt, opt_cfg.lr_schedule(1000), StepSettings(compute_dtype="float32"), mesh, shard)
    tokens = jax.numpy.asarray(
        np.random.default_rng(0).integers(0, model.vocab_size, (args.batch, args.seq + 1)), np.int32
    )
    state, out = step(state, tokens)
    jax.block_until_ready(out)

    def one_step():
        nonlocal state
        state, o = step(state, tokens)
        jax.block_until_ready(o)

    step_s = median_time(one_step, args.repeats)
    nbytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(state))
    root = tempfile.mkdtemp(prefix="ckpt-bench-")
    counter = iter(range(10_000))
    ckptr = ocp.StandardCheckpointer()

    def ours_save():
        save_checkpoint(f"{root}/ours-{next(counter)}", state, {"step": 0})

    def orbax_save():
        ckptr.save(f"{root}/orbax-{next(counter)}", state)
        ckptr.wait_until_finished()

    def keep_first_saves():  # a ~300M state is 3.5 GB per save: keep only what the restores read
        for d in os.listdir(root):
            if d not in ("ours-0", "orbax-1"):
                shutil.rmtree(os.path.join(root, d), ignore_errors=True)

    ours_save_s, orbax_save_s = alternating(ours_save, orbax_save, args.repeats, keep_first_saves)
    first_ours = sorted(d for d in os.listdir(root) if d.startswith("ours-"))[0]
    first_orbax = sorted(d for d in os.listdir(root) if d.startswith("orbax-"))[0]
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, state)
    ours_load_s, orbax_load_s = alternating(
        lambda: jax.block_until_ready(load_checkpoint(f"{root}/{first_ours}", state)),
        lambda: jax.block_until_ready(ckptr.restore(f"{root}/{first_orbax}", abstract)),
        args.repeats,
    )
    ckptr.close()
    shutil.rmtree(root, ignore_errors=True)
    print(
        f"{name:<11} {nbytes / 2**20:>8.1f} {step_s:>7.3f} {ours_save_s:>7.3f} {orbax_save_s:>10.3f} "
        f"{orbax_save_s / ours_save_s:>10.2f} {ours_load_s:>7.3f} {orbax_load_s:>10.3f} "
        f"{orbax_load_s / ours_load_s:>10.2f} {ours_save_s / step_s:>9.2f} {ours_load_s / step_s:>9.2f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="lab_nano,lab_30m")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    print(
        f"# {jax.devices()[0].device_kind} x {jax.device_count()}; local disk; median of {args.repeats}; "
        f"step = batch {args.batch} x seq {args.seq}, fp32"
    )
    header = (
        f"{'model':<11} {'state MB':>8} {'step s':>7} {'save s':>7} {'orbax save':>10} {'save ratio':>10} "
        f"{'load s':>7} {'orbax load':>10} {'load ratio':>10} {'save/step':>9} {'load/step':>9}"
    )
    print(header)
    print("-" * len(header))
    for name in args.models.split(","):
        _measure(name, args)
    print("ratio = orbax time / our time (> 1: ours is faster)")


if __name__ == "__main__":
    main()
