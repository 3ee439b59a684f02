"""A driver on a host without accelerators pins JAX to the CPU, unless told otherwise."""

from __future__ import annotations

import os

from marin_lab.execution.run import platform as jax_platform


def test_cpu_host_pins_jax_to_cpu(monkeypatch):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.setattr(jax_platform, "has_accelerator", lambda: False)
    jax_platform.default_to_cpu()
    assert os.environ["JAX_PLATFORMS"] == "cpu"


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
