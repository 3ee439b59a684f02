"""A host without accelerators pins JAX to the CPU as soon as marin_lab is imported, unless told otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from marin_lab import jax_platform

PROBE_LINES = ("unexpected worker hostname", "could not determine TPU accelerator type", "libtpu")


def test_cpu_host_pins_jax_to_cpu(monkeypatch):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.delenv("TPU_SKIP_MDS_QUERY", raising=False)
    monkeypatch.setattr(jax_platform, "has_accelerator", lambda: False)
    jax_platform.default_to_cpu()
    assert os.environ["JAX_PLATFORMS"] == "cpu"
    assert os.environ["TPU_SKIP_MDS_QUERY"] == "1"


def test_a_users_choice_and_an_accelerator_host_are_left_alone(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    jax_platform.default_to_cpu()
    assert os.environ["JAX_PLATFORMS"] == "tpu"
    monkeypatch.delenv("JAX_PLATFORMS")
    monkeypatch.setattr(jax_platform, "has_accelerator", lambda: True)
    jax_platform.default_to_cpu()
    assert "JAX_PLATFORMS" not in os.environ


def test_tpu_variables_mean_an_accelerator(monkeypatch):
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v4-8")
    assert jax_platform.has_accelerator()


@pytest.mark.slow
@pytest.mark.parametrize("imports", ["import marin_lab, jax", "import jax, marin_lab"])
def test_import_marin_lab_then_devices_never_probes_libtpu(imports):
    """Regression: with libtpu installed (the `tpu` extra), `import marin_lab, jax; jax.devices()` on
    a machine without TPUs sometimes printed libtpu's probe errors: nothing pinned JAX to the CPU
    before `executor_main` ran. Now `import marin_lab` does, before or after JAX was imported."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "TPU_SKIP_MDS_QUERY")}
    code = (
        f"{imports}, os\n"
        "print(os.environ.get('JAX_PLATFORMS'), jax.config.jax_platforms, [d.platform for d in jax.devices()])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    if jax_platform.has_accelerator():  # JAX is rightly left to find the accelerator
        assert proc.stdout.split()[0] == "None", proc.stdout
        return
    assert proc.stdout.split() == ["cpu", "cpu", "['cpu']"], proc.stdout
    probe = [line for line in proc.stderr.splitlines() if any(p in line for p in PROBE_LINES)]
    assert probe == [], proc.stderr


_COMPILE_ONCE = """
import os, marin_lab, jax
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
jax.jit(lambda x: x * 2 + 1)(jax.numpy.ones(3)).block_until_ready()
print(os.environ.get("JAX_COMPILATION_CACHE_DIR"), "/jax/compilation_cache/cache_hits" in events)
"""


def _compile_once(home, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT"))}
    clean.pop("MARIN_JAX_CACHE", None)
    out = subprocess.run(
        [sys.executable, "-c", _COMPILE_ONCE],
        env={**clean, "HOME": str(home), "XDG_CACHE_HOME": "", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def test_a_second_process_reads_its_programs_from_the_default_compilation_cache(tmp_path):
    folder = str(tmp_path / ".cache" / "marin_lab" / "jax")
    assert _compile_once(tmp_path) == [folder, "False"]
    assert any(name.startswith("jit__lambda") for name in os.listdir(folder))
    assert _compile_once(tmp_path) == [folder, "True"]  # read back, not compiled again


def test_the_users_cache_folder_wins_and_off_turns_the_cache_off(tmp_path):
    own = str(tmp_path / "own")
    assert _compile_once(tmp_path, JAX_COMPILATION_CACHE_DIR=own) == [own, "False"]
    assert _compile_once(tmp_path, MARIN_JAX_CACHE=str(tmp_path / "chosen"))[0] == str(tmp_path / "chosen")
    assert _compile_once(tmp_path, MARIN_JAX_CACHE="off") == ["None", "False"]
    assert not (tmp_path / ".cache").exists()
