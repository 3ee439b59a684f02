"""A damaged Hugging Face checkpoint is refused in one line naming the file and tensor, before any
weight is read or any device memory is allocated (safetensors_reader, hf_import.open_hf)."""

import json
import os
import shutil
import struct
from pathlib import Path

import jax
import pytest

from marin_lab.testing.hf_synthetic import write_synthetic_llama
from marin_lab.testing.training import tiny_model
from marin_lab.training.base_stream import open_base
from marin_lab.training.errors import TrainingError
from marin_lab.training.hf_import import HfImportError, import_hf, open_hf

MODEL = tiny_model()


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hf") / "good")
    write_synthetic_llama(path, MODEL, shards=2)
    return path


@pytest.fixture
def copy(good, tmp_path):
    dst = str(tmp_path / "ckpt")
    shutil.copytree(good, dst)
    return dst


def _shard(path: str, i: int = 2) -> str:
    return os.path.join(path, f"model-0000{i}-of-00002.safetensors")


def _first_tensor_after(path: str, cut: int) -> str:
    """The first tensor (by offset) whose data ends past byte `cut` of the file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    entries = sorted((v["data_offsets"][1], k) for k, v in header.items() if k != "__metadata__")
    return next(name for end, name in entries if 8 + n + end > cut)


def _refused(path: str, match: str) -> None:
    before = len(jax.live_arrays())
    with pytest.raises(HfImportError, match=match) as info:
        open_base(path)
    assert "\n" not in str(info.value)
    assert len(jax.live_arrays()) == before  # nothing was placed on a device


def test_a_good_checkpoint_opens_and_imports(good):
    config, index = open_hf(good)
    assert config.param_shapes() == MODEL.param_shapes()
    assert len(index.entries) == 2 + 1 + 9 * MODEL.num_layers
    _, params = import_hf(good)
    assert params["layers"]["wq"].shape == (MODEL.num_layers, 64, 64)


def test_truncated_shard_names_file_and_tensor(copy):
    shard = _shard(copy)
    size = os.path.getsize(shard)
    cut = size - 1000
    with open(shard, "r+b") as f:
        f.truncate(cut)
    victim = _first_tensor_after(shard, cut)
    _refused(
        copy,
        rf"{shard}: tensor {victim}: its data ends at byte \d+ but the file has {cut} bytes; "
        "the file is truncated",
    )


def test_header_length_past_the_end(copy):
    shard = _shard(copy, 1)
    with open(shard, "r+b") as f:
        f.write(struct.pack("<Q", 10**7))
    _refused(copy, rf"{shard}: header length 10000000 does not fit the file's \d+ bytes")


def test_garbage_header_is_refused(copy):
    shard = _shard(copy, 1)
    with open(shard, "r+b") as f:
        f.seek(8)
        f.write(b"\xff\xfe not json")
    _refused(copy, rf"{shard}: the safetensors header is not valid JSON")


def test_git_lfs_pointer_is_recognised(copy):
    shard = _shard(copy)
    with open(shard, "w") as f:
        f.write("version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 123456\n")
    _refused(copy, rf"{shard} is a Git LFS pointer .* run `git lfs pull`")


def test_integer_weights_are_refused_not_cast(tmp_path):
    path = str(tmp_path / "int8")
    write_synthetic_llama(path, MODEL, overrides={"model.layers.1.mlp.up_proj.weight": "I8"})
    _refused(
        path,
        r"model.safetensors: tensor model.layers.1.mlp.up_proj.weight has dtype I8, but a Llama "
        r"weight is floating point",
    )
    with pytest.raises(HfImportError, match="has dtype I8"):
        import_hf(path)  # the whole-model reader refuses it too


def test_config_missing_a_required_field(copy):
    cfg_path = os.path.join(copy, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    del cfg["intermediate_size"]
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    _refused(copy, rf"{copy}/config.json lacks the required field 'intermediate_size'")


def test_missing_tensor_and_missing_shard(copy):
    os.remove(_shard(copy))
    _refused(copy, rf"{_shard(copy)}: file not found")


def test_offsets_that_disagree_with_the_shape(copy):
    shard = _shard(copy, 1)
    with open(shard, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        rest = f.read()
    name = next(k for k in header if k.endswith("norm.weight"))
    header[name]["shape"] = [header[name]["shape"][0] * 2]
    raw = json.dumps(header).encode()
    with open(shard, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + rest)
    _refused(copy, rf"{shard}: tensor {name}: data_offsets span \d+ bytes but shape")


def test_finetune_refuses_before_allocating(copy, tmp_path):
    from marin_lab.training.data import DataConfig
    from marin_lab.training.finetune import FinetuneConfig, finetune_lm

    shard = _shard(copy)
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) // 2)
    before = len(jax.live_arrays())
    with pytest.raises(TrainingError, match=rf"{shard}: tensor .* the file is truncated"):
        finetune_lm(FinetuneConfig(output_path=str(tmp_path / "out"), data=DataConfig(caches={}), base=copy))
    assert len(jax.live_arrays()) == before


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("rms_norm_eps", "tiny", "rms_norm_eps='tiny' must be a non-negative number"),
        ("rope_theta", [1], "rope_theta=[1] must be a non-negative number"),
        ("num_key_value_heads", "4", "num_key_value_heads='4' must be a positive integer"),
        ("max_position_embeddings", 2.5, "max_position_embeddings=2.5 must be a positive integer"),
        ("tie_word_embeddings", "no", "tie_word_embeddings='no' must be true or false"),
        ("rope_scaling", "linear", "rope_scaling='linear' must be an object or null"),
        ("hidden_act", 3, "hidden_act=3 must be text"),
    ],
)
def test_a_config_field_of_the_wrong_type_is_one_line(copy, field, value, expected):
    url = os.path.join(copy, "config.json")
    config = json.loads(Path(url).read_text())
    config[field] = value
    Path(url).write_text(json.dumps(config))
    with pytest.raises(HfImportError, match="config.json: " + expected.replace("[", r"\[").replace("]", r"\]")) as err:
        open_base(copy)
    assert "\n" not in str(err.value)


def test_a_header_nested_beyond_reason_is_one_line(copy):
    header = b"[" * 100_000
    with open(_shard(copy, 1), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
    with pytest.raises(HfImportError, match="nested too deeply"):
        open_hf(copy)
    with open(os.path.join(copy, "config.json"), "w") as f:
        f.write("[" * 100_000)
    with pytest.raises(HfImportError, match="config.json is not a Llama config: its JSON is nested too deeply"):
        open_hf(copy)


def test_a_config_claiming_millions_of_layers_is_refused_before_naming_them(copy):
    """3,000,000 layers claimed for a 2-layer file: refused from the headers, without a name per layer."""
    import tracemalloc

    url = os.path.join(copy, "config.json")
    config = json.loads(Path(url).read_text())
    config["num_hidden_layers"] = 3_000_000
    Path(url).write_text(json.dumps(config))
    tracemalloc.start()
    try:
        with pytest.raises(
            HfImportError,
            match=rf"num_layers=3000000 \(config.json num_hidden_layers\) but its "
            rf"safetensors hold {MODEL.num_layers} layer\(s\)",
        ):
            open_hf(copy)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak
