"""Each Ray error maps to preemption or failure; the metadata probe is injected, never the network."""

from __future__ import annotations

import pytest
import ray.exceptions as rex

from marin_lab.cluster import (
    FAILURE,
    PREEMPTION,
    FilePreemptionProbe,
    MetadataPreemptionProbe,
    PreemptedError,
    RetryBudget,
    RetryBudgetExhausted,
    SliceCapacityTimeout,
    classify_error,
    run_with_budgets,
)
from marin_lab.cluster.classify import GCE_PREEMPTED_URL, RAY_ERROR_KINDS


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


def test_metadata_probe_turns_a_failure_into_a_preemption():
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


def _script(*outcomes):
    """An attempt function that raises or returns the given outcomes in order."""
    seen = []

    def attempt(n):
        seen.append(n)
        outcome = outcomes[n - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return attempt, seen


def test_preemptions_within_budget_succeed():
    attempt, seen = _script(rex.ActorDiedError(), rex.NodeDiedError("n"), rex.WorkerCrashedError(), "done")
    records = []
    result = run_with_budgets(attempt, RetryBudget(preemption_retries=3), on_attempt=records.append)
    assert result == "done" and seen == [1, 2, 3, 4]
    assert [r["kind"] for r in records] == ["preemption"] * 3 + [None]
    assert [r["status"] for r in records] == ["PREEMPTED"] * 3 + ["SUCCESS"]


def test_preemption_budget_runs_out():
    attempt, _ = _script(*[rex.ActorDiedError()] * 3)
    with pytest.raises(RetryBudgetExhausted, match="preemption budget \\(2 retries\\) is spent") as info:
        run_with_budgets(attempt, RetryBudget(preemption_retries=2, failure_retries=5))
    assert len(info.value.attempts) == 3


def test_failures_use_their_own_budget_and_keep_the_traceback():
    attempt, seen = _script(rex.ActorDiedError(), ValueError("bad shard 7"), ValueError("bad shard 7"), "never")
    with pytest.raises(RetryBudgetExhausted) as info:
        run_with_budgets(attempt, RetryBudget(preemption_retries=5, failure_retries=1), what="tokenize/docs")
    assert seen == [1, 2, 3]
    assert [a["kind"] for a in info.value.attempts] == ["preemption", "failure", "failure"]
    message = str(info.value)
    assert message.startswith("tokenize/docs: attempt 3 ended in failure")
    assert "Traceback" in message and "ValueError: bad shard 7" in message
    assert isinstance(info.value.__cause__, ValueError)


def test_backoff_uses_the_injected_sleep():
    slept = []
    attempt, _ = _script(rex.ActorDiedError(), "ok")
    run_with_budgets(attempt, RetryBudget(preemption_backoff_s=30), sleep=slept.append)
    assert slept == [30]


def test_budget_rejects_negative_counts():
    with pytest.raises(ValueError, match="failure_retries must be a non-negative integer"):
        RetryBudget(failure_retries=-1)
