"""Which parameters AdamW's decoupled weight decay touches (OptimizerConfig.decay_embeddings)."""

import jax
import jax.numpy as jnp
import pytest

from experiments.models import lab_nano
from marin_lab.models.llama import flatten_params, init_params
from marin_lab.training import OptimizerConfig


@pytest.mark.slow
@pytest.mark.parametrize("decay_embeddings", [True, False])
def test_zero_gradients_leave_only_decayed_parameters_changed(decay_embeddings):
    params = init_params(lab_nano, jax.random.key(0))
    optimizer = OptimizerConfig(weight_decay=0.1, max_grad_norm=None, decay_embeddings=decay_embeddings).build()
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    updates, _ = jax.jit(optimizer.update)(zeros, optimizer.init(params), params)
    changed = {name for name, u in flatten_params(updates).items() if bool(jnp.any(u != 0))}
    # With zero gradients Adam's step is 0: what moves is exactly the decay mask.
    expected = {"layers/wq", "layers/wk", "layers/wv", "layers/wo", "layers/w_gate", "layers/w_up", "layers/w_down"}
    assert changed == (expected | {"embed"} if decay_embeddings else expected)
