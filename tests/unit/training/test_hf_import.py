"""Importing a Hugging Face Llama (save_pretrained safetensors) as a fine-tuning base."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from marin_lab.models.llama import forward
from marin_lab.testing.training import tiny_model
from marin_lab.training.base_model import load_base
from marin_lab.training.errors import TrainingError
from marin_lab.training.hf_import import HfImportError, import_hf


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
    import torch  # the test extra installs it; a missing torch must fail, not skip
    from transformers import LlamaConfig as HfLlamaConfig
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    cfg = HfLlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # HF initialises norms to 1; random norms check their mapping too
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    path = tmp_path_factory.mktemp("hf") / "llama"
    model.save_pretrained(str(path), safe_serialization=True)
    tokens = np.random.default_rng(0).integers(0, 256, size=(2, 24))
    with torch.no_grad():
        logits = model(torch.tensor(tokens)).logits.numpy()
    return str(path), tokens, logits


@pytest.mark.slow
def test_imported_llama_gives_transformers_logits(hf_model):
    path, tokens, theirs = hf_model
    config, params = import_hf(path)
    assert (config.hidden_dim, config.intermediate_dim, config.num_kv_heads) == (64, 160, 2)
    ours = np.asarray(forward(dict_to_jnp(params), jnp.asarray(tokens), config))
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)
    found, base, quantized = load_base(path)  # the same folder as a fine-tuning base
    assert found == config and quantized is None


def dict_to_jnp(tree):
    return {k: dict_to_jnp(v) if isinstance(v, dict) else jnp.asarray(v) for k, v in tree.items()}


@pytest.mark.slow
def test_checkpoint_of_another_shape_names_tensor_and_field(hf_model):
    path, _, _ = hf_model
    config, _ = import_hf(path)
    wrong = dataclasses.replace(config, intermediate_dim=192)
    with pytest.raises(
        HfImportError,
        match=r"mlp.gate_proj.weight has shape \(160, 64\) but the config's "
        r"intermediate_dim, hidden_dim give \(192, 64\)",
    ):
        import_hf(path, wrong)
    with pytest.raises(TrainingError, match="does not match the model config"):
        load_base(path, dataclasses.replace(tiny_model(), intermediate_dim=192))
