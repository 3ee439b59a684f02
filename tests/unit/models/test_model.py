"""The decoder: shapes, causality, attention implementations, remat, HF export round-trip."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_lab.models.llama import LlamaConfig, forward, init_params, lm_loss
from marin_lab.testing.training import tiny_model
from marin_lab.training.hf_export import export_hf


def test_llama_8b_shape_has_8b_params():
    cfg = LlamaConfig(
        vocab_size=128256,
        hidden_dim=4096,
        intermediate_dim=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        max_seq_len=4096,
        rope_theta=500000.0,
    )
    # Llama-3.1-8B has 8,030,261,248 parameters (untied embeddings).
    assert cfg.num_params() == 8_030_261_248
    assert cfg.flops_per_token(4096) > 6 * 7e9


def test_invalid_shape_names_the_field():
    with pytest.raises(ValueError, match="num_kv_heads"):
        LlamaConfig(num_heads=8, num_kv_heads=3).validate()


@pytest.mark.slow
def test_forward_is_causal():
    cfg = tiny_model()
    params = init_params(cfg, jax.random.key(0))
    tokens = jnp.arange(16, dtype=jnp.int32)[None, :]
    changed = tokens.at[0, 10].set(200)
    a, b = forward(params, tokens, cfg), forward(params, changed, cfg)
    assert a.shape == (1, 16, cfg.vocab_size)
    np.testing.assert_array_equal(np.asarray(a[0, :10]), np.asarray(b[0, :10]))
    assert not np.allclose(np.asarray(a[0, 10:]), np.asarray(b[0, 10:]))


@pytest.mark.slow
@pytest.mark.parametrize("tie", [False, True])
def test_einsum_attention_matches_jax_dot_product_attention(tie):
    cfg = tiny_model(tie_embeddings=tie)
    params = init_params(cfg, jax.random.key(1))
    tokens = jax.random.randint(jax.random.key(2), (2, 24), 0, cfg.vocab_size)
    ours = forward(params, tokens, cfg)
    ref = forward(params, tokens, cfg, attention_impl="xla")
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), atol=2e-5, rtol=1e-4)


@pytest.mark.slow
def test_gradient_checkpointing_gives_the_same_gradients():
    cfg = tiny_model()
    params = init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(3), (2, 17), 0, cfg.vocab_size)
    args = (tokens[:, :-1], tokens[:, 1:], jnp.ones((2, 16)), cfg)

    def grads(remat):
        return jax.grad(lambda p: lm_loss(p, *args, gradient_checkpointing=remat)[0])(params)

    for a, b in zip(jax.tree_util.tree_leaves(grads(False)), jax.tree_util.tree_leaves(grads(True)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


@pytest.mark.slow
def test_z_loss_adds_a_positive_term():
    cfg = tiny_model()
    params = init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(3), (2, 9), 0, cfg.vocab_size)
    args = (tokens[:, :-1], tokens[:, 1:], jnp.ones((2, 8)), cfg)
    plain, ce = lm_loss(params, *args)
    with_z, ce_z = lm_loss(params, *args, z_loss_weight=1e-2)
    assert float(plain) == pytest.approx(float(ce))
    assert float(with_z) > float(plain) and float(ce_z) == pytest.approx(float(ce))


@pytest.mark.slow
def test_bf16_compute_stays_close_to_fp32():
    cfg = tiny_model()
    params = init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(4), (2, 16), 0, cfg.vocab_size)
    f32 = forward(params, tokens, cfg)
    bf16 = forward(params, tokens, cfg, compute_dtype=jnp.bfloat16)
    assert bf16.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(bf16, np.float32), np.asarray(f32), atol=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("tie", [False, True])
def test_hf_export_matches_transformers_logits(tmp_path, tie):
    import torch  # the test extra installs it; a missing torch must fail, not skip
    from transformers import LlamaForCausalLM

    cfg = dataclasses.replace(tiny_model(tie_embeddings=tie), rope_theta=500000.0)
    params = init_params(cfg, jax.random.key(7))
    export_hf(params, cfg, str(tmp_path / "hf"))
    model = LlamaForCausalLM.from_pretrained(str(tmp_path / "hf"), torch_dtype=torch.float32)
    model.eval()
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(2, 20))
    with torch.no_grad():
        theirs = model(torch.tensor(tokens)).logits.numpy()
    ours = np.asarray(forward(params, jnp.asarray(tokens), cfg))
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)


def test_counting_parameters_before_the_vocabulary_is_chosen_says_to_choose_it():
    unset = LlamaConfig(vocab_size=None)
    for count in (unset.param_shapes, unset.num_params, lambda: unset.flops_per_token(128)):
        with pytest.raises(ValueError, match="model.vocab_size is None: set it"):
            count()
