"""RayBackends of one process share the local Ray one of them starts (Marin's tests run ten
executors in threads at once): it is started once and stopped only by the last one to leave."""

from __future__ import annotations

import os
import threading

import pytest

from marin_lab.execution.run import backends


class _FakeRay:
    """ray's init/is_initialized/shutdown, with an init slow enough for threads to race in."""

    def __init__(self):
        self.up = False
        self.inits = 0
        self.shutdowns = 0

    def is_initialized(self) -> bool:
        return self.up

    def init(self, **kwargs) -> None:
        assert not self.up, "Perhaps you called ray.init twice by accident?"  # what Ray itself says
        threading.Event().wait(0.05)
        self.up, self.inits = True, self.inits + 1

    def shutdown(self) -> None:
        self.up, self.shutdowns = False, self.shutdowns + 1


@pytest.fixture
def fake_ray(monkeypatch):
    import ray

    fake = _FakeRay()
    for name in ("init", "is_initialized", "shutdown"):
        monkeypatch.setattr(ray, name, getattr(fake, name))
    monkeypatch.setattr(backends, "_RAY_USERS", 0)
    return fake


def test_concurrent_backends_start_one_ray_and_the_last_one_stops_it(fake_ray):
    made: list[backends.RayBackend] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def make():
        start.wait()
        try:
            made.append(backends.RayBackend())
        except BaseException as err:  # noqa: BLE001 - collected for the assertion below
            errors.append(err)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and fake_ray.inits == 1 and len(made) == 8
    for backend in made[:-1]:
        backend.shutdown()
        assert fake_ray.up, "Ray was stopped under backends still using it"
    made[-1].shutdown()
    made[-1].shutdown()  # a second shutdown is harmless
    assert not fake_ray.up and fake_ray.shutdowns == 1


def test_a_ray_the_caller_started_is_left_running(fake_ray):
    fake_ray.up = True  # e.g. the user's own ray.init(address=...) before the executor runs
    backends.RayBackend().shutdown()
    assert fake_ray.up and fake_ray.shutdowns == 0


def test_a_ray_the_backend_starts_runs_its_workers_at_the_drivers_priority(fake_ray, monkeypatch):
    import ray

    seen = []
    monkeypatch.setattr(
        ray,
        "init",
        lambda **kwargs: (
            seen.append(os.environ.get("RAY_worker_niceness")),  # noqa: SIM112 (Ray's name)
            setattr(fake_ray, "up", True),
        ),
    )
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    backends.RayBackend().shutdown()
    monkeypatch.setenv("RAY_worker_niceness", "15")  # a user who wants Ray in the background keeps it
    backends.RayBackend().shutdown()
    assert seen == ["0", "15"]
