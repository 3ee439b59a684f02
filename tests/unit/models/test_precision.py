"""marin_lab.precision on its own: fp8 matmul accuracy and gradients, scale invariants, scaled
Adam, the gradient-rescale point, and the policy's bad-input errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments.paired import cosine, relative_error
from marin_lab.precision import (
    PrecisionConfig,
    PrecisionError,
    ScaledArray,
    dequantize,
    dynamic_rescale_l2,
    dynamic_rescale_max,
    fp8_matmul,
    moment_bytes,
    quantize,
    rescale_grad,
    scale_by_stored_adam,
    scaled_add,
    scaled_dot,
    scaled_sum,
)
from marin_lab.precision.fp8 import STAT_NAMES, empty_meta
from marin_lab.precision.scaled import mul_pow2


def _normal(seed: int, shape: tuple[int, ...]) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def _is_pow2(s: jax.Array) -> bool:
    mantissa, _ = np.frexp(np.asarray(s, np.float32))
    return bool(np.all(mantissa == 0.5))


def _stats(x: jax.Array, w: jax.Array) -> dict[str, float]:
    """fp8_matmul's per-call statistics (the cotangent of its meta argument)."""
    meta = empty_meta(None)
    got = jax.grad(lambda m: jnp.sum(fp8_matmul(x, w, m)))(meta)
    return dict(zip(STAT_NAMES, np.asarray(got.stats).tolist(), strict=True))


@pytest.mark.slow
def test_fp8_matmul_is_within_5_percent_of_fp32():
    x, w = _normal(0, (256, 256)), _normal(1, (256, 256))
    assert relative_error(fp8_matmul(x, w), x @ w) <= 0.05


@pytest.mark.slow
def test_fp8_matmul_with_an_outlier_stays_finite_without_saturation():
    x, w = _normal(0, (256, 256)), _normal(1, (256, 256))
    x = x.at[3, 7].multiply(1000.0)
    y = fp8_matmul(x, w)
    assert bool(jnp.all(jnp.isfinite(y)))
    stats = _stats(x, w)
    assert stats["saturated_x"] == stats["saturated_w"] == stats["saturated_g"] == 0
    assert stats["amax_x"] == pytest.approx(float(jnp.max(jnp.abs(x))))
    # The outlier costs the small values resolution, not range: the product is still close.
    assert relative_error(y, x @ w) <= 0.1


@pytest.mark.parametrize(
    ("x_dtype", "w_dtype"), [(jnp.float32, jnp.float32), (jnp.bfloat16, jnp.float32), (jnp.bfloat16, jnp.bfloat16)]
)
@pytest.mark.slow
def test_fp8_gradients_match_fp32_reference(x_dtype, w_dtype):
    x, w = _normal(2, (4, 64, 128)).astype(x_dtype), _normal(3, (128, 96)).astype(w_dtype)
    target = _normal(4, (4, 64, 96))

    def loss(fn, x, w):
        return jnp.sum((fn(x, w).astype(jnp.float32) - target) ** 2)

    dx, dw = jax.grad(lambda x, w: loss(fp8_matmul, x, w), argnums=(0, 1))(x, w)
    ref_dx, ref_dw = jax.grad(
        lambda x, w: loss(lambda a, b: a.astype(jnp.float32) @ b.astype(jnp.float32), x, w), argnums=(0, 1)
    )(x, w)
    assert dx.dtype == x.dtype and dw.dtype == w.dtype
    assert cosine(dx, ref_dx) >= 0.99 and cosine(dw, ref_dw) >= 0.99


def test_fp8_matmul_refuses_shapes_that_do_not_contract():
    with pytest.raises(ValueError, match=r"x \(4, 8\) and w \(16, 8\) do not contract"):
        fp8_matmul(jnp.ones((4, 8)), jnp.ones((16, 8)))


@pytest.mark.slow
def test_delayed_scaling_saturates_above_the_history_and_shifts_it():
    x, w = _normal(0, (32, 64)), _normal(1, (64, 16))
    meta = empty_meta(4)
    meta = type(meta)(meta.history.at[:, 1].set(0.5), meta.stats)  # earlier steps saw amax 0.5
    new = jax.grad(lambda m: jnp.sum(fp8_matmul(x, w, m)))(meta)
    stats = dict(zip(STAT_NAMES, np.asarray(new.stats).tolist(), strict=True))
    assert stats["saturated_x"] > 0 and stats["saturated_w"] > 0  # |N(0,1)| > 0.5 * 448/448 clips
    np.testing.assert_allclose(new.history[:, 0], [stats["amax_x"], stats["amax_w"], stats["amax_g"]])
    np.testing.assert_array_equal(new.history[:, 2], 0.5)  # shifted by one, oldest dropped


# --- scale invariants (Scalify) ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.float16])
@pytest.mark.parametrize("k", [-20, -3, 1, 17])
def test_multiplying_by_a_power_of_two_changes_only_the_scale(dtype, k):
    x = _normal(5, (64, 32)) * 3.7
    a, b = quantize(x, dtype), quantize(x * 2.0**k, dtype)
    np.testing.assert_array_equal(np.asarray(a.data, np.float32), np.asarray(b.data, np.float32))
    assert float(b.scale) == float(a.scale) * 2.0**k
    m = mul_pow2(a, k)
    assert m.data is a.data and float(m.scale) == float(a.scale) * 2.0**k


def _scaled(seed: int, shape: tuple[int, ...], exponent: int) -> ScaledArray:
    return ScaledArray(_normal(seed, shape), jnp.asarray(2.0**exponent, jnp.float32))


@pytest.mark.slow
def test_scaled_ops_equal_the_unscaled_result_with_power_of_two_scales():
    a, b, c = _scaled(6, (16, 48), 5), _scaled(7, (48, 24), -9), _scaled(8, (16, 48), 12)
    dot = scaled_dot(a, b)
    np.testing.assert_allclose(dot.to_array(), a.to_array() @ b.to_array(), rtol=1e-5, atol=1e-5 * 2.0**-4)
    add = scaled_add(a, c)
    np.testing.assert_allclose(add.to_array(), a.to_array() + c.to_array(), rtol=1e-6)
    total = scaled_sum(a, axis=1)
    np.testing.assert_allclose(total.to_array(), a.to_array().sum(axis=1), rtol=1e-5, atol=1e-3)
    assert dot.scale == 2.0**5 * 2.0**-9 * 4  # s_a * s_b * pow2(sqrt(48)) = 2^-4 * 4
    assert add.scale == 2.0**12  # pow2(sqrt(2^10 + 2^24)) rounds down to 2^12
    assert total.scale == 2.0**5 * 4
    for out in (dot, add, total):
        assert _is_pow2(out.scale)


@pytest.mark.slow
def test_dynamic_rescale_moves_a_power_of_two_into_the_scale_exactly():
    a = ScaledArray(_normal(9, (8, 8)) * 1e-3, jnp.asarray(2.0**7, jnp.float32))
    for rescale in (dynamic_rescale_max, dynamic_rescale_l2):
        r = rescale(a)
        np.testing.assert_array_equal(r.to_array(), a.to_array())
        assert _is_pow2(r.scale) and float(r.scale) < float(a.scale)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.float16])
def test_quantize_scales_are_powers_of_two_and_never_overflow(dtype):
    for exponent in (-30, 0, 30):
        x = _normal(10, (128,)) * 2.0**exponent
        q = quantize(x, dtype)
        assert _is_pow2(q.scale)
        assert bool(jnp.all(jnp.isfinite(q.data.astype(jnp.float32))))
        assert float(jnp.max(jnp.abs(q.data.astype(jnp.float32)))) <= float(jnp.finfo(dtype).max)
        assert relative_error(dequantize(q), x) < 0.2


# --- Adam with float16-scaled moments ---------------------------------------------------------


@pytest.mark.slow
def test_float16_scaled_adam_tracks_optax_with_half_the_moment_bytes():
    params = {"w": jnp.zeros((64, 32)), "b": jnp.zeros((32,))}
    ref_tx = optax.scale_by_adam(b1=0.9, b2=0.95, eps=1e-8)
    tx = scale_by_stored_adam(0.9, 0.95, 1e-8, "float16_scaled")
    ref_state, state = ref_tx.init(params), tx.init(params)
    ref_update, update = jax.jit(ref_tx.update), jax.jit(tx.update)
    for i in range(30):
        # Gradients of a late-training size (~1e-5): fp32 Adam's v ~1e-10 is far below fp16's range.
        grads = jax.tree_util.tree_map(lambda p, i=i: 1e-5 * _normal(100 + i, p.shape), params)
        ref_up, ref_state = ref_update(grads, ref_state)
        up, state = update(grads, state)
        for name in params:
            assert relative_error(up[name], ref_up[name]) < 2e-3
    ref_bytes, got = moment_bytes(ref_state), moment_bytes(state)
    assert got["data"] * 2 == ref_bytes["data"]
    assert got["scales"] == 4 * 2 * len(params)  # one fp32 scale per tensor and moment


def test_unknown_moment_format_is_refused():
    with pytest.raises(ValueError, match="moments='float8' is not one of"):
        scale_by_stored_adam(0.9, 0.95, 1e-8, "float8")


# --- the dynamic-rescale point ------------------------------------------------------------------


@pytest.mark.slow
def test_rescale_point_keeps_a_float16_gradient_from_flushing_to_zero():
    logits = _normal(11, (4, 1000)).astype(jnp.float16)

    def loss(logits, probe, rescale):
        logits32 = logits.astype(jnp.float32)  # as in lm_loss: the point sits on the fp32 logits
        if rescale:
            logits32 = rescale_grad(logits32, probe)
        # A mean over 2^24 "positions": each logit's gradient ~6e-9, below float16's subnormals.
        return jnp.sum(logits32) * 2.0**-24 * 1e-1

    plain = jax.grad(loss)(logits, jnp.zeros(()), False)
    assert float(jnp.max(jnp.abs(plain.astype(jnp.float32)))) == 0  # flushed
    g, s = jax.grad(loss, argnums=(0, 1))(logits, jnp.zeros(()), True)
    assert _is_pow2(s) and 1 <= float(jnp.max(jnp.abs(g.astype(jnp.float32)))) < 2
    np.testing.assert_allclose(np.asarray(g, np.float32) / float(s), 0.1 * 2.0**-24, rtol=1e-3)


# --- the policy's bad input -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "match"),
    [
        (PrecisionConfig(matmul="fp9"), r"precision.matmul='fp9' is not one of"),
        (PrecisionConfig(optimizer_state="fp8"), r"precision.optimizer_state='fp8' is not one of"),
        (PrecisionConfig(matmul="fp8_delayed", amax_history_len=0), r"amax_history_len=0 must be at least 1"),
        (PrecisionConfig(fp8_lm_head=True), r"fp8_lm_head=True needs precision.matmul 'fp8'"),
    ],
)
def test_bad_policy_names_the_field(policy, match):
    with pytest.raises(PrecisionError, match=match):
        policy.validate()


def test_mxfp8_where_the_backend_cannot_run_it_is_refused_naming_the_alternative():
    from marin_lab.precision.mx import backend_error

    reason = backend_error()
    assert reason or jax.default_backend() != "cpu"  # jax has no CPU lowering of scaled_dot_general
    if reason:
        with pytest.raises(PrecisionError, match=r"precision.matmul='mxfp8' cannot run on this backend.*Use 'fp8'"):
            PrecisionConfig(matmul="mxfp8").check_backend()
    else:
        PrecisionConfig(matmul="mxfp8").check_backend()


@pytest.mark.parametrize(
    "backend, flags, warned",
    [
        ("gpu", "", True),
        ("gpu", "--xla_gpu_autotune_level=0", True),
        ("gpu", "--xla_gpu_enable_triton_gemm=false", False),
        ("cpu", "", False),
    ],
)
def test_fp8_on_gpu_without_the_triton_flag_is_warned(backend, flags, warned):
    from marin_lab.precision.fp8 import gpu_flags_warning

    message = gpu_flags_warning(backend, flags)
    assert (message is not None) == warned
    if warned:
        assert "XLA_FLAGS=--xla_gpu_enable_triton_gemm=false" in message
        assert "--xla_disable_hlo_passes=dot-merger" in message
