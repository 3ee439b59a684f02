"""QLoRA under FSDP moves 4-bit bytes: the compiled fine-tune step on 4 CPU devices gathers the
packed NF4 weights (uint8) inside the layer scan and never gathers batch-shaped float activations;
each device holds 1/4 of the packed base (counted from its addressable shards).

Runs in a subprocess: the 4 simulated CPU devices are fixed when JAX starts."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, re
import jax, jax.numpy as jnp, numpy as np
from marin_lab.peft.lora import LoraConfig
from marin_lab.training.base_model import QuantConfig, quantize_params
from marin_lab.training.finetune import _programs, _Struct
from marin_lab.training.finetune_state import StepPlan, frozen_base, init_trainable, make_loss_fn
from marin_lab.training.mesh import MeshConfig, batch_sharding
from marin_lab.models.llama import LlamaConfig, init_params
from marin_lab.training.optimizer import OptimizerConfig

B, T = 8, 32
model = LlamaConfig(vocab_size=256, hidden_dim=64, intermediate_dim=192, num_layers=2, num_heads=4,
                    num_kv_heads=2, max_seq_len=64)
lora = LoraConfig(rank=4, alpha=8.0, dropout=0.0)
plan = StepPlan("qlora", model, lora, "float32", False, False, 0)
params = quantize_params(init_params(model, jax.random.key(0)), QuantConfig())
rng = np.random.default_rng(0)
tokens_np = rng.integers(0, 256, size=(B, T + 1)).astype(np.int32)
mask_np = np.ones((B, T + 1), np.int32)

def run(offload):
    mesh_config = MeshConfig(data=1, fsdp=4)
    frozen = frozen_base(params, "qlora", "float32", offload)
    trainable = init_trainable(plan, params, jax.random.key(1), jnp.float32)
    abstract = lambda t: jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), t)
    state_sh, frozen_sh, opt_init, step, _ = _programs(
        plan, OptimizerConfig(learning_rate=1e-3, warmup=0), 10, mesh_config, "fsdp",
        _Struct(abstract(frozen)), _Struct(abstract(trainable)))
    placed = jax.device_put(frozen, frozen_sh)
    t = jax.device_put(trainable, state_sh["trainable"])
    state = {"trainable": t, "opt_state": opt_init(t),
             "step": jax.device_put(jnp.zeros((), jnp.int32), state_sh["step"])}
    mesh = mesh_config.build()
    tok = jax.make_array_from_callback(tokens_np.shape, batch_sharding(mesh), lambda i: tokens_np[i])
    msk = jax.make_array_from_callback(mask_np.shape, batch_sharding(mesh), lambda i: mask_np[i])
    hlo = step.lower(state, placed, tok, msk).compile().as_text()
    gathers = [l for l in hlo.splitlines() if re.search(r"\ball-gather(-start)?\(", l) and "=" in l]
    shapes = [re.findall(r"(\w+)\[([\d,]*)\]", l.split("=", 1)[1].split("all-gather", 1)[0]) for l in gathers]
    out_shapes = [s[-1] for s in shapes if s]
    nf4 = [placed["layers"][n].inner if offload else placed["layers"][n] for n in ("wq", "w_up")]
    per_device = {f: [sum(s.data.nbytes for s in getattr(q, f).addressable_shards if s.device == jax.devices()[0])
                      for q in nf4] for f in ("packed", "absmax")}
    total = {f: [getattr(q, f).nbytes for q in nf4] for f in ("packed", "absmax")}
    kinds = sorted({getattr(q, "packed").sharding.memory_kind or "device" for q in nf4})
    _, metrics = step(state, placed, tok, msk)
    return {"gathers": out_shapes, "per_device": per_device, "total": total, "kinds": kinds,
            "loss": float(metrics["loss"]), "host_loss": host_loss}

# The unsharded loss on one device, as one compiled program (op by op, each op would compile).
host_loss = float(jax.jit(make_loss_fn(plan), static_argnums=4)(
    init_trainable(plan, params, jax.random.key(1), jnp.float32),
    frozen_base(params, "qlora", "float32", False), jnp.asarray(tokens_np), jnp.asarray(mask_np), None)[0])
print(json.dumps({variant: run(variant == "offload") for variant in ("device", "offload")}))
"""


@pytest.fixture(scope="module")
def results() -> dict:
    """Both variants from one process (one JAX start and one import of the trainer)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=580)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["device", "offload"])
def test_qlora_fsdp_gathers_packed_weights_not_activations(results, variant):
    """`offload`: the projections live in pinned host memory and are fetched, then gathered."""
    run = results[variant]
    dtypes = [dtype for dtype, _ in run["gathers"]]
    # The packed NF4 weights and their absmax codes are gathered as bytes, in the layer loop.
    assert dtypes.count("u8") >= 2, (variant, run["gathers"])
    # No all-gather of a float array shaped like the activations: [batch, seq, ...]. (The int32
    # target ids [batch, seq, 1] may be gathered for the loss: 1 KiB here, 4 bytes a token.)
    batch_shaped = [
        (d, s) for d, s in run["gathers"] if d in ("f32", "bf16", "f16") and s.split(",")[:2] == ["8", "32"]
    ]
    assert not batch_shaped, (variant, batch_shaped)
    # Each device holds a quarter of the packed base (whole blocks).
    for field in ("packed", "absmax"):
        for mine, total in zip(run["per_device"][field], run["total"][field], strict=True):
            assert mine * 4 == total, (variant, field, mine, total)
    # The sharded step computes the same loss as the unsharded loss function.
    assert abs(run["loss"] - run["host_loss"]) < 1e-4, (variant, run["loss"], run["host_loss"])
    assert run["kinds"] == (["pinned_host"] if variant == "offload" else ["device"])
