"""The scalify policy: the interpreter's rules against jax.grad, float8 casts with no amax in the
train step, per-layer scale statistics, and its bad inputs (unknown policy, op without a rule,
float16 overflow)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.paired import Variant, paired_curves, relative_error
from marin_lab.models.llama import init_params, lm_loss
from marin_lab.precision import PrecisionConfig, PrecisionError, ScaledArray
from marin_lab.precision.audit import amax_fed_float8_casts, scan_counts
from marin_lab.precision.scalify import per_layer_scale, scalify, tensor_scale, to_values
from marin_lab.precision.scalify_train import _layer_stats, f8_linear, metrics, overflow_message
from marin_lab.testing.training import synthetic_documents, tiny_model
from marin_lab.training.mesh import MeshConfig
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.training.train_step import StepSettings, make_init_fn, make_train_step, state_shardings

# Small enough to trace and compile in seconds; every op of the Llama block is still there.
SMALL = tiny_model(
    vocab_size=64, hidden_dim=32, intermediate_dim=64, num_heads=2, num_kv_heads=1, num_layers=2, max_seq_len=16
)


def _scaled(params):
    return {
        k: ({n: per_layer_scale(w) for n, w in v.items()} if k == "layers" else tensor_scale(v))
        for k, v in params.items()
    }


@pytest.mark.parametrize(
    ("compute", "bound", "chunk"), [(jnp.float32, 1e-5, None), (jnp.float16, 5e-3, None), (jnp.float32, 1e-5, 4)]
)
@pytest.mark.slow
def test_interpreted_loss_and_gradients_match_jax_grad(compute, bound, chunk):
    """Every op of the decoder's forward and backward pass (and of the chunked loss) has a rule
    that keeps its value."""
    params = init_params(SMALL, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 9), 0, SMALL.vocab_size)

    def loss(p, dtype):
        return lm_loss(
            p, tokens[:, :-1], tokens[:, 1:], jnp.ones((2, 8)), SMALL, compute_dtype=dtype, loss_chunk_size=chunk
        )[0]

    want_loss, want = jax.value_and_grad(lambda p: loss(p, jnp.float32))(params)

    @jax.jit
    def run(sp):
        (value, grads), stats = scalify(jax.value_and_grad(lambda p: loss(p, compute)))(sp)
        return to_values(value, jnp.float32), to_values(grads, jnp.float32), [s.finite for s in stats.scans]

    got_loss, got, finite = run(_scaled(params))
    assert abs(float(got_loss) - float(want_loss)) <= bound * float(want_loss)
    for path, g in jax.tree_util.tree_leaves_with_path(want):
        mine = got
        for k in path:
            mine = mine[k.key]
        assert relative_error(mine, g) <= bound, jax.tree_util.keystr(path)
    # the forward and backward layer scans (and the chunked loss's own two)
    assert len(finite) == (2 if chunk is None else 4) and all(bool(jnp.all(f)) for f in finite)


@pytest.mark.slow
def test_a_scan_renormalises_its_carry_before_the_first_iteration():
    """The gradient entering the top layer's backward comes from the loss with data far from 1;
    the scan's entry rescale brings it to unit RMS before that layer's float8 casts. Here a carry
    of data 2^-12 (scale 1) goes through an e4m3 cast in the first iteration: without the entry
    rescale every value would flush to zero (e4m3's smallest subnormal is 2^-9)."""
    x = jax.random.normal(jax.random.key(0), (8, 16), jnp.float32).astype(jnp.float16) * jnp.float16(2.0**-12)

    def body(h, _):
        return h.astype(jnp.float8_e4m3fn).astype(h.dtype), None

    def model(h):
        return jax.lax.scan(body, h, None, length=3)[0]

    out, stats = scalify(model)(ScaledArray(x, jnp.ones((), jnp.float32)))
    assert relative_error(to_values(out, jnp.float32), x.astype(jnp.float32)) <= 0.1
    (scan,) = stats.scans
    log2 = {round(float(v), 4) for v in scan.log2_scale}  # the power of two moved into the scale, once
    assert len(log2) == 1 and log2 <= {-13.0, -12.0}


def test_narrowing_float32_data_to_float16_moves_its_rms_into_the_scale():
    """Float32 arithmetic between rescale points can leave rows far from the predicted scale (the
    gradient of an RMSNorm's input is 1/rms per row: a small embedding row gets a large one). The
    cast to float16 is a rescale point: here one row is 2^17 (float16 holds up to 65504) and the
    others 1, which only fits after the data's RMS has moved into the scale."""
    gains = jnp.ones((8, 16), jnp.float32).at[0].set(2.0**17)

    def model(h, g):
        return (h.astype(jnp.float32) * g).astype(jnp.float16)

    out, _ = scalify(model)(ScaledArray(jnp.ones((8, 16), jnp.float16), jnp.ones((), jnp.float32)), gains)
    assert out.data.dtype == jnp.float16
    values = to_values(out, jnp.float32)
    assert bool(jnp.all(jnp.isfinite(values)))
    assert relative_error(values, gains) <= 1e-3


@pytest.mark.slow
def test_float8_linear_under_scalify_is_a_cast_of_scaled_data():
    """Tiny values (1e-6) pass through float8 with their scale: the cast never sees them unscaled."""
    x = jax.random.normal(jax.random.key(0), (16, 64)) * 1e-6
    w = jax.random.normal(jax.random.key(1), (64, 32)) * 1e-3
    out, _ = scalify(f8_linear)(tensor_scale(x), tensor_scale(w))
    assert relative_error(to_values(out, jnp.float32), x @ w) <= 0.1
    assert float(jnp.max(jnp.abs(f8_linear(x, w)))) == 0.0  # unscaled, the same cast flushes all to zero


def _traced_step(policy: PrecisionConfig, compute: str):
    mesh = MeshConfig(param_sharding="replicated").build(jax.devices()[:1])
    opt = OptimizerConfig()
    tx = opt.build(moments=policy.optimizer_state)
    shard = state_shardings(SMALL, tx, mesh, "replicated", np.float32, policy)
    state = jax.eval_shape(make_init_fn(SMALL, tx, shard, np.float32, policy), jax.random.key(0))
    step = make_train_step(
        SMALL, tx, opt.lr_schedule(10), StepSettings(compute, "float32", precision=policy), mesh, shard
    )
    return step.trace(state, jax.ShapeDtypeStruct((4, 9), np.int32))


@pytest.mark.slow
def test_compiled_step_has_no_amax_reduction_feeding_a_float8_cast():
    """The program jit compiles for a scalify step casts to float8 35 times (7 projections x (x, w
    forward; gradient, w, x backward)) and none of those casts depends on a reduce-max of abs; the
    amax policy's program, as the check's control, has one behind every cast."""
    scalify_count = amax_fed_float8_casts(_traced_step(PrecisionConfig(matmul="scalify"), "float16").jaxpr)
    assert scalify_count.float8_casts == 35 and scalify_count.amax_fed == 0
    amax_count = amax_fed_float8_casts(_traced_step(PrecisionConfig(matmul="fp8"), "bfloat16").jaxpr)
    assert amax_count.float8_casts == 21 and amax_count.amax_fed == 21


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two compiled steps; on a busy 2-core host (load 30-40) past the default 600 s
def test_scalify_with_float16_masters_trains_within_2_percent_of_fp32():
    """The narrowest setting: float16 data and master weights, fp16-scaled Adam, float8 matmuls.
    (fp32 masters: tests/unit/models/test_precision_training.py and benchmarks/fp8_accuracy.py.)"""
    tokens = np.concatenate(synthetic_documents(200, seed=0, vocab=SMALL.vocab_size))
    variants = (
        Variant("fp32"),
        Variant(
            "scalify+fp16",
            "float16",
            PrecisionConfig(matmul="scalify", master_weights="float16_scaled", optimizer_state="float16_scaled"),
        ),
    )
    curves = paired_curves(
        SMALL,
        OptimizerConfig(learning_rate=3e-3, warmup=2, decay=0.2),
        variants,
        (0,),
        tokens,
        steps=30,
        batch_size=4,
        seq_len=8,
    )
    base, losses = curves.losses[("fp32", 0)], curves.losses[("scalify+fp16", 0)]
    assert np.all(np.isfinite(losses))
    assert base[-5:].mean() < 0.9 * base[0]  # it learned something (4.16 -> 3.44 nats for fp32)
    assert abs(losses[-5:].mean() / base[-5:].mean() - 1) <= 0.02
    last = curves.last_metrics[("scalify+fp16", 0)]
    assert last["scalify/nonfinite"] == 0
    for layer in ("layer00", "layer01"):  # each a power of two: an integer log2
        act, grad = last[f"scalify/{layer}/act_scale_log2"], last[f"scalify/{layer}/grad_scale_log2"]
        assert act == int(act) and grad == int(grad) and -60 < grad < 10 and -60 < act < 10
    assert curves.moment_bytes["scalify+fp16"]["data"] * 2 == curves.moment_bytes["fp32"]["data"]


@pytest.mark.slow
def test_op_without_a_rule_names_the_op_and_the_layer():
    def layer_body(x, w):
        return jnp.cumsum(x * w, axis=-1), None

    def model(x, ws):
        return jax.lax.scan(layer_body, x, ws)[0].sum()

    x, ws = jnp.ones((4, 8)), jnp.ones((3, 4, 8))
    with pytest.raises(PrecisionError, match=r"no scale-propagation rule for op 'cumsum' .*layer_body.*scan over 3"):
        scalify(model)(tensor_scale(x), per_layer_scale(ws))


@pytest.mark.slow
def test_float16_overflow_is_one_line_naming_the_layer():
    """A layer whose float16 data overflows is named, instead of a NaN loss further on."""
    # A plain (unscaled) factor applied twice within layer 2: 6e4 fits float16, 3.6e9 does not,
    # and no rescale point sits between the two products.
    gains = jnp.ones((4, 8), jnp.float16).at[2].set(6e4)

    def model(x, g):
        return jax.lax.scan(lambda h, gi: ((h * gi) * gi, None), x, g)[0]

    _, stats = scalify(model)(ScaledArray(jnp.ones((2, 8), jnp.float16), jnp.ones((), jnp.float32)), gains)
    values = {k: float(v) for k, v in metrics(_layer_stats(stats, 4)).items()}
    assert values["scalify/layer01/nonfinite_act"] == 0 and values["scalify/layer02/nonfinite_act"] == 1
    message = overflow_message(values, step=7)
    assert message.startswith("precision 'scalify': the residual stream of layer02 is not finite at step 7")
    assert "\n" not in message and "compute_dtype 'bfloat16'" in message
    assert overflow_message({"scalify/nonfinite": 0.0}, step=7) is None


@pytest.mark.parametrize(
    ("policy", "match"),
    [
        (PrecisionConfig(matmul="scalifi"), r"precision.matmul='scalifi' is not one of .*'scalify'"),
        (PrecisionConfig(matmul="scalify", master_weights="float8"), r"precision.master_weights='float8'"),
        (PrecisionConfig(master_weights="float16_scaled"), r"needs precision.matmul='scalify'"),
        (PrecisionConfig(matmul="scalify", rescale_logits_grad=True), r"rescales every layer's gradient"),
    ],
)
def test_bad_scalify_policy_is_one_clear_line(policy, match):
    with pytest.raises(PrecisionError, match=match):
        policy.validate()


@pytest.mark.slow
def test_while_loop_and_remat_are_interpreted():
    x = jax.random.normal(jax.random.key(2), (8, 16)) * 1e-3

    def doubled_until(v):
        return jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0), (0, v))[1]

    out, _ = scalify(doubled_until)(tensor_scale(x))
    np.testing.assert_allclose(to_values(out, jnp.float32), x * 8, rtol=1e-6)

    def loss(v):
        return jax.checkpoint(lambda y: jnp.tanh(y) * y)(v).sum()

    grad, _ = scalify(jax.grad(loss))(tensor_scale(x))
    np.testing.assert_allclose(to_values(grad, jnp.float32), jax.grad(loss)(x), rtol=1e-5, atol=1e-9)


def test_scan_counts_read_both_forms_of_a_scan_equation():
    """JAX up to 0.10 names a scan's const and carry counts; 0.11 packs its inputs as one flat
    tree of (consts, carry, xs) instead (stood in for here by an object with the same `unpack`)."""
    jaxpr = jax.make_jaxpr(lambda c, xs: jax.lax.scan(lambda h, x: (h * c + x, h), c, xs))(1.0, jnp.ones(3))
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    assert scan_counts(eqn.params) == (1, 1)  # c is closed over (a const) and is the initial carry

    class Packed:
        def unpack(self):
            return [0, 1], [2], [3, 4, 5]

    assert scan_counts({"ft_in": Packed(), "length": 3}) == (2, 1)
