"""Leases: one holder, stale takeover, dead-holder takeover, loss detection, safe release."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from marin_lab.execution.state.lease import HOSTNAME, Lease
from marin_lab.io.conditional import ConflictError, conditional_file
from tests.executor_steps import race_for_lease


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["local", "memory"])
def output_path(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "step-abc12345")
    return f"memory://leases-{uuid.uuid4().hex[:8]}/step-abc12345"


def test_conditional_file_semantics(output_path):
    f = conditional_file(f"{output_path}/x")
    assert f.read() is None
    t1 = f.create(b"one")
    with pytest.raises(ConflictError):
        f.create(b"two")
    t2 = f.replace(b"three", t1)
    with pytest.raises(ConflictError):
        f.replace(b"four", t1)  # stale token
    assert f.read()[0] == b"three"
    with pytest.raises(ConflictError):
        f.delete(t1)
    f.delete(t2)
    assert f.read() is None


def _two_drivers(output_path):
    """Drivers a and b on one lease (a 60 s timeout, a shared clock); a holds it."""
    clock = Clock()
    a = Lease(output_path, "driver-a", timeout_s=60, clock=clock)
    b = Lease(output_path, "driver-b", timeout_s=60, clock=clock)
    assert a.try_acquire() is None
    return clock, a, b


def test_one_holder_at_a_time(output_path):
    clock, a, b = _two_drivers(output_path)
    held = b.try_acquire()
    assert held is not None and held.holder == "driver-a"
    a.release()
    assert b.try_acquire() is None


def test_stale_lease_is_taken_over_and_old_holder_notices(output_path):
    clock, a, b = _two_drivers(output_path)
    clock.t += 30
    assert b.try_acquire() is not None  # not stale yet
    clock.t += 31
    assert b.try_acquire() is None  # stale: taken over
    lost = []
    a._on_lost = lambda: lost.append(True)
    assert a.renew() is False
    assert a.lost.is_set() and lost == [True]
    a.release()  # the loser's release must not remove the new holder's lease
    assert b.current_holder().holder == "driver-b"
    assert b.renew() is True


def test_only_one_of_many_racers_wins_a_stale_lease(output_path):
    clock = Clock()
    Lease(output_path, "dead", timeout_s=1, clock=clock).try_acquire()
    clock.t += 5
    racers = [Lease(output_path, f"d{i}", timeout_s=60, clock=clock) for i in range(8)]
    results = race_for_lease(racers)
    winners = [r for r in results if r is None]
    assert len(winners) == 1
    holder = racers[0].current_holder().holder
    assert all(r.holder == holder for r in results if r is not None)


def test_holder_provably_dead_on_this_host_is_stale_at_once(tmp_path):
    path = str(tmp_path / "s")
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(proc.stdout)
    f = conditional_file(f"{path}/.executor_lease")
    f.create(
        json.dumps(
            {
                "holder": "ghost",
                "host": HOSTNAME,
                "pid": dead_pid,
                "pid_start": 1.0,
                "heartbeat": 9e18,
                "timeout_s": 3600,
            }
        ).encode()
    )  # heartbeat in the future
    assert Lease(path, "me", timeout_s=3600).try_acquire() is None


def test_holder_on_another_host_is_not_judged_dead(tmp_path):
    path = str(tmp_path / "s")
    f = conditional_file(f"{path}/.executor_lease")
    f.create(
        json.dumps(
            {"holder": "far", "host": "some-other-host", "pid": 1, "pid_start": 1.0, "heartbeat": 1e12, "timeout_s": 60}
        ).encode()
    )
    held = Lease(path, "me", timeout_s=60, clock=Clock(1e12 + 10)).try_acquire()
    assert held is not None and held.holder == "far"


def test_unreadable_lease_is_replaced(output_path):
    conditional_file(f"{output_path}/.executor_lease").create(b"{not json")
    assert Lease(output_path, "me", timeout_s=60).try_acquire() is None


def test_heartbeat_thread_renews(tmp_path):
    path = str(tmp_path / "s")
    lease = Lease(path, "me", timeout_s=1, heartbeat_s=0.05)
    assert lease.try_acquire() is None
    first = lease.current_holder().heartbeat
    lease.start_heartbeats()
    import time

    time.sleep(0.3)
    lease.stop_heartbeats()
    assert lease.current_holder().heartbeat > first
    lease.release()
    assert lease.current_holder() is None


def test_a_heartbeat_and_a_last_check_at_once_keep_the_lease(output_path):
    """The heartbeat thread and the step's `still_held` renew at the same moment: the second must
    present the token the first just wrote, not read the first's write as another holder's
    (a quickstart lost its finished training step that way on a busy machine)."""
    import threading
    import time

    lease = Lease(output_path, "driver-a", timeout_s=60)
    assert lease.try_acquire() is None
    replace = lease.file.replace

    def slow_replace(data, token):  # storage slow enough for both renewals to overlap
        time.sleep(0.3)
        return replace(data, token)

    lease.file.replace = slow_replace
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(lease.renew())) for _ in range(2)]
    threads.append(threading.Thread(target=lambda: results.append(lease.still_held())))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True, True, True]
    assert not lease.lost.is_set()
    assert lease.current_holder().holder == "driver-a"
    lease.release()
    assert lease.current_holder() is None


def test_the_last_check_reads_a_fresh_claim_and_renews_an_old_one(output_path):
    """`still_held` before a terminal write: a claim written less than a heartbeat ago is only read
    (one write fewer per step); an older one is renewed; one another driver took is lost either way."""
    clock = Clock()
    lease = Lease(output_path, "driver-a", timeout_s=60, clock=clock)
    assert lease.try_acquire() is None
    written = lease.file.read()
    clock.t += 5  # within a heartbeat (15 s): read, not rewritten
    assert lease.still_held() and lease.file.read() == written
    clock.t += 20  # older than a heartbeat: renewed, with the time of now
    assert lease.still_held() and lease.current_holder().heartbeat == clock.t

    # Taken over meanwhile (its holder judged it stale): the fresh claim is not ours any more.
    other = Lease(output_path, "driver-b", timeout_s=60, clock=Clock(clock.t + 120))
    assert other.try_acquire() is None
    clock.t += 1
    assert not lease.still_held() and lease.lost.is_set()
    assert lease.current_holder().holder == "driver-b"
    other.release()


def test_a_lease_released_before_its_first_heartbeat_never_starts_a_thread(output_path):
    """A step's heartbeat thread starts when its first heartbeat is due: a chain of short steps
    pays no thread start per step."""
    import threading

    lease = Lease(output_path, "driver-a", timeout_s=60, step_name="short")
    assert lease.try_acquire() is None
    lease.start_heartbeats()
    assert not [t for t in threading.enumerate() if t.name == "lease-short"]
    lease.release()
    assert lease.current_holder() is None and not lease.lost.is_set()
