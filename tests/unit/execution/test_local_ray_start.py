"""A local Ray that timed out during startup (a busy machine) is started again; other errors are not retried."""

from __future__ import annotations

import sys
import types

import pytest

from marin_lab.ray_niceness import init_local_ray


class _FakeRay(types.ModuleType):
    """`ray.init` failing as Ray's node start does when the raylet does not register in time."""

    def __init__(self, failures: list[Exception]):
        super().__init__("ray")
        self.failures, self.calls, self.shutdowns = failures, [], 0

    def init(self, **kwargs):
        self.calls.append(kwargs)
        if self.failures:
            raise self.failures.pop(0)
        return "context"

    def shutdown(self):
        self.shutdowns += 1


TIMEOUT = Exception("The current node timed out during startup. This could happen because ...")


def test_a_node_start_timeout_is_retried_after_a_shutdown(monkeypatch, caplog):
    fake = _FakeRay([TIMEOUT])
    monkeypatch.setitem(sys.modules, "ray", fake)
    assert init_local_ray(num_cpus=2) == "context"
    assert fake.calls == [{"address": "local", "num_cpus": 2}] * 2 and fake.shutdowns == 1
    assert "timed out during startup (attempt 1 of 3); starting it again" in caplog.text


def test_the_last_timeout_and_any_other_error_are_raised(monkeypatch):
    fake = _FakeRay([TIMEOUT, TIMEOUT, TIMEOUT])
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(Exception, match="timed out during startup"):
        init_local_ray()
    assert len(fake.calls) == 3

    other = _FakeRay([ValueError("bad num_cpus")])
    monkeypatch.setitem(sys.modules, "ray", other)
    with pytest.raises(ValueError, match="bad num_cpus"):
        init_local_ray()
    assert len(other.calls) == 1 and other.shutdowns == 0
