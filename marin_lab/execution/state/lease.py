"""Leases: one writer per output path, across drivers, processes and hosts.

A lease is the file `{output_path}/.executor_lease` holding the holder's id, host, pid and the
time of its last heartbeat. Taking it is an atomic conditional create; renewing it is a
compare-and-swap against what the holder last wrote (see `marin_lab.io.conditional`). So:

- exactly one driver wins a free lease;
- a lease whose heartbeat is older than the timeout is stale, and a driver may take it over (with
  a compare-and-swap, so exactly one does); a lease held by a process that is provably dead on
  this host is stale at once;
- a holder whose renewal fails has lost the lease: it must stop the step and write nothing more
  (Marin #8107). `Lease.lost` is set, and the `on_lost` callback fires once.

Release is a conditional delete and never raises: a terminal status write and the release are
separate operations, and neither may fail the other (Marin #5026).
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from marin_lab.execution.state.status import LEASE_FILE
from marin_lab.io.conditional import ConditionalFile, ConflictError, conditional_file
from marin_lab.io.fs import join, read_bytes

logger = logging.getLogger(__name__)

HOSTNAME = socket.gethostname()
DEFAULT_TIMEOUT_S = 60.0
"""A lease whose heartbeat is older than this is stale (Marin's HEARTBEAT_TIMEOUT is 90 s)."""


def new_driver_id() -> str:
    return f"{HOSTNAME}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _process_start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


_MY_START = _process_start_time(os.getpid())


@dataclass(frozen=True)
class LeaseHolder:
    holder: str
    host: str
    pid: int
    pid_start: float | None
    heartbeat: float
    timeout_s: float

    @staticmethod
    def parse(data: bytes) -> LeaseHolder | None:
        try:
            d = json.loads(data)
            return LeaseHolder(
                holder=str(d["holder"]),
                host=str(d["host"]),
                pid=int(d["pid"]),
                pid_start=d.get("pid_start"),
                heartbeat=float(d["heartbeat"]),
                timeout_s=float(d["timeout_s"]),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def age(self, now: float) -> float:
        return now - self.heartbeat

    def provably_dead(self) -> bool:
        """True only when the holder ran on this host and its process is gone (or was replaced)."""
        if self.host != HOSTNAME:
            return False
        start = _process_start_time(self.pid)
        if start is None:
            return True
        return self.pid_start is not None and abs(start - self.pid_start) > 1.0

    def is_stale(self, now: float) -> bool:
        return self.age(now) > self.timeout_s or self.provably_dead()


class Lease:
    """The lease on one output path, as seen by one driver (`holder`)."""

    def __init__(
        self,
        output_path: str,
        holder: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        heartbeat_s: float | None = None,
        clock: Callable[[], float] = time.time,
        step_name: str = "",
    ):
        self.output_path = output_path
        self.url = join(output_path, LEASE_FILE)
        self.file: ConditionalFile = conditional_file(self.url)
        self.holder = holder
        self.timeout_s = timeout_s
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else max(timeout_s / 4, 0.05)
        self.clock = clock
        self.step_name = step_name
        self.lost = threading.Event()
        self._token: Any = None
        self._written = float("-inf")
        """When this holder last wrote the lease (`clock`): a claim this fresh needs no renewal to check it."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()  # the heartbeat thread is started, or stopped, one at a time
        self._on_lost: Callable[[], None] | None = None
        # The heartbeat thread and `still_held` (the step's own thread) both renew: each must
        # present the token the other wrote last, or the second reads as someone else's write.
        self._renewing = threading.Lock()

    def _content(self) -> bytes:
        return json.dumps(
            {
                "holder": self.holder,
                "host": HOSTNAME,
                "pid": os.getpid(),
                "pid_start": _MY_START,
                "heartbeat": self.clock(),
                "timeout_s": self.timeout_s,
                "step": self.step_name,
            }
        ).encode()

    def current_holder(self) -> LeaseHolder | None:
        got = self.file.read()
        return None if got is None else LeaseHolder.parse(got[0])

    def try_acquire(self) -> LeaseHolder | None:
        """Take the lease if free or stale. Returns None on success, else the live holder."""
        for _ in range(10):
            got = self.file.read()
            try:
                if got is None:
                    self._token, self._written = self.file.create(self._content()), self.clock()
                    return None
                data, token = got
                current = LeaseHolder.parse(data)
                if current is not None and current.holder == self.holder:
                    self._token, self._written = self.file.replace(self._content(), token), self.clock()
                    return None
                if current is None or current.is_stale(self.clock()):
                    why = (
                        "unreadable"
                        if current is None
                        else (
                            "held by a dead process"
                            if current.provably_dead()
                            else f"{current.age(self.clock()):.0f}s old"
                        )
                    )
                    logger.info("step '%s': taking over a stale lease (%s)", self.step_name, why)
                    self._token, self._written = self.file.replace(self._content(), token), self.clock()
                    return None
                return current
            except ConflictError:
                continue  # someone else moved first: look again
        current = self.current_holder()
        if current is None:
            raise RuntimeError(f"{self.url}: lease contention did not settle after 10 tries")
        return current

    def renew(self) -> bool:
        """Heartbeat. False (and `lost` set) if someone else holds the lease now."""
        with self._renewing:
            if self.lost.is_set():
                return False
            try:
                self._token, self._written = self.file.replace(self._content(), self._token), self.clock()
                return True
            except ConflictError:
                pass
            except Exception:  # a transient storage error: the lease is not lost until the timeout
                logger.warning("step '%s': lease heartbeat failed; will retry", self.step_name, exc_info=True)
                return True
        self._mark_lost()  # outside the lock: its callback may stop the step
        return False

    def _mark_lost(self) -> None:
        if not self.lost.is_set():
            self.lost.set()
            holder = self.current_holder()
            logger.error(
                "step '%s': lost the lease on %s to %s; stopping the step and writing nothing more",
                self.step_name,
                self.output_path,
                holder.holder if holder else "nobody",
            )
            if self._on_lost is not None:
                self._on_lost()

    def start_heartbeats(self, on_lost: Callable[[], None] | None = None) -> None:
        """Renew the lease every `heartbeat_s` until `stop_heartbeats`, in a thread of its own that
        starts at the first heartbeat (`_FirstBeats`)."""
        self._on_lost = on_lost
        self._stop.clear()
        _FIRST_BEATS.add(self)

    def _start_thread(self) -> None:
        with self._starting:
            if self._stop.is_set() or self._thread is not None:
                return
            self._thread = threading.Thread(target=self._beat, name=f"lease-{self.step_name}", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        delay = 0.0  # started when the first heartbeat is due
        while not self._stop.wait(delay):
            if not self.renew():
                return
            delay = self.heartbeat_s

    def stop_heartbeats(self) -> None:
        self._stop.set()
        with self._starting:
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def still_held(self) -> bool:
        """A last check before a terminal write: renew once, synchronously.

        A claim this holder wrote less than a heartbeat ago (and at most a quarter of the timeout)
        that still holds what it wrote is only read: no one may take it until a timeout after that
        write, and the heartbeats go on meanwhile; rewriting it would cost a write per step."""
        with self._renewing:
            fresh = not self.lost.is_set() and self._token is not None
            if fresh and self.clock() - self._written < min(self.heartbeat_s, self.timeout_s / 4):
                try:
                    got = self.file.read()
                except Exception:  # unreadable now: the renewal below decides
                    got = None
                if got is not None and got[1] == self._token:
                    return True
        return self.renew()

    def release(self) -> None:
        """Give the lease back. Never raises (a failed release only delays the next taker)."""
        self.stop_heartbeats()
        with self._renewing:
            if self.lost.is_set() or self._token is None:
                return
            try:
                self.file.delete(self._token)
            except ConflictError:
                logger.warning("step '%s': lease changed hands before release; left it", self.step_name)
            except Exception:
                logger.warning(
                    "step '%s': could not release the lease (it will go stale)", self.step_name, exc_info=True
                )
            self._token = None


class _FirstBeats:
    """Starts each lease's heartbeat thread when its first heartbeat is due, from one thread for the
    process: a step that ends sooner (nearly every step of a chain of small ones) never starts one,
    where a thread started with each lease cost a thread start on the step's path (a round trip
    through the scheduler, milliseconds on a busy machine) at every step."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # threads and their locks do not cross a fork

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, Lease]] = []
        self._seq = itertools.count()
        self._running = False

    def add(self, lease: Lease) -> None:
        with self._cond:
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, args=(self._cond,), name="lease-first-beats", daemon=True).start()
            heapq.heappush(self._due, (time.monotonic() + lease.heartbeat_s, next(self._seq), lease))
            self._cond.notify()

    def _run(self, cond: threading.Condition) -> None:
        while True:
            with cond:
                while not self._due or self._due[0][0] > time.monotonic():
                    cond.wait(self._due[0][0] - time.monotonic() if self._due else None)
                lease = heapq.heappop(self._due)[2]
            lease._start_thread()  # does nothing for a lease stopped meanwhile


_FIRST_BEATS = _FirstBeats()


# --------------------------------------------------------------------------------------------
# a RUNNING status whose driver is gone

DRIVER_GONE = "driver gone"
"""The one phrase every reader uses: `RUNNING, driver gone since T` (status, browser, plan)."""


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat(timespec="seconds")


def driver_gone_since(lease_data: bytes | None, status: dict[str, Any], now: float | None = None) -> str | None:
    """For a RUNNING status: None while its driver's lease is live; else when the driver was
    last seen (its lease's last heartbeat, or the status's own heartbeat or time), ISO-8601.

    A RUNNING step whose lease is stale (its heartbeat older than its timeout, or its process
    provably dead on this host) or missing (released, or never written) has no driver: the next
    run takes it over. `lease_data` is the lease file's bytes (None when there is none)."""
    if status.get("status") != "RUNNING":
        return None
    now = time.time() if now is None else now
    holder = LeaseHolder.parse(lease_data) if lease_data is not None else None
    if holder is not None:
        if not holder.is_stale(now):
            return None
        return _iso(holder.heartbeat)
    seen = status.get("heartbeat") or status.get("time")
    return str(seen) if isinstance(seen, str) and seen else "an unknown time"


def running_driver_gone(output_path: str, status: dict[str, Any], now: float | None = None) -> str | None:
    """`driver_gone_since` for a step folder, reading its lease file; never raises."""
    if status.get("status") != "RUNNING":
        return None
    try:
        data: bytes | None = read_bytes(join(output_path, LEASE_FILE))
    except (FileNotFoundError, NotADirectoryError):
        data = None
    except Exception:  # unreadable storage: say nothing rather than guess
        return None
    return driver_gone_since(data, status, now)


def process_identity() -> dict[str, Any]:
    """Who this process is, as a run record keeps it: host, pid and the pid's start time."""
    return {"host": HOSTNAME, "pid": os.getpid(), "pid_start": _MY_START}


def provably_gone(identity: Any) -> bool:
    """True only when `identity` (from `process_identity`) names a process on this host that is
    gone or was replaced; a process on another host is never judged from here."""
    if not isinstance(identity, dict) or identity.get("host") != HOSTNAME or not isinstance(identity.get("pid"), int):
        return False
    start = _process_start_time(identity["pid"])
    if start is None:
        return True
    recorded = identity.get("pid_start")
    return isinstance(recorded, (int, float)) and abs(start - recorded) > 1.0
