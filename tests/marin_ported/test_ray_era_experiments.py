"""Ten of Marin's Ray-era experiment files, imports changed only (tests/marin_ported/experiments/),
planned offline as a new user would plan them: `python FILE --dry_run true --prefix TMP`, with an
empty home folder and Hugging Face cache, the hub offline, and the project on the path only.

One subprocess plans all ten (dry_run_files.py: JAX and the data libraries are imported once,
about 10 s in all). Each file that ports has its plan checked (its steps, the vocabulary each
model takes from its tokenizer, the sequence length, the resources); each that does not is
checked to fail where and why docs/coming_from_marin.md says it does, so the table there stays
true. Also here: the names those files needed from Marin's layer (Levanter's `LlamaConfig`,
`operations.download.huggingface`, the `*_train_config` presets, `experiments.pretraining_datasets`).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from marin_lab.cluster.resources import TpuResources
from marin_lab.execution import ExecutorStep, this_output_path, versioned
from marin_lab.execution.plan.planner import build_plan
from marin_lab.marin.levanter import Llama3RotaryEmbeddingsConfig, LlamaConfig
from tests.conftest import REPO_ROOT
from tests.unit.execution.test_experiments_plan_offline import clean_env

HERE = os.path.join(REPO_ROOT, "tests", "marin_ported")
FILES = sorted(glob.glob(os.path.join(HERE, "experiments", "*.py")))
LLAMA3 = 128_256

# file -> {step name: what its planned step must show}
PORTS: dict[str, dict[str, dict]] = {
    "tutorial_train_tiny_model_cpu.py": {
        "tokenized/roneneldan/TinyStories": {"fn": "tokenize", "tokenizer": "stanford-crfm/marin-tokenizer"},
        "checkpoints/marin-nano-tinystories": {"vocab_size": LLAMA3, "seq_len": 512, "batch_size": 4,
                                               "resources": "{'num_cpus': 1}"},
    },
    "tutorial_train_tiny_model_gpu.py": {
        "tokenized/wikitext_2_detokenized": {"fn": "tokenize", "tokenizer": "stanford-crfm/marin-tokenizer"},
        "checkpoints/llama-nano-wikitext": {"vocab_size": LLAMA3, "seq_len": 512, "batch_size": 32,
                                            "resources": "GpuResources(gpus=1, cpus=1.0, memory_gb=None, "
                                                         "accelerator_type=None)"},
    },
    "exp1076_train_tiny_model.py": {
        "tokenized/dlwh/wikitext_2_detokenized": {"fn": "tokenize", "tokenizer": "meta-llama/Meta-Llama-3.1-8B"},
        "checkpoints/llama-nano-wikitext": {"vocab_size": LLAMA3, "seq_len": 512, "batch_size": 32},
    },
    "exp1191_train_tiny_model_cpu.py": {
        "tokenized/roneneldan/TinyStories": {"fn": "tokenize", "tokenizer": "meta-llama/Meta-Llama-3.1-8B"},
        "checkpoints/marin-nano-tinystories": {"vocab_size": LLAMA3, "seq_len": 512, "batch_size": 4},
    },
    "gpu_tutorial_download_hf.py": {
        "raw/dlwh/wikitext_2_detokenized": {"fn": "download_hf"},
        "tokenized/tokenized/dlwh/wikitext_2_detokenized": {"fn": "tokenize"},
        # Levanter's LlamaConfig(seq_len=512, ...) has no vocabulary: it takes Llama 3's 128,256.
        "checkpoints/llama-nano-wikitext": {"vocab_size": LLAMA3, "seq_len": 512, "num_params": 8_241_312},
    },
    "exp524_tokenizers.py": {
        "raw/fineweb-edu": {"fn": "download"},
        "checkpoints/llama3-tokenizer": {"vocab_size": LLAMA3, "seq_len": 4096, "batch_size": 1024,
                                         "tpu_type": "v4-128"},
        "checkpoints/llama2-tokenizer": {"vocab_size": 32_000, "seq_len": 4096, "tpu_type": "v4-128"},
        "checkpoints/neox-tokenizer": {"vocab_size": 50_277, "seq_len": 4096, "tpu_type": "v4-128"},
    },
}

# file -> the error its dry run ends in (docs/coming_from_marin.md says why)
DOES_NOT_PORT: dict[str, str] = {
    "gpu_tutorial_levanter_config.py": "error: step 'tokenized/tokenized/$dlwh/wikitext_2_detokenized': the name "
                                       "may hold letters, digits",
    "exp146_multislice_training.py": "ModuleNotFoundError: No module named 'experiments.exp72_baselines'",
    "72_baselines.py": "ImportError: cannot import name 'llama3_tokenizer' from 'experiments.defaults'",
    "exp1096_datashop_example.py": "ModuleNotFoundError: No module named 'experiments.datashop'",
}


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("ray_era")
    home = tmp / "home"
    home.mkdir()
    out = tmp / "plans.jsonl"
    proc = subprocess.run([sys.executable, os.path.join(HERE, "dry_run_files.py"), str(out), str(tmp / "store"),
                           *FILES], cwd=tmp, env=clean_env(str(home)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["file"]: r for r in map(json.loads, out.read_text().splitlines())}
    return {"results": results, "home": home, "store": tmp / "store"}


def test_ten_files_each_listed_once():
    names = sorted(os.path.basename(f) for f in FILES)
    assert len(names) == 10 and sorted([*PORTS, *DOES_NOT_PORT]) == names


def test_each_file_names_its_marin_source_and_what_changed():
    for path in FILES:
        head = Path(path).read_text(encoding="utf-8")[:1500]
        assert head.startswith("# Ported from Marin (https://github.com/marin-community/marin):"), path
        assert "commit" in head and "Apache License" in head, path
        assert "marin.execution.executor import" not in Path(path).read_text(encoding="utf-8"), path


@pytest.mark.parametrize("name", sorted(PORTS))
def test_ported_file_plans_offline(planned, name):
    result = planned["results"][name]
    assert result["ok"], result.get("error", "") + result["stderr"]
    assert "Traceback" not in result["stderr"] and "Plan:" in result["stdout"]
    steps = {s["name"]: s for s in result["steps"]}
    for step_name, expected in PORTS[name].items():
        assert step_name in steps, (step_name, sorted(steps))
        got = {k: steps[step_name].get(k) for k in expected}
        assert got == expected, (step_name, got)


@pytest.mark.parametrize("name", sorted(DOES_NOT_PORT))
def test_file_that_needs_more_than_imports_fails_as_documented(planned, name):
    result = planned["results"][name]
    assert not result["ok"]
    assert DOES_NOT_PORT[name] in result["error"] + result["stderr"], result["error"] + result["stderr"]


def test_plans_fetch_and_write_nothing(planned):
    home = planned["home"]
    assert not (home / "hf").exists() or not any((home / "hf").rglob("*")), sorted((home / "hf").rglob("*"))
    assert not (home / "corpus").exists()
    assert not planned["store"].exists()


# --- the names those files import -----------------------------------------------------------


def test_levanter_llama_config_spellings():
    config = LlamaConfig(seq_len=512, hidden_dim=32, intermediate_dim=128, num_heads=2, num_kv_heads=2, num_layers=2,
                         tie_word_embeddings=True, layer_norm_epsilon=1e-6, initializer_range=0.01)
    assert (config.max_seq_len, config.vocab_size, config.tie_embeddings, config.norm_eps, config.initializer_std) == (
        512, None, True, 1e-6, 0.01)
    assert config.rope_theta == 10_000.0
    default = LlamaConfig()  # Levanter's defaults: a Llama-2-7B shape
    assert (default.hidden_dim, default.intermediate_dim, default.num_layers, default.max_seq_len) == (
        4096, 11008, 32, 2048)
    assert LlamaConfig(rope=Llama3RotaryEmbeddingsConfig()).rope_theta == 500_000.0


@pytest.mark.parametrize("kwargs, message", [
    ({"upcast_attn": True}, "LlamaConfig got Levanter keyword(s) ['upcast_attn']"),
    ({"seq_len": 512, "max_seq_len": 512}, "give seq_len or max_seq_len"),
    ({"rope": Llama3RotaryEmbeddingsConfig(factor=8.0)}, "rope factor=8.0"),
])
def test_levanter_llama_config_refuses_what_it_cannot_honour(kwargs, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        LlamaConfig(**kwargs)


def _download_step(**fields) -> ExecutorStep:
    from operations.download.huggingface.download_hf import DownloadConfig, download_hf

    config = DownloadConfig(hf_dataset_id="dlwh/wikitext_2_detokenized", revision="87a6c77", **fields)
    return ExecutorStep(name="raw/wikitext", fn=download_hf, config=config)


def test_download_hf_identity_is_the_repository_revision_and_globs(tmp_path):
    def identity(step: ExecutorStep) -> str:
        return build_plan([step], str(tmp_path)).steps[0].identity

    base = identity(_download_step())
    assert identity(_download_step(wait_for_completion=False, timeout=10, gcs_output_path=this_output_path())) == base
    assert identity(_download_step(hf_urls_glob=["*.parquet"])) != base
    assert identity(_download_step(hf_url_glob="*.parquet")) != base
    changed = dataclasses.replace(_download_step().config, revision=versioned("0123abc"))
    assert identity(ExecutorStep(name="raw/wikitext", fn=_download_step().fn, config=changed)) != base


def test_download_hf_runs_marin_labs_download_of_the_hub_repository():
    from operations.download.huggingface import download, download_gated_manual, download_hf

    config = dataclasses.replace(_download_step().config, gcs_output_path="/out", hf_urls_glob=["*.parquet"],
                                 hf_url_glob="data/*.jsonl")
    lab = download_hf.lab_download_config(config)
    assert (lab.output_path, lab.hf_dataset, lab.revision, lab.include) == (
        "/out", "dlwh/wikitext_2_detokenized", "87a6c77", ("*.parquet", "data/*.jsonl"))
    assert download.download is download_hf.download_hf is download_gated_manual.download_and_upload_to_store
    with pytest.raises(ValueError, match="hf_dataset_id and revision are both needed"):
        download_hf.lab_download_config(download_hf.DownloadConfig(hf_dataset_id="a/b", revision=""))


def test_train_config_presets_and_dataset_registry():
    from experiments import pretraining_datasets
    from experiments.llama import llama_1_4b_train_config, llama_8b_train_config

    resources, tpu, slices = llama_8b_train_config.step_resources()
    assert isinstance(resources, TpuResources) and (tpu, slices) == ("v4-128", 4)
    assert (llama_1_4b_train_config.train_batch_size, llama_1_4b_train_config.num_train_steps,
            llama_1_4b_train_config.learning_rate) == (1024, 10_000, 3e-4)
    edu = pretraining_datasets.fineweb_edu.config
    assert (edu.hf_dataset, edu.revision, edu.include) == ("HuggingFaceFW/fineweb-edu", "3c452cb",
                                                          ("data/*/*.parquet",))


@pytest.mark.slow
def test_download_hf_file_downloads_and_tokenizes_offline(tmp_path):
    """The ported wikitext file runs its download_hf and tokenize steps (its training step asks for
    a GPU): the dataset repository at the pinned commit and a small stand-in for Llama 3's tokenizer
    sit in the hub cache, the hub is offline."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    def snapshot(kind: str, repo: str, sha: str) -> str:
        root = tmp_path / "hub" / f"{kind}--{repo.replace('/', '--')}"
        (root / "refs").mkdir(parents=True)
        (root / "refs" / "main").write_text(sha)
        folder = root / "snapshots" / sha
        folder.mkdir(parents=True)
        return str(folder)

    texts = [f"The {w} article number {i} is about the {w} of the world." for i in range(300)
             for w in ("history", "river", "music")]
    data = os.path.join(snapshot("datasets", "dlwh/wikitext_2_detokenized",
                                 "87a6c77d244175cbc883de2afae02f7d894e0ac5"), "data")
    os.makedirs(data)
    pq.write_table(pa.table({"text": texts}), os.path.join(data, "train-00000-of-00001.parquet"))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(os.path.join(snapshot("models", "meta-llama/Meta-Llama-3.1-8B", "0" * 40), "tokenizer.json"))
    home = tmp_path / "home"
    home.mkdir()
    env = {**clean_env(str(home)), "HF_HUB_CACHE": str(tmp_path / "hub")}
    prefix = tmp_path / "store"
    proc = subprocess.run([sys.executable, os.path.join(HERE, "experiments", "gpu_tutorial_download_hf.py"),
                           "--prefix", str(prefix), "--backend", "local", "--run_only", "tokenized/"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (raw,) = (prefix / "raw" / "dlwh").glob("wikitext_2_detokenized-*")
    assert (raw / "data" / "data" / "train-00000-of-00001.parquet").exists()
    provenance = json.loads((raw / "provenance.json").read_text())
    assert "87a6c77d244175cbc883de2afae02f7d894e0ac5" in json.dumps(provenance)
    (tokenized,) = (prefix / "tokenized" / "tokenized" / "dlwh").glob("wikitext_2_detokenized-*")
    assert json.loads((tokenized / ".executor_status").read_text())["status"] == "SUCCESS"
    assert not (prefix / "checkpoints").exists()  # the GPU step was not selected
