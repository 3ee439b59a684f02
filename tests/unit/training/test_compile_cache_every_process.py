"""`distributed.cache_programs_of_every_cpu_process`: which compiled programs reach JAX's persistent
cache from a process other than 0. The whole path (two real processes, a rerun that compiles
nothing) is `tests/integration/test_multihost.py::test_every_host_reads_its_programs_back_when_the_same_hosts_resume`;
here the rule itself, with JAX's cache writer replaced by a recorder."""

from __future__ import annotations

import types

import jax
import pytest
from jax._src import compilation_cache, compiler
from jax._src import distributed as jax_distributed

from marin_lab.training.distributed import cache_programs_of_every_cpu_process


@pytest.fixture()
def written(monkeypatch):
    """The (key, module) pairs handed to JAX's cache writer; JAX's own `_cache_write` is restored
    afterwards (the shim is installed on top of it inside the test only)."""
    monkeypatch.setattr(compiler, "_cache_write", compiler._cache_write)
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(
        compilation_cache,
        "put_executable_and_time",
        lambda key, module, executable, backend, seconds: calls.append((key, module)),
    )
    before = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    yield calls
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before)


def _write(platform: str, seconds: float = 2.0, host_callbacks: tuple = ()) -> None:
    backend = types.SimpleNamespace(platform=platform)
    compiler._cache_write("key-1", seconds, "jit_step", backend, object(), list(host_callbacks))


def test_a_cpu_process_other_than_0_writes_its_programs(written, monkeypatch):
    monkeypatch.setattr(jax_distributed.global_state, "process_id", 1)
    _write("cpu")
    assert written == []  # JAX's rule: only process 0 writes
    assert cache_programs_of_every_cpu_process()
    _write("cpu")
    assert written == [("key-1", "jit_step")]


def test_other_platforms_short_compiles_and_host_callbacks_keep_jaxs_rule(written, monkeypatch):
    monkeypatch.setattr(jax_distributed.global_state, "process_id", 1)
    assert cache_programs_of_every_cpu_process()
    _write("tpu")  # TPU hosts share one key: process 0 alone writes it
    _write("cpu", seconds=0.1)  # under jax_persistent_cache_min_compile_time_secs
    _write("cpu", host_callbacks=(object(),))  # baked into the program: never cached
    assert written == []


def test_installing_twice_wraps_once(written):
    assert cache_programs_of_every_cpu_process()
    first = compiler._cache_write
    assert cache_programs_of_every_cpu_process()
    assert compiler._cache_write is first
