"""float16 master weights outside the train step: decoding, Hugging Face export, and train_lm runs
that checkpoint, resume bit for bit and export float32 or bfloat16 weights from float16 masters."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open

from marin_lab.main.train_lm import train_lm
from marin_lab.models.llama import init_params
from marin_lab.precision import PrecisionConfig, PrecisionError, ScaledArray, masters
from marin_lab.precision.scalify_train import master_params
from marin_lab.testing.training import tiny_model, tiny_train_config, write_synthetic_cache
from marin_lab.training import checkpoint as ckpt

FP16_MASTERS = PrecisionConfig(matmul="scalify", master_weights="float16_scaled", optimizer_state="float16_scaled")


def _get(tree, keys):
    for k in keys:
        tree = tree[k]
    return tree


def test_decode_multiplies_each_layer_by_its_own_scale_exactly():
    data = np.array([[1.5, -2.0], [0.25, 3.0]], np.float16)
    value = ScaledArray(jnp.asarray(data), jnp.asarray([2.0**-10, 2.0**3], jnp.float32))
    got = masters.decode(value)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [[1.5 * 2**-10, -2.0 * 2**-10], [2.0, 24.0]])
    bf = masters.decode(ScaledArray(jnp.asarray(np.float16(1.0009765625)), jnp.float32(1.0)), "bfloat16")
    assert bf.dtype == ml_dtypes.bfloat16 and float(bf) == 1.0  # round to nearest: 1 + 2^-10 -> 1


@pytest.mark.slow
def test_plain_params_decodes_float16_masters_and_leaves_float32_ones_alone():
    params = init_params(tiny_model(), jax.random.key(0))
    assert masters.plain_params(params) is params
    encoded = master_params(params)
    assert masters.has_scaled_masters(encoded) and not masters.has_scaled_masters(params)
    plain = masters.plain_params(encoded)
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        keys = tuple(k.key for k in path)
        got = _get(plain, keys)
        assert got.dtype == jnp.float32 and got.shape == leaf.shape
        # float16 data: 11 significant bits, so 2^-11 relative per value at most
        assert float(jnp.max(jnp.abs(got - leaf))) <= 2.0**-11 * float(jnp.max(jnp.abs(leaf))) + 1e-12


@pytest.mark.slow
def test_export_leaves_reads_one_parameter_at_a_time_and_names_it():
    encoded = master_params(init_params(tiny_model(), jax.random.key(0)))
    targets = []

    def read(target):  # stands for the checkpoint: the subtree shaped as asked
        targets.append(target)
        keys = []
        node = target
        while isinstance(node, dict):
            ((k, node),) = node.items()
            keys.append(k)
        value = _get(encoded, keys)
        assert isinstance(node, ScaledArray) and node.data.shape == value.data.shape
        out = value
        for k in reversed(keys):
            out = {k: out}
        return out

    leaves = dict(masters.export_leaves(read, encoded, "bfloat16"))
    assert len(targets) == len(leaves) == len(jax.tree_util.tree_leaves(encoded, is_leaf=masters.is_scaled))
    wq = leaves[("layers", "wq")]
    assert wq.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(wq, masters.decode(encoded["layers"]["wq"]).astype(ml_dtypes.bfloat16))


def test_unknown_export_dtype_is_one_line_naming_the_field():
    with pytest.raises(
        PrecisionError, match=r"precision.export_dtype='float16' is not one of \('float32', 'bfloat16'\)"
    ):
        PrecisionConfig(export_dtype="float16").validate()
    with pytest.raises(PrecisionError, match=r"precision.export_dtype='int8'"):
        list(masters.export_leaves(lambda t: t, {"w": jnp.ones(2)}, "int8"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return write_synthetic_cache(str(tmp_path_factory.mktemp("cache") / "c"))


def _tensors(hf_dir):
    with safe_open(f"{hf_dir}/model.safetensors", framework="flax") as f:
        return {k: np.asarray(f.get_tensor(k)) for k in f.keys()}  # noqa: SIM118 (safe_open is not iterable)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three tiny runs under the scalify interpreter on a busy 2-core host
def test_train_lm_with_float16_masters_resumes_bit_identically_and_exports(cache, tmp_path):
    cfg = tiny_train_config(str(tmp_path / "whole"), {"c": cache}, precision=FP16_MASTERS, compute_dtype="float16")
    whole = train_lm(cfg)
    cut_cfg = dataclasses.replace(cfg, output_path=str(tmp_path / "cut"))
    train_lm(dataclasses.replace(cut_cfg, stop_after_steps=5))  # checkpoint at 4, then "preempted"
    resumed = train_lm(cut_cfg)
    assert resumed["start"].startswith("resumed from") and np.isfinite(whole["final_loss"])
    assert resumed["param_checksum"] == whole["param_checksum"]

    # The checkpoint holds the masters as stored: float16 data and a float32 scale per parameter.
    index = {e["name"]: e for e in json.loads(Path(f"{whole['checkpoint']}/index.json").read_text())["leaves"]}
    assert index["['params']['layers']['wq'].data"]["dtype"] == "float16"
    assert index["['params']['layers']['wq'].scale"]["shape"] == [2]  # one per layer
    state_params = ckpt.load_subtree(
        whole["checkpoint"], "params", jax.eval_shape(lambda: master_params(init_params(cfg.model, jax.random.key(0))))
    )
    decoded = masters.plain_params(state_params)

    tensors = _tensors(whole["hf_path"])
    np.testing.assert_array_equal(tensors["model.embed_tokens.weight"], np.asarray(decoded["embed"]))
    np.testing.assert_array_equal(
        tensors["model.layers.1.self_attn.q_proj.weight"], np.asarray(decoded["layers"]["wq"][1]).T
    )
    assert json.loads(Path(f"{whole['hf_path']}/config.json").read_text())["torch_dtype"] == "float32"

    bf_cfg = dataclasses.replace(
        cfg, output_path=str(tmp_path / "bf16"), precision=dataclasses.replace(FP16_MASTERS, export_dtype="bfloat16")
    )
    bf = train_lm(bf_cfg)
    assert bf["param_checksum"] == whole["param_checksum"]  # the export dtype changes nothing else
    bf_tensors = _tensors(bf["hf_path"])
    assert bf_tensors["model.norm.weight"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(
        bf_tensors["model.layers.0.mlp.down_proj.weight"],
        np.asarray(decoded["layers"]["w_down"][0]).T.astype(ml_dtypes.bfloat16),
    )
    assert json.loads(Path(f"{bf['hf_path']}/config.json").read_text())["torch_dtype"] == "bfloat16"
