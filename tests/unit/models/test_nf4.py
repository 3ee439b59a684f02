"""NF4 quantization: the table, bitsandbytes as the oracle, round-trip error, bytes, the matmul."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_lab.quant import NF4_CODE, QuantizationError, nf4_matmul, normal_float_code, quantize_nf4
from marin_lab.quant.nf4 import DYNAMIC_CODE


@pytest.fixture(scope="module")
def bnb():
    import bitsandbytes.functional as functional

    return functional


def _normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.slow
def test_nf4_levels_are_normal_quantiles_with_exact_zero(bnb):
    derived = normal_float_code()
    np.testing.assert_allclose(derived, NF4_CODE, atol=1e-6)
    np.testing.assert_array_equal(NF4_CODE, bnb.get_4bit_type("nf4", device="cpu").numpy())
    assert len(NF4_CODE) == 16 and NF4_CODE[0] == -1.0 and NF4_CODE[-1] == 1.0 and 0.0 in NF4_CODE


@pytest.mark.slow
def test_dynamic_code_matches_bitsandbytes(bnb):
    # Within one float32 ulp: torch's linspace rounds a few fraction edges the other way.
    np.testing.assert_allclose(DYNAMIC_CODE, bnb.create_dynamic_map(signed=True).numpy(), rtol=0, atol=1.2e-7)


@pytest.mark.slow
@pytest.mark.parametrize("double_quant", [False, True])
def test_packed_levels_equal_bitsandbytes(bnb, double_quant):
    import torch

    torch_weight = _normal((96, 256))  # torch Linear layout [out, in]; ours is its transpose
    packed, state = bnb.quantize_4bit(
        torch.from_numpy(torch_weight), blocksize=64, quant_type="nf4", compress_statistics=double_quant
    )
    ours = quantize_nf4(jnp.asarray(torch_weight.T), 64, double_quant)
    np.testing.assert_array_equal(np.asarray(ours.packed).reshape(-1), packed.numpy().reshape(-1))
    theirs = bnb.dequantize_4bit(packed, state).numpy().T
    if not double_quant:
        np.testing.assert_array_equal(np.asarray(ours.dequantize()), theirs)
    else:
        # The absmax mean is summed in another order, so a few second-level codes round the other
        # way: they differ by at most one level of the 8-bit code.
        codes_differ = np.mean(np.asarray(ours.absmax) != state.absmax.numpy())
        assert codes_differ < 0.02
        np.testing.assert_allclose(np.asarray(ours.dequantize()), theirs, rtol=0.02, atol=1e-6)


@pytest.mark.slow
def test_round_trip_beats_int4_absmax_and_keeps_zero():
    w = _normal((4, 128, 256), seed=1)
    w[0, :7, :] = 0.0  # whole zero rows, and scattered zeros
    w[1, ::5, ::3] = 0.0
    q = quantize_nf4(jnp.asarray(w), block_size=64, double_quant=True)
    back = np.asarray(q.dequantize())
    assert np.all(back[w == 0.0] == 0.0)
    # Symmetric int4 with the same blocks: levels k/7 * absmax, k = -7..7.
    blocks = np.swapaxes(w, -1, -2).reshape(-1, 64)
    absmax = np.abs(blocks).max(axis=1, keepdims=True)
    int4 = np.round(blocks / np.maximum(absmax, 1e-38) * 7) / 7 * absmax
    int4_rmse = np.sqrt(np.mean((int4 - blocks) ** 2))
    nf4_rmse = np.sqrt(np.mean((back - w) ** 2))
    assert nf4_rmse < int4_rmse, (nf4_rmse, int4_rmse)


@pytest.mark.slow
def test_double_quant_absmax_error_within_one_percent():
    w = _normal((2, 512, 1024), seed=2)
    q = quantize_nf4(jnp.asarray(w), double_quant=True)
    true = np.abs(np.swapaxes(w, -1, -2).reshape(2, -1, 64)).max(axis=-1)
    rel = np.abs(np.asarray(q.block_absmax()) - true) / true
    assert rel.mean() <= 0.01, rel.mean()


def test_quantized_linear_bytes_per_weight():
    # Llama-2-7B's MLP matrix, abstractly: bytes counted from the pytree's leaves.
    q = jax.eval_shape(lambda w: quantize_nf4(w), jax.ShapeDtypeStruct((4096, 11008), jnp.bfloat16))
    per_weight = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(q)) / (4096 * 11008)
    assert per_weight <= 0.52, per_weight
    single = jax.eval_shape(
        lambda w: quantize_nf4(w, double_quant=False), jax.ShapeDtypeStruct((4096, 11008), jnp.bfloat16)
    )
    assert sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(single)) / (4096 * 11008) == pytest.approx(
        0.5 + 4 / 64
    )


def test_block_size_that_does_not_divide_is_refused_with_the_weight_name():
    with pytest.raises(QuantizationError, match=r"layers/wq.*block_size=64 does not divide"):
        quantize_nf4(jnp.ones((3, 10)), 64, name="layers/wq")
    with pytest.raises(QuantizationError, match="even"):
        quantize_nf4(jnp.ones((64, 64)), 63)


@pytest.mark.slow
def test_matmul_gradient_and_residuals():
    w = jnp.asarray(_normal((2, 64, 96), seed=3))
    q = quantize_nf4(w)
    x = jnp.asarray(_normal((2, 5, 64), seed=4))
    dense = jax.jit(lambda q: q.dequantize())(q)

    def loss(x, layer):
        return jnp.sum(jnp.sin(nf4_matmul(x, jax.tree_util.tree_map(lambda v: v[layer], q))))

    def loss_dense(x, layer):
        return jnp.sum(jnp.sin(x @ dense[layer]))

    for layer in range(2):
        got = jax.jit(jax.grad(loss), static_argnums=1)(x[layer], layer)
        want = jax.jit(jax.grad(loss_dense), static_argnums=1)(x[layer], layer)
        assert float(jnp.abs(got - want).max() / jnp.abs(want).max()) <= 1e-5
    # The backward pass keeps the packed bytes, not a dequantized [in, out] float copy (nor x).
    _, vjp = jax.vjp(lambda x: nf4_matmul(x, jax.tree_util.tree_map(lambda v: v[0], q)), x[0])
    float_residuals = [
        r.shape for r in jax.tree_util.tree_leaves(vjp) if jnp.issubdtype(r.dtype, jnp.floating) and r.size > 1
    ]
    assert (64, 96) not in float_residuals and (5, 64) not in float_residuals, float_residuals


@pytest.mark.slow
def test_a_second_level_scale_without_its_offset_is_refused():
    q = quantize_nf4(jnp.asarray(_normal((64, 64), seed=3)), double_quant=True)
    with pytest.raises(QuantizationError, match="absmax_scale needs absmax_offset"):
        dataclasses.replace(q, absmax_offset=None).block_absmax()
