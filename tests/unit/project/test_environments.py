"""Per-step locked environments: the lock hash, building once (atomically, concurrently), running in one.

One real environment (six==1.17.0 from PyPI) is built per test session; the other builds are a bare
venv (no requirements) and a build that pip rejects without touching the network.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import json
import logging
import os
import sys
from pathlib import Path

import pytest

from experiments import levanter_backend as lb
from marin_lab import _env_worker
from marin_lab.environments import (
    EnvironmentBuildError,
    EnvironmentStepError,
    StepEnvironment,
    ensure_environment,
    pip_config,
    read_environment_record,
    run_in_environment,
)

PYTHON = f"python{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="module")
def six_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[StepEnvironment, str, str]:
    """(environment, cache dir, python) of one small real environment, built once."""
    root = tmp_path_factory.mktemp("envs")
    lock = root / "six.lock"
    lock.write_text("six==1.17.0\n")
    env = StepEnvironment(requirements=("six",), constraints=str(lock), python=PYTHON)
    cache = str(root / "cache")
    return env, cache, ensure_environment(env, cache_dir=cache)


def test_lock_hash_follows_constraints_content_not_path_or_requirement_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("six==1.17.0\n")
    b.write_text("six==1.17.0\n")
    base = StepEnvironment(requirements=("six", "idna"), constraints=str(a), python=PYTHON)
    assert len(base.lock_hash()) == 16
    assert base.lock_hash() == StepEnvironment(("idna", " six "), str(b), PYTHON).lock_hash()
    assert base.lock_hash() != StepEnvironment(("six",), str(a), PYTHON).lock_hash()
    assert base.lock_hash() != StepEnvironment(("six", "idna"), None, PYTHON).lock_hash()
    b.write_text("six==1.16.0\n")
    assert base.lock_hash() != StepEnvironment(("six", "idna"), str(b), PYTHON).lock_hash()


def test_lock_hash_names_a_missing_interpreter_or_constraints_file(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentBuildError, match="StepEnvironment.python='python9.99'"):
        StepEnvironment(("six",), python="python9.99").lock_hash()
    with pytest.raises(EnvironmentBuildError, match="StepEnvironment.constraints"):
        StepEnvironment(("six",), constraints=str(tmp_path / "missing.lock"), python=PYTHON).lock_hash()


@pytest.mark.slow
def test_built_environment_is_isolated_locked_and_recorded(six_env: tuple[StepEnvironment, str, str]) -> None:
    env, cache, python = six_env
    env_dir = Path(cache) / env.lock_hash()
    assert python == str(env_dir / "bin" / "python")
    assert (env_dir / ".lock_hash").read_text().strip() == env.lock_hash()
    assert (env_dir / "requirements.txt").read_text() == "six\n"
    record = read_environment_record(python)
    assert record is not None and record["packages"]["six"] == "1.17.0"
    assert record["unpinned"] == []
    # uv where make installed one beside this interpreter (or one is on PATH), else pip.
    assert record["installer"].startswith("uv ") if pip_config.find_uv() else record["installer"] == "pip"
    assert [p.name for p in Path(cache).iterdir() if not p.name.endswith(".lock")] == [env.lock_hash()]

    info = run_in_environment(python, _env_worker.interpreter_info, ("six", "jax"))
    assert Path(info["prefix"]).resolve() == env_dir.resolve()
    assert info["packages"] == {"six": "1.17.0", "jax": None}  # this venv's jax does not leak in


@pytest.mark.slow
def test_second_ensure_reuses_the_environment(six_env: tuple[StepEnvironment, str, str], caplog) -> None:
    env, cache, python = six_env
    before = (Path(cache) / env.lock_hash() / ".lock_hash").stat().st_mtime_ns
    with caplog.at_level(logging.INFO, logger="marin_lab.environments.locked"):
        assert ensure_environment(env, cache_dir=cache) == python
    assert "building" not in caplog.text
    assert (Path(cache) / env.lock_hash() / ".lock_hash").stat().st_mtime_ns == before


@pytest.mark.slow
def test_remote_exception_is_reraised_with_its_traceback(six_env: tuple[StepEnvironment, str, str]) -> None:
    _, _, python = six_env
    with pytest.raises(RuntimeError, match="ModuleNotFoundError: No module named 'jax'") as info:
        run_in_environment(python, importlib.import_module, "jax")
    assert isinstance(info.value, EnvironmentStepError)
    assert "Traceback (most recent call last)" in info.value.traceback_text
    assert "importlib" in info.value.traceback_text


@pytest.mark.slow
def test_worker_that_dies_without_an_answer_is_reported(six_env: tuple[StepEnvironment, str, str]) -> None:
    _, _, python = six_env
    with pytest.raises(EnvironmentStepError, match="exited with code 3 without an answer"):
        run_in_environment(python, os._exit, 3)


@pytest.mark.slow
def test_nested_functions_are_refused_before_starting(six_env: tuple[StepEnvironment, str, str]) -> None:
    _, _, python = six_env

    def local(config: int) -> int:
        return config

    with pytest.raises(EnvironmentStepError, match="top level of an importable module"):
        run_in_environment(python, local, 1)
    with pytest.raises(EnvironmentStepError, match="top level"):
        run_in_environment(python, lambda c: c, 1)


def test_config_module_whose_package_init_needs_missing_packages_still_loads(
    six_env: tuple[StepEnvironment, str, str],
) -> None:
    """Regression: marin_lab/training/__init__.py imports JAX, which old environments lack."""
    _, _, python = six_env
    config = lb.LevanterTrainConfig(
        output_path="/tmp/out", train_urls=("/data/a.jsonl",), validation_urls=(), tokenizer="/tok"
    )
    assert run_in_environment(python, lb.levanter_config_dict, config) == lb.levanter_config_dict(config)
    # No PyYAML there: the YAML falls back to JSON, which YAML parsers read too.
    assert json.loads(run_in_environment(python, lb.render_levanter_yaml, config)) == lb.levanter_config_dict(config)


@pytest.mark.slow
def test_failed_build_leaves_nothing_and_shows_pip_output(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    missing = tmp_path / "no-such-dir" / "pkg-1.0-py3-none-any.whl"
    env = StepEnvironment(requirements=(str(missing),), python=PYTHON)
    with pytest.raises(EnvironmentBuildError, match="pip install .* failed") as info:
        ensure_environment(env, cache_dir=str(cache))
    assert "does not exist" in str(info.value)  # pip's own words, from the output tail
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == []


def test_concurrent_builders_build_once(tmp_path: Path, caplog) -> None:
    cache = str(tmp_path / "cache")
    env = StepEnvironment(requirements=(), python=PYTHON)
    with (
        caplog.at_level(logging.INFO, logger="marin_lab.environments.locked"),
        concurrent.futures.ThreadPoolExecutor(3) as pool,
    ):
        pythons = list(pool.map(lambda _: ensure_environment(env, cache_dir=cache), range(3)))
    assert len(set(pythons)) == 1 and os.path.exists(pythons[0])
    assert caplog.text.count("building step environment") == 1
    assert sorted(p.name for p in Path(cache).iterdir()) == sorted([env.lock_hash(), f".{env.lock_hash()}.lock"])


# --------------------------------------------------------------------------------------------
# the Levanter backend's config: converted from the native trainer's, rendered without Levanter


def _native(**overrides):
    from marin_lab.training import DataConfig, LlamaConfig, OptimizerConfig, TrainLmConfig

    model = LlamaConfig(
        vocab_size=512, hidden_dim=64, intermediate_dim=128, num_layers=2, num_heads=4, num_kv_heads=4, max_seq_len=128
    )
    cfg = TrainLmConfig(
        output_path="/tmp/run",
        data=DataConfig(caches={"docs": "/tmp/cache"}),
        model=model,
        optimizer=OptimizerConfig(learning_rate=1e-3, schedule="wsd", warmup=0.1, decay=0.2),
        num_train_steps=50,
        batch_size=8,
        seq_len=64,
        compute_dtype="float32",
    )
    return dataclasses.replace(cfg, **overrides)


def test_from_native_carries_model_optimizer_and_schedule() -> None:
    lev = lb.from_native(_native(), train_urls=["/d/train.jsonl"], validation_urls=["/d/val.jsonl"])
    assert (lev.hidden_dim, lev.intermediate_dim, lev.num_layers, lev.num_heads) == (64, 128, 2, 4)
    assert (lev.seq_len, lev.train_batch_size, lev.num_train_steps, lev.tokenizer_vocab_size) == (64, 8, 50, 512)
    assert lev.optimizer == dataclasses.asdict(_native().optimizer)  # OptimizerConfig's fields, read by name
    # Warmup-stable-decay is Levanter's constant schedule followed by a linear cooldown.
    levanter_opt = lb.levanter_config_dict(lev)["optimizer"]
    assert (
        levanter_opt["lr_schedule"],
        levanter_opt["cooldown"],
        levanter_opt["warmup"],
        levanter_opt["learning_rate"],
    ) == ("constant", 0.2, 0.1, 1e-3)
    assert lev.mixed_precision == "f32" and lev.output_path == "/tmp/run"
    doc = lb.levanter_config_dict(lev)
    assert doc["model"]["type"] == "llama" and doc["model"]["hidden_dim"] == 64
    assert doc["trainer"]["checkpointer"]["base_path"] == "/tmp/run/checkpoints"
    assert doc["trainer"]["id"] == "run" and doc["trainer"]["wandb"]["mode"] == "offline"
    assert doc["data"]["validation_urls"] == ["/d/val.jsonl"]
    assert lb.from_native(_native(compute_dtype="bfloat16"), ["/d/t.jsonl"]).mixed_precision == "p=f32,c=bfloat16"


@pytest.mark.parametrize("field, value", [("num_kv_heads", 2), ("tie_embeddings", True), ("rope_theta", 500000.0)])
def test_from_native_refuses_what_levanter_11_cannot_express(field: str, value: object) -> None:
    native = _native()
    native = dataclasses.replace(native, model=dataclasses.replace(native.model, **{field: value}))
    with pytest.raises(lb.LevanterBackendError, match=f"model.{field}="):
        lb.from_native(native, ["/d/t.jsonl"])
    with pytest.raises(lb.LevanterBackendError, match="z_loss_weight="):
        lb.from_native(_native(z_loss_weight=1e-4), ["/d/t.jsonl"])


def test_levanter_optimizer_reads_optimizer_config_names() -> None:
    from marin_lab.training import OptimizerConfig

    # A config built directly keeps the Levanter runs' defaults: cosine from 3e-3, 10% warmup, no cooldown.
    default = lb.levanter_config_dict(lb.LevanterTrainConfig(output_path="/tmp/o", train_urls=("/d/a.jsonl",)))
    assert default["optimizer"] == {
        "learning_rate": 3e-3,
        "weight_decay": 0.1,
        "beta1": 0.9,
        "beta2": 0.95,
        "epsilon": 1e-8,
        "max_grad_norm": 1.0,
        "min_lr_ratio": 0.1,
        "warmup": 0.1,
        "cooldown": 0.0,
        "lr_schedule": "cosine",
    }
    assert set(lb.DEFAULT_OPTIMIZER) <= {f.name for f in dataclasses.fields(OptimizerConfig)}
    cosine = lb.levanter_optimizer(dataclasses.asdict(OptimizerConfig(schedule="cosine", decay=0.3, beta1=0.8)))
    assert (cosine["lr_schedule"], cosine["cooldown"], cosine["beta1"]) == ("cosine", 0.0, 0.8)
    assert "optimizer.schedule='inv_sqrt'" in lb.optimizer_problem({"schedule": "inv_sqrt"})
    assert "['lr_schedule']" in lb.optimizer_problem({"lr_schedule": "cosine"})
    with pytest.raises(lb.LevanterBackendError, match="optimizer.schedule_offset=5"):
        lb.from_native(_native(optimizer=OptimizerConfig(schedule_offset=5)), ["/d/t.jsonl"])


def test_validate_names_missing_or_unreadable_documents(tmp_path: Path) -> None:
    with pytest.raises(lb.LevanterBackendError, match="train_urls: .* does not exist"):
        lb.validate(lb.LevanterTrainConfig(output_path=str(tmp_path), train_urls=(str(tmp_path / "no.jsonl"),)))
    zst = tmp_path / "docs.jsonl.zst"
    zst.write_bytes(b"")
    with pytest.raises(lb.LevanterBackendError, match="zstd"):
        lb.validate(lb.LevanterTrainConfig(output_path=str(tmp_path), train_urls=(str(zst),)))
    with pytest.raises(lb.LevanterBackendError, match="output_path='gs://b/x'"):
        lb.validate(lb.LevanterTrainConfig(output_path="gs://b/x", train_urls=(str(zst),)))


def test_levanter_process_does_not_inherit_this_process_wandb_service() -> None:
    # A driver that ran W&B in-process before holds its service's address in its wandb's format;
    # Levanter's older wandb fails on it ("token must have 5 parts") and the service is not its own.
    base = {
        "WANDB_SERVICE": "3-27770-unix-/tmp/wandb-27770-4074-3987305200/socket",
        "PATH": "/bin",
        "WANDB_API_KEY": "k",
    }
    env = lb.levanter_process_env(base, wandb_dir="/w", wandb_mode="offline", ray_tmp="/r")
    assert "WANDB_SERVICE" not in env and "WANDB_SERVICE" in base
    assert (env["PATH"], env["WANDB_DIR"], env["WANDB_MODE"], env["RAY_TMPDIR"]) == ("/bin", "/w", "offline", "/r")
    assert env["HF_HUB_OFFLINE"] == "1" and env["WANDB_API_KEY"] == "k"


def test_a_failing_uv_leaves_the_build_to_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "uv"
    broken.write_text("#!/bin/sh\necho 'uv: cannot reach the index' >&2\nexit 2\n")
    broken.chmod(0o755)
    monkeypatch.setattr(pip_config, "find_uv", lambda: str(broken))
    lock = tmp_path / "six.lock"
    lock.write_text("six==1.17.0\n")
    env = StepEnvironment(requirements=("six",), constraints=str(lock), python=PYTHON)
    python = ensure_environment(env, cache_dir=str(tmp_path / "cache"))
    record = read_environment_record(python)
    assert record is not None and record["installer"] == "pip" and record["packages"]["six"] == "1.17.0"
