"""Remat policies: every policy gives full remat's loss and gradients; the recompute FLOPs the
compile report charges each policy are the dots its differentiated program really recomputes."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jcore

from marin_lab.cluster.tpu_compile import block_recompute_flops, host_offload_bytes, remat_extra_flops
from marin_lab.main.train_lm import validate_config
from marin_lab.models.llama import (
    REMAT_POLICIES,
    SELECTIVE_POLICIES,
    LlamaConfig,
    activation_widths,
    check_remat,
    init_params,
    lm_loss,
)
from marin_lab.training import DataConfig, TrainingError, TrainLmConfig
from marin_lab.training.memory_plan import plan_memory

NEW = [p for p in REMAT_POLICIES if p not in ("full", "save_dots", "offload_dots")]


def _model(layers: int = 4) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=64,
        hidden_dim=32,
        intermediate_dim=96,
        num_layers=layers,
        num_heads=4,
        num_kv_heads=2,
        max_seq_len=64,
    )


def _loss_fn(cfg: LlamaConfig, remat):
    tokens = jax.random.randint(jax.random.key(1), (2, 33), 0, cfg.vocab_size)
    args = (tokens[:, :-1], tokens[:, 1:], jnp.ones((2, 32)), cfg)
    return lambda p: lm_loss(p, *args, gradient_checkpointing=remat, loss_chunk_size=None)[0]


@pytest.mark.slow  # eight policies' gradients, compiled as one program
@pytest.mark.parametrize("layers", [3])  # every_other: one scanned pair and an odd last block
def test_every_policy_gives_full_remats_loss_and_gradients(layers):
    """fp32 on CPU; a policy only changes what is kept for the backward pass, so the loss and every
    gradient agree with full remat's to fp32 rounding: |diff| <= 1e-6 + 1e-5 |value| (measured: at most
    1.2e-8 on gradients of order 1e-2)."""
    cfg = _model(layers)
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.key(0))
    # Every policy's loss and gradients in one compiled program (one compile instead of eight; each
    # policy's remat stays its own, as jax.checkpoint's barriers keep XLA from merging them).
    results = jax.jit(lambda p: [jax.value_and_grad(_loss_fn(cfg, policy))(p) for policy in (True, *NEW)])(params)
    ref_loss, ref_grads = results[0]
    for policy, (loss, grads) in zip(NEW, results[1:], strict=True):
        np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-6, err_msg=policy)
        for (path, a), b in zip(
            jax.tree_util.tree_leaves_with_path(ref_grads), jax.tree_util.tree_leaves(grads), strict=True
        ):
            np.testing.assert_allclose(
                np.asarray(b), np.asarray(a), atol=1e-6, rtol=1e-5, err_msg=f"{policy} {jax.tree_util.keystr(path)}"
            )


def _dot_flops(jaxpr, mult: int = 1) -> int:
    """FLOPs of every dot_general of a jaxpr, a scan's body counted once per iteration."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (contracting, _), _ = eqn.params["dimension_numbers"]
            k = math.prod(eqn.invars[0].aval.shape[i] for i in contracting)
            total += mult * 2 * math.prod(eqn.outvars[0].aval.shape) * k
        inner = mult * (eqn.params["length"] if eqn.primitive.name == "scan" else 1)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(sub, jcore.ClosedJaxpr):
                    total += _dot_flops(sub.jaxpr, inner)
                elif isinstance(sub, jcore.Jaxpr):
                    total += _dot_flops(sub, inner)
    return total


@pytest.mark.parametrize("layers", [4, 3])
def test_recompute_flops_are_the_dots_the_backward_pass_recomputes(layers):
    """The report's recompute charge per policy equals (dots of the policy's gradient program) minus
    (dots of the same program without remat): what a policy drops is recomputed, and nothing else
    (the w_down matmul, whose output no gradient needs, is not)."""
    cfg = _model(layers)
    params = jax.eval_shape(lambda key: init_params(cfg, key), jax.random.key(0))  # tracing needs shapes only
    plain = _dot_flops(jax.make_jaxpr(jax.grad(_loss_fn(cfg, False)))(params).jaxpr)
    charged = {}
    for policy in REMAT_POLICIES:
        measured = _dot_flops(jax.make_jaxpr(jax.grad(_loss_fn(cfg, policy)))(params).jaxpr) - plain
        charged[policy] = remat_extra_flops(cfg, policy, tokens=2 * 32, seq_len=32)
        assert charged[policy] == measured, policy
    assert remat_extra_flops(cfg, False, 64, 32) == 0
    # Keeping more recomputes less.
    assert charged["full"] > charged["save_attn_mlp_in"] > charged["save_mlp_in_gate"] > charged["save_mlp"]
    assert charged["save_mlp"] == charged["offload_mlp"] > charged["save_dots"] > 0


def test_8b_ceilings_under_splash_attention():
    """Llama-3-8B at 4096 tokens with Splash attention (one fused op, always recomputed): the MFU
    ceiling model FLOPs / (model + recompute) of each policy, as docs/benchmarks.md quotes them."""
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
    model = cfg.flops_per_token(4096)

    def ceiling(policy):
        return model / (model + remat_extra_flops(cfg, policy, 1, 4096, "splash"))

    assert ceiling("full") == pytest.approx(0.807, abs=1e-3)
    assert ceiling("save_qkv_mlp_in") == pytest.approx(0.842, abs=1e-3)
    assert ceiling("save_mlp_gate") == pytest.approx(0.857, abs=1e-3)
    assert ceiling("save_mlp_in_gate") == pytest.approx(0.873, abs=1e-3)
    assert ceiling("every_other") == pytest.approx(0.893, abs=1e-3)
    assert ceiling("save_mlp") == ceiling("offload_mlp") == pytest.approx(0.932, abs=1e-3)
    # Fused attention needs its statistics too: keeping its output saves only wo (via mlp_in).
    assert (
        block_recompute_flops(cfg, "save_attn_mlp_in", 4096, "splash")
        == block_recompute_flops(cfg, "full", 4096, "splash") - 2 * 4096 * 4096
    )


def test_host_offload_bytes_and_memory_plan_follow_the_policy():
    cfg = _model()
    widths = activation_widths(cfg)
    assert (
        host_offload_bytes(cfg, "offload_mlp", 100, 2)
        == (32 + 96 + 96) * 4 * 100 * 2
        == sum(widths[n] for n in SELECTIVE_POLICIES["offload_mlp"][1]) * 4 * 100 * 2
    )
    assert host_offload_bytes(cfg, "save_mlp", 100, 2) == host_offload_bytes(cfg, True, 100, 2) == 0

    def activations(policy):
        plan = plan_memory(cfg, mode="full", num_devices=1, batch_size=2, seq_len=32, gradient_checkpointing=policy)
        return plan.device["activations"], plan.host.get("saved activations", 0)

    full, none = activations(True)[0], activations(False)[0]
    assert full < activations("save_attn_mlp_in")[0] < activations("save_mlp_in_gate")[0] < activations("save_mlp")[0]
    assert full < activations("every_other")[0] < none
    # The gate and up projections: 96 elements each per token, 2 x 32 tokens, 4 layers, fp32 here... in bf16.
    assert activations("save_mlp")[0] - activations("save_mlp_in_gate")[0] == 96 * 2 * 32 * 4 * 2
    assert activations("offload_mlp") == (full, (32 + 96 + 96) * 2 * 32 * 4 * 2)


def test_an_unknown_policy_is_one_line_naming_the_field():
    for good in (True, False, *REMAT_POLICIES):
        check_remat(good)
    with pytest.raises(ValueError, match=r"gradient_checkpointing='save_everything': expected True, False or one of"):
        check_remat("save_everything")
    config = TrainLmConfig(
        output_path="out",
        data=DataConfig(caches={}),
        model=_model(),
        seq_len=32,
        gradient_checkpointing="save_everything",
    )  # type: ignore[arg-type]
    with pytest.raises(TrainingError, match=r"gradient_checkpointing='save_everything'.*save_mlp_gate"):
        validate_config(config)
    validate_config(
        TrainLmConfig(
            output_path="out",
            data=DataConfig(caches={}),
            model=_model(),
            seq_len=32,
            gradient_checkpointing="save_mlp_gate",
        )
    )
