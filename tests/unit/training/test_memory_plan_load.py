"""The memory plan counts the load next to the train step, says what to change when a peak does not
fit, and a run planned not to fit is refused before its base is read."""

import dataclasses

import jax
import pytest

from marin_lab.models.llama import LlamaConfig
from marin_lab.peft import LoraConfig
from marin_lab.testing.hf_synthetic import write_synthetic_llama
from marin_lab.testing.training import tiny_model
from marin_lab.training.data import DataConfig
from marin_lab.training.errors import TrainingError
from marin_lab.training.finetune import FinetuneConfig, finetune_lm
from marin_lab.training.memory_plan import GIB, plan_memory
from marin_lab.training.mesh import MeshConfig

LLAMA_70B = LlamaConfig(
    vocab_size=32000,
    hidden_dim=8192,
    intermediate_dim=28672,
    num_layers=80,
    num_heads=64,
    num_kv_heads=8,
    max_seq_len=4096,
)


def _config(**overrides) -> FinetuneConfig:
    cfg = FinetuneConfig(
        output_path="/nonexistent/out",
        data=DataConfig(caches={}),
        base="/nonexistent/base",
        mode="qlora",
        model=LLAMA_70B,
        lora=LoraConfig(rank=64, alpha=16.0, dropout=0.1),
        batch_size=4,
        seq_len=2048,
        mesh=MeshConfig(fsdp=2),
        gradient_checkpointing=True,
        offload_base=True,
        offload_optimizer_state=True,
        attention_impl="cudnn",
        plan_devices=2,
        plan_device_memory_gib=24.0,
    )
    return dataclasses.replace(cfg, **overrides)


def test_plan_reports_load_and_steady_state_peaks():
    plan = _config().memory_plan()
    # Offloaded: the projections are on the host at load as in the step; the device holds the rest.
    assert plan.load_host["offloaded base (all devices)"] == 2 * plan.host["frozen weights"]
    assert plan.load_device["frozen weights (shards)"] == plan.device["frozen weights"]
    assert plan.load_device_total < plan.device_total < 24 * GIB
    on_device = plan_memory(LLAMA_70B, mode="qlora", num_devices=2, batch_size=4, seq_len=2048, offload_base=False)
    # Not offloaded: the device holds its NF4 shards (~17 GiB of the 70B base) plus the matrix being quantized.
    assert 16 * GIB < on_device.load_device["frozen weights (shards)"] < 18 * GIB
    assert on_device.load_device_total > on_device.load_device["frozen weights (shards)"]
    text = _config().memory_plan().table(24.0)
    assert "steady state: fits in 24 GiB" in text and "load: fits in 24 GiB" in text


def test_a_plan_that_does_not_fit_names_what_to_change():
    config = _config(offload_base=False, offload_optimizer_state=False)
    advice = config.fit_advice()
    assert advice[0].startswith("offload_base=True") and advice[0].endswith("(fits)")
    assert config.plan_estimate()["fits"] is False and config.plan_estimate()["change"] == advice
    assert _config().fit_advice() == []


def test_finetune_refuses_a_plan_that_does_not_fit_before_reading_the_base(tmp_path):
    model = tiny_model()
    base = str(tmp_path / "hf")
    write_synthetic_llama(base, model)
    config = dataclasses.replace(
        _config(),
        base=base,
        output_path=str(tmp_path / "out"),
        model=None,
        lora=LoraConfig(rank=8),
        mesh=MeshConfig(),
        batch_size=8,
        seq_len=64,
        plan_device_memory_gib=0.0001,
    )
    before = len(jax.live_arrays())
    with pytest.raises(
        TrainingError,
        match=r"memory plan: the train step needs .* GiB per device, more than "
        r"plan_device_memory_gib=0.0001; change .*halve batch_size",
    ):
        finetune_lm(config)
    assert len(jax.live_arrays()) == before
