"""Splash attention: numerics against the einsum path (Pallas interpret mode on CPU), the kernel in
the program compiled for a TPU topology, and bad attention settings refused before training."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.experimental import topologies

from experiments.simple_train_config import CpuOnlyConfig, SimpleTrainConfig, TpuPodConfig
from marin_lab.cluster.resources import TpuResources
from marin_lab.main.train_lm import train_lm
from marin_lab.models.attention import einsum_attention, splash_attention
from marin_lab.models.llama import init_params
from marin_lab.testing.training import tiny_model, tiny_train_config, write_synthetic_cache
from marin_lab.training import TrainingError
from marin_lab.training.mesh import MeshConfig, batch_sharding
from marin_lab.training.train_step import StepSettings, make_train_step, state_shardings

# The smallest sequence the kernel takes: its kv tiles are multiples of 128 lanes.
T = 128


@pytest.mark.slow
def test_splash_matches_einsum_forward_and_gradients():
    # Two query heads sharing one kv head (grouped-query; here also multi-query), two sequences (the
    # kernel is vmapped over the batch). Interpret mode compiles slowly: one program, both passes.
    kq, kk, kv, kw = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(kq, (2, T, 2, 16))
    k, v = jax.random.normal(kk, (2, T, 1, 16)), jax.random.normal(kv, (2, T, 1, 16))
    cotangent = jax.random.normal(kw, q.shape)

    @jax.jit
    def forward_and_grads(q, k, v):
        out, vjp = jax.vjp(splash_attention, q, k, v)
        return out, vjp(cotangent)

    out, grads = forward_and_grads(q, k, v)
    ref_out, ref_vjp = jax.vjp(einsum_attention, q, k, v)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), atol=1e-5, rtol=1e-5)
    for a, b in zip(grads, ref_vjp(cotangent), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=1e-4)


@pytest.mark.slow
def test_compiled_tpu_train_step_calls_the_splash_kernel(monkeypatch):
    pytest.importorskip("libtpu", reason="the TPU compiler comes with the libtpu extra (make test installs it)")
    # Compiling attaches no TPU: let other processes compile at the same time (libtpu's lockfile).
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

    devices = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices
    mesh = MeshConfig(data=2, fsdp=-1).build(devices)
    # head_dim 128 (the TPU lane width), 3 query heads on 1 kv head; seq_len 256 is no other dimension,
    # so an array [.., 256, 256] could only be attention scores.
    seq = 2 * T
    model = tiny_model(
        vocab_size=512, hidden_dim=384, num_heads=3, num_kv_heads=1, intermediate_dim=512, num_layers=1, max_seq_len=seq
    )
    optimizer = optax.adam(1e-3)
    shardings = state_shardings(model, optimizer, mesh, "fsdp", jnp.float32)
    abstract = jax.eval_shape(
        lambda: {
            "params": init_params(model, jax.random.key(0)),
            "opt_state": optimizer.init(init_params(model, jax.random.key(0))),
            "step": jnp.zeros((), jnp.int32),
        }
    )
    state = jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
    tokens = jax.ShapeDtypeStruct((8, seq + 1), jnp.int32, sharding=batch_sharding(mesh))
    # Remat too: the kernel is recomputed inside the checkpointed layer scan.
    settings = StepSettings(attention_impl="splash", gradient_checkpointing=True)
    step = make_train_step(model, optimizer, lambda s: 1e-3, settings, mesh, shardings)
    hlo = step.lower(state, tokens).compile().as_text()
    # Forward (twice: remat), dq and dkv kernels are Mosaic custom calls; no [.., T, T] scores
    # (the einsum path holds f32[2,1,3,256,256] per device here).
    assert hlo.count('custom_call_target="tpu_custom_call"') >= 3
    assert not re.search(rf"\[\d+,\d+,(\d+,)*{seq},{seq}\]", hlo)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return write_synthetic_cache(str(tmp_path_factory.mktemp("cache") / "c"), train_docs=40)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"attention_impl": "flash"}, r"attention_impl='flash' is not one of"),
        (
            {"attention_impl": "splash"},
            r"attention_impl='splash' needs seq_len to be a multiple of 128 .*got seq_len=32",
        ),
        ({"attention_impl": "cudnn"}, r"attention_impl='cudnn' is not available on cpu"),
        ({"loss_chunk_size": 0}, r"loss_chunk_size=0 must be positive"),
    ],
)
def test_bad_attention_settings_fail_before_training(cache, tmp_path, overrides, match):
    with pytest.raises(TrainingError, match=match):
        train_lm(dataclasses.replace(tiny_train_config(str(tmp_path / "bad"), {"c": cache}), **overrides))
    assert not (tmp_path / "bad" / "checkpoints").exists()


def test_tpu_recipes_default_to_splash_and_others_to_einsum():
    def impl(resources, **extra):
        return SimpleTrainConfig(
            resources=resources, train_batch_size=8, num_train_steps=1, learning_rate=1e-3, **extra
        ).resolved_attention_impl()

    assert impl(TpuResources(tpu="v5e-256", slices=2)) == "splash"
    assert impl(TpuPodConfig(tpu_type="v4-2048")) == "splash"
    assert impl(CpuOnlyConfig(num_cpus=2)) is None
    assert impl({"num_cpus": 2}) is None
    assert impl(TpuResources(tpu="v5e-256"), attention_impl="einsum") == "einsum"
