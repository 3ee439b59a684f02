"""The chunked cross-entropy: the whole-logits loss and gradients, without a [B, T, vocab] buffer."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_lab.models.llama import init_params, lm_loss
from marin_lab.testing.training import tiny_model


@pytest.mark.slow
@pytest.mark.parametrize(("tie", "chunk"), [(False, 8), (True, 10)])  # 10: a padded last chunk
def test_chunked_loss_gives_the_whole_logits_loss_and_gradients(tie, chunk):
    cfg = tiny_model(tie_embeddings=tie, num_layers=1)
    params = init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 25), 0, cfg.vocab_size)
    mask = jnp.ones((2, 24)).at[1, 20:].set(0.0)
    args = (tokens[:, :-1], tokens[:, 1:], mask, cfg)

    def run(chunk_size):
        fn = jax.value_and_grad(
            lambda p: lm_loss(p, *args, z_loss_weight=1e-2, loss_chunk_size=chunk_size), has_aux=True
        )
        return jax.jit(fn)(params)

    (loss, ce), grads = run(chunk)
    (ref_loss, ref_ce), ref_grads = run(None)
    np.testing.assert_allclose([float(loss), float(ce)], [float(ref_loss), float(ref_ce)], rtol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-7, rtol=1e-5)


def _compiled_grad(cfg, tokens, chunk_size):
    params = init_params(cfg, jax.random.key(0))
    args = (tokens[:, :-1], tokens[:, 1:], jnp.ones(tokens[:, 1:].shape), cfg)
    fn = jax.jit(jax.grad(lambda p: lm_loss(p, *args, loss_chunk_size=chunk_size)[0]))
    return fn.lower(params).compile()


@pytest.mark.slow
def test_chunked_loss_never_holds_the_whole_logits():
    # A vocabulary large enough that the logits are the step's largest activation.
    cfg = tiny_model(vocab_size=4096, hidden_dim=16, intermediate_dim=32, num_layers=1, max_seq_len=64)
    b, t = 4, 64
    tokens = jax.random.randint(jax.random.key(2), (b, t + 1), 0, cfg.vocab_size)
    logits_elements = b * t * cfg.vocab_size

    def largest_f32_buffer(compiled):
        """Elements of the largest fp32 array in the optimised program (any layout)."""
        return max(
            int(np.prod([int(d) for d in dims.split(",")]))
            for dims in re.findall(r"f32\[([\d,]+)\]", compiled.as_text())
        )

    whole, chunked = _compiled_grad(cfg, tokens, None), _compiled_grad(cfg, tokens, 8)
    # The checks can fail: without chunks the program holds fp32 [B, T, vocab] logits (and their
    # gradient) in its temporaries; with chunks of 8 positions the largest logits are [B, 8, vocab].
    assert largest_f32_buffer(whole) >= logits_elements
    assert whole.memory_analysis().temp_size_in_bytes >= 4 * logits_elements
    assert largest_f32_buffer(chunked) < logits_elements
    assert chunked.memory_analysis().temp_size_in_bytes < 4 * logits_elements
