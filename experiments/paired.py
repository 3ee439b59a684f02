"""Paired precision comparisons: the same model, seed and batches under several number formats.

Float8's effect on the loss (~1%) is smaller than the seed-to-seed spread of a small model (3-7%),
so a comparison is only meaningful between *paired* runs: one initialisation and one data order
per seed, trained once per format with the trainer's own compiled step. `paired_curves` returns
the loss curves by (variant, seed); the tests and `docs/benchmarks.md` compare them pair by pair.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from marin_lab.models.llama import LlamaConfig
from marin_lab.precision.adam import moment_bytes
from marin_lab.precision.policy import PrecisionConfig
from marin_lab.training.mesh import MeshConfig
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.training.train_step import StepSettings, make_init_fn, make_train_step, state_shardings


@dataclasses.dataclass(frozen=True)
class Variant:
    """One side of a comparison: compute dtype plus precision policy (parameters stay fp32)."""

    name: str
    compute_dtype: str = "float32"
    precision: PrecisionConfig = PrecisionConfig()


@dataclasses.dataclass
class Curves:
    """Loss per step for each (variant name, seed), each variant's optimizer-moment bytes, and the
    last step's precision metrics (fp8/..., scalify/...) for each (variant name, seed)."""

    losses: dict[tuple[str, int], np.ndarray]
    moment_bytes: dict[str, dict[str, int]]
    last_metrics: dict[tuple[str, int], dict[str, float]] = dataclasses.field(default_factory=dict)


def batches(tokens: np.ndarray, seed: int, steps: int, batch_size: int, seq_len: int) -> np.ndarray:
    """[steps, batch, seq_len + 1] windows of a token stream, in an order fixed by `seed`."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(tokens) - seq_len - 1, size=(steps, batch_size))
    return tokens[starts[..., None] + np.arange(seq_len + 1)].astype(np.int32)


def paired_curves(
    model: LlamaConfig,
    optimizer: OptimizerConfig,
    variants: Sequence[Variant],
    seeds: Sequence[int],
    tokens: np.ndarray,
    *,
    steps: int,
    batch_size: int,
    seq_len: int,
) -> Curves:
    """Train every variant from every seed on the same batches; one compile per variant."""
    mesh = MeshConfig(param_sharding="replicated").build(jax.devices()[:1])
    schedule = optimizer.lr_schedule(steps)
    losses: dict[tuple[str, int], np.ndarray] = {}
    sizes: dict[str, dict[str, int]] = {}
    last: dict[tuple[str, int], dict[str, float]] = {}
    for v in variants:
        v.precision.validate(model.param_shapes())
        v.precision.check_backend()
        tx = optimizer.build(moments=v.precision.optimizer_state)
        settings = StepSettings(v.compute_dtype, "float32", precision=v.precision)
        shardings = state_shardings(model, tx, mesh, "replicated", np.float32, v.precision)
        init = make_init_fn(model, tx, shardings, np.float32, v.precision)
        step = make_train_step(model, tx, schedule, settings, mesh, shardings)
        for seed in seeds:
            state = init(jax.random.key(seed))
            sizes[v.name] = moment_bytes(state["opt_state"])
            curve = []
            for batch in batches(tokens, seed, steps, batch_size, seq_len):
                state, metrics = step(state, batch)
                curve.append(metrics["loss"])
            losses[(v.name, seed)] = np.asarray(jax.device_get(curve), np.float64)
            last[(v.name, seed)] = {
                k: float(x) for k, x in jax.device_get(metrics).items() if k.startswith(("fp8/", "scalify/"))
            }
    return Curves(losses, sizes, last)


def relative_gap(curves: Curves, a: str, b: str, seeds: Sequence[int], *, tail: int = 10) -> tuple[float, float]:
    """(final-loss gap, mean-over-curve gap) of a against b, relative to b, worst over the seeds.

    "Final" is the mean of the last `tail` steps (one step's loss on one batch is noisy).
    """
    final = curve = 0.0
    for s in seeds:
        la, lb = curves.losses[(a, s)], curves.losses[(b, s)]
        final = max(final, abs(la[-tail:].mean() - lb[-tail:].mean()) / lb[-tail:].mean())
        curve = max(curve, abs(la.mean() - lb.mean()) / lb.mean())
    return final, curve


def relative_error(a: jax.Array, b: jax.Array) -> float:
    """||a - b|| / ||b|| (Frobenius), in float64."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a64 - b64) / np.linalg.norm(b64))


def cosine(a: jax.Array, b: jax.Array) -> float:
    """Cosine similarity of a and b flattened, in float64."""
    a64, b64 = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))
