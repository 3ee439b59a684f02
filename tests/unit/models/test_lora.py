"""LoRA over plain and NF4 bases: identity at init, gradients through the custom VJP, merge, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_lab.models.llama import forward, init_params, lm_loss
from marin_lab.peft import LoraConfig, LoraError, apply_lora, init_lora, merge_lora, unmerge_lora
from marin_lab.quant import quantize_nf4
from marin_lab.testing.training import tiny_model

MODEL = tiny_model()
CFG = LoraConfig(rank=8, alpha=16.0, dropout=0.0)


@pytest.fixture(scope="module")
def bases():
    params = init_params(MODEL, jax.random.key(0))
    quantized = {
        **params,
        "layers": {k: quantize_nf4(v) if k.startswith("w") else v for k, v in params["layers"].items()},
    }
    # The reference dequantizes in a compiled program too (see NF4Tensor.block_absmax on FMA).
    dense = jax.jit(
        lambda q: jax.tree_util.tree_map(
            lambda v: v.dequantize() if hasattr(v, "dequantize") else v, q, is_leaf=lambda v: hasattr(v, "dequantize")
        )
    )(quantized)
    return params, quantized, dense


TOKENS = jax.random.randint(jax.random.key(2), (2, 17), 0, MODEL.vocab_size)


@pytest.mark.slow
def test_qlora_logits_at_init_equal_the_dequantized_base_exactly(bases):
    _, quantized, dense = bases
    adapters = init_lora(CFG, MODEL, jax.random.key(1))
    assert all(float(jnp.abs(ad["b"]).max()) == 0.0 for ad in adapters["layers"].values())
    assert all(float(jnp.abs(ad["a"]).max()) > 0.0 for ad in adapters["layers"].values())
    logits = jax.jit(lambda p: forward(p, TOKENS, MODEL))
    assert bool(jnp.array_equal(logits(apply_lora(quantized, adapters, CFG)), logits(dense)))


@pytest.mark.slow
def test_adapter_gradients_through_custom_vjp_equal_materialized_reference(bases):
    _, quantized, dense = bases
    adapters = init_lora(CFG, MODEL, jax.random.key(1))
    noise = jax.random.split(jax.random.key(3), 2)
    adapters = {
        "layers": {
            k: {"a": v["a"], "b": 0.05 * jax.random.normal(noise[0], v["b"].shape)}
            for k, v in adapters["layers"].items()
        }
    }

    def loss(adapters, base):
        params = apply_lora(base, adapters, CFG)
        return lm_loss(params, TOKENS[:, :-1], TOKENS[:, 1:], jnp.ones((2, 16)), MODEL)[0]

    grad = jax.jit(jax.grad(loss))
    through_vjp, reference = grad(adapters, quantized), grad(adapters, dense)
    for name, parts in reference["layers"].items():
        for part, want in parts.items():
            got = through_vjp["layers"][name][part]
            rel = float(jnp.abs(got - want).max() / jnp.abs(want).max())
            assert rel <= 1e-5, (name, part, rel)


@pytest.mark.slow
def test_merge_then_unmerge_round_trips_and_merged_model_computes_the_same(bases):
    params, quantized, _ = bases
    adapters = init_lora(CFG, MODEL, jax.random.key(1))
    adapters = jax.tree_util.tree_map(lambda x: x + 0.02, adapters)
    merged = merge_lora(params, adapters, CFG)
    np.testing.assert_allclose(unmerge_lora(merged, adapters, CFG)["layers"]["wq"], params["layers"]["wq"], atol=1e-6)
    logits = jax.jit(lambda p: forward(p, TOKENS, MODEL))
    np.testing.assert_allclose(
        logits(merge_lora(quantized, adapters, CFG)), logits(apply_lora(quantized, adapters, CFG)), atol=2e-5
    )


@pytest.mark.slow
def test_kaiming_uniform_a_and_dropout_only_when_keyed(bases):
    params, _, _ = bases
    cfg = LoraConfig(rank=4, dropout=0.5, target_modules=("q_proj", "w_down"))
    adapters = init_lora(cfg, MODEL, jax.random.key(5))
    assert sorted(adapters["layers"]) == ["w_down", "wq"]
    a = adapters["layers"]["wq"]["a"]
    assert a.shape == (2, 64, 4) and float(jnp.abs(a).max()) <= 1 / np.sqrt(64)
    adapters = jax.tree_util.tree_map(lambda x: x + 0.1, adapters)
    logits = jax.jit(lambda p: forward(p, TOKENS, MODEL))
    plain = logits(apply_lora(params, adapters, cfg))
    assert bool(jnp.array_equal(plain, logits(apply_lora(params, adapters, cfg))))
    dropped = logits(apply_lora(params, adapters, cfg, key=jax.random.key(7)))
    assert not bool(jnp.array_equal(plain, dropped))


@pytest.mark.slow
def test_modules_to_save_embeddings_train_like_full_finetuning_and_replace_the_base_on_merge(bases):
    params, quantized, _ = bases
    cfg = LoraConfig(rank=8, alpha=16.0, dropout=0.0, modules_to_save=("embed_tokens",))
    adapters = init_lora(cfg, MODEL, jax.random.key(1), base=params)
    assert sorted(adapters) == ["embed", "layers"] and bool(jnp.array_equal(adapters["embed"], params["embed"]))
    # Same adapter initialisation as without saved modules (one key per adapter array).
    plain = init_lora(CFG, MODEL, jax.random.key(1))
    assert bool(jnp.array_equal(adapters["layers"]["wq"]["a"], plain["layers"]["wq"]["a"]))

    def loss(p):
        return lm_loss(p, TOKENS[:, :-1], TOKENS[:, 1:], jnp.ones((2, 16)), MODEL)[0]

    # B = 0: the adapted model is the base, so the saved copy's gradient is full fine-tuning's.
    got = jax.jit(jax.grad(lambda ad: loss(apply_lora(params, ad, cfg))))(adapters)["embed"]
    want = jax.jit(jax.grad(loss))(params)["embed"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert float(jnp.abs(got).max()) > 0.0
    trained = {**adapters, "embed": adapters["embed"] + 0.5}
    merged = merge_lora(quantized, trained, cfg)
    assert bool(jnp.array_equal(merged["embed"], trained["embed"]))
    assert bool(jnp.array_equal(apply_lora(quantized, trained, cfg)["embed"], trained["embed"]))


@pytest.mark.slow
def test_embedding_adapter_starts_at_the_base_learns_and_merges_like_peft(bases):
    params, quantized, _ = bases
    cfg = LoraConfig(rank=4, alpha=8.0, dropout=0.0, target_modules=("q_proj", "embed_tokens"))
    adapters = init_lora(cfg, MODEL, jax.random.key(1))
    assert sorted(adapters["layers"]) == ["wq"] and adapters["embed"]["a"].shape == (MODEL.vocab_size, 4)
    assert float(jnp.abs(adapters["embed"]["a"]).max()) == 0.0 < float(jnp.abs(adapters["embed"]["b"]).max())
    logits = jax.jit(lambda p: forward(p, TOKENS, MODEL))
    assert bool(jnp.array_equal(logits(apply_lora(params, adapters, cfg)), logits(params)))

    def loss(ad):
        return lm_loss(apply_lora(params, ad, cfg), TOKENS[:, :-1], TOKENS[:, 1:], jnp.ones((2, 16)), MODEL)[0]

    grad_a = jax.jit(jax.grad(loss))(adapters)["embed"]["a"]
    seen = np.unique(np.asarray(TOKENS))  # only looked-up (and, untied, no other) rows get a gradient
    assert float(jnp.abs(grad_a[seen]).max()) > 0.0
    trained = jax.tree_util.tree_map(lambda x: x + 0.02, adapters)
    merged = merge_lora(quantized, trained, cfg)
    np.testing.assert_allclose(logits(merged), logits(apply_lora(quantized, trained, cfg)), atol=2e-5)
    np.testing.assert_allclose(
        unmerge_lora(merge_lora(params, trained, cfg), trained, cfg)["embed"], params["embed"], atol=1e-6
    )
    with pytest.raises(LoraError, match="both in target_modules .* and in modules_to_save"):
        LoraConfig(target_modules=("embed_tokens",), modules_to_save=("embed",)).validate(MODEL)


@pytest.mark.parametrize(
    "cfg, message",
    [
        (LoraConfig(modules_to_save=("wq",)), r"lora.modules_to_save: 'wq' is not one of"),
        (LoraConfig(target_modules=("q_proj", "qkv")), r"lora.target_modules: 'qkv' matches no projection"),
        (LoraConfig(rank=40), r"lora.rank=40 is larger than layers/wk's smaller dimension \(64x32\)"),
        (LoraConfig(rank=0), r"lora.rank=0 must be a positive"),
        (LoraConfig(dropout=1.0), r"lora.dropout=1.0"),
    ],
)
def test_bad_lora_config_names_the_field(cfg, message):
    with pytest.raises(LoraError, match=message):
        init_lora(cfg, MODEL, jax.random.key(0))


def test_saving_a_tied_lm_head_or_without_a_base_is_refused_naming_the_field():
    with pytest.raises(LoraError, match=r"'lm_head' is tied to the embeddings.*'embed_tokens'"):
        LoraConfig(modules_to_save=("lm_head",)).validate(tiny_model(tie_embeddings=True))
    with pytest.raises(LoraError, match=r"modules_to_save=\('embed',\) starts from the base's weights"):
        init_lora(LoraConfig(modules_to_save=("embed",)), MODEL, jax.random.key(0))
