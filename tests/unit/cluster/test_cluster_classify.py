"""Each Ray error maps to preemption or failure; the metadata probe is injected, never the network."""

from __future__ import annotations

import threading

import pytest
import ray.exceptions as rex

from marin_lab.cluster import (
    FAILURE,
    PREEMPTION,
    FilePreemptionProbe,
    MetadataPreemptionProbe,
    PreemptedError,
    SliceCapacityTimeout,
    classify_error,
)
from marin_lab.cluster.classify import GCE_PREEMPTED_URL, PREEMPTED_URL_ENV, RAY_ERROR_KINDS, PreemptionWatcher


def _task_error(cause: BaseException) -> rex.RayTaskError:
    try:
        raise cause
    except BaseException as err:  # noqa: BLE001
        return rex.RayTaskError("fn", "Traceback: ...", err)


@pytest.mark.parametrize(
    "error, kind",
    [
        (rex.ActorDiedError(), PREEMPTION),
        (rex.ActorUnavailableError("connection lost", None), PREEMPTION),
        (rex.WorkerCrashedError(), PREEMPTION),
        (rex.NodeDiedError("node gone"), PREEMPTION),
        (rex.LocalRayletDiedError(), PREEMPTION),
        (rex.ObjectLostError("ab" * 14, "owner", "call"), PREEMPTION),
        (rex.OwnerDiedError("ab" * 14, "owner", "call"), PREEMPTION),
        (rex.ActorUnschedulableError("no node"), PREEMPTION),
        (rex.ActorPlacementGroupRemoved(), PREEMPTION),
        (PreemptedError("lost"), PREEMPTION),
        (SliceCapacityTimeout("no slices"), PREEMPTION),
        (rex.OutOfMemoryError("oom"), FAILURE),
        (rex.RuntimeEnvSetupError("pip failed"), FAILURE),
        (rex.TaskCancelledError(), FAILURE),
        (rex.GetTimeoutError("slow"), FAILURE),
        (rex.RaySystemError("bug"), FAILURE),
        (ValueError("bad config"), FAILURE),
    ],
)
def test_ray_errors_map_to_preemption_or_failure(error, kind):
    assert classify_error(error) == kind


def test_step_exceptions_are_failures_unless_they_are_preemptions():
    assert classify_error(_task_error(ZeroDivisionError("x"))) == FAILURE
    assert classify_error(_task_error(PreemptedError("host preempted"))) == PREEMPTION
    # an actor whose constructor raised is our bug, not lost hardware
    assert classify_error(rex.ActorDiedError(_task_error(ImportError("no module")))) == FAILURE


def test_every_mapped_name_is_a_ray_exception_or_absent():
    for name in RAY_ERROR_KINDS:
        cls = getattr(rex, name, None)
        assert cls is None or issubclass(cls, Exception)


def test_metadata_probe_turns_a_failure_into_a_preemption(monkeypatch):
    monkeypatch.delenv(PREEMPTED_URL_ENV, raising=False)
    calls = []

    def fetch(url, timeout_s):
        calls.append(url)
        return "TRUE"

    probe = MetadataPreemptionProbe(fetch=fetch)
    assert classify_error(RuntimeError("collective broke"), probe=probe) == PREEMPTION
    assert calls == [GCE_PREEMPTED_URL]
    not_preempted = MetadataPreemptionProbe(fetch=lambda url, t: "FALSE")
    assert classify_error(RuntimeError("bug"), probe=not_preempted) == FAILURE


def test_a_broken_probe_never_invents_a_preemption():
    def fetch(url, timeout_s):
        raise OSError("metadata server unreachable")

    assert classify_error(RuntimeError("bug"), probe=MetadataPreemptionProbe(fetch=fetch)) == FAILURE


def test_default_probe_off_gce_makes_no_request(monkeypatch):
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setattr("urllib.request.urlopen", lambda *a, **k: pytest.fail("network used"))
    assert MetadataPreemptionProbe()() is False


def test_file_probe(tmp_path):
    flag = tmp_path / "preempted"
    probe = FilePreemptionProbe(str(flag))
    assert probe() is False
    flag.write_text("TRUE\n")
    assert probe() is True


def test_the_probe_asks_the_url_its_host_environment_names(monkeypatch):
    """Regression guard for the stand-in used by drills: $MARIN_PREEMPTED_URL is asked off GCE too."""
    from marin_lab.testing.local_cluster import MetadataStandIn

    monkeypatch.setenv("NO_GCE_CHECK", "true")
    stand_in = MetadataStandIn()
    try:
        monkeypatch.setenv(PREEMPTED_URL_ENV, stand_in.url)
        probe = MetadataPreemptionProbe()
        assert probe() is False
        stand_in.preempted.set()
        assert probe() is True
    finally:
        stand_in.close()


def test_the_watcher_sets_the_notice_once_the_metadata_says_preempted(monkeypatch):
    from marin_lab.testing.local_cluster import MetadataStandIn

    stand_in = MetadataStandIn()
    notice = threading.Event()
    watcher = PreemptionWatcher(MetadataPreemptionProbe(stand_in.url), notice, "host 0 of slice s", interval_s=0.05)
    try:
        watcher.start()
        assert not notice.is_set()
        stand_in.preempted.set()
        assert notice.wait(timeout=10)
    finally:
        watcher.stop()
        stand_in.close()
