"""Deciding whether an error means "the hardware went away" (preemption) or "the step is broken".

The two are retried from separate budgets, so the line matters: a lost node, actor, worker or
object is a preemption (the same code on healthy hardware would have gone on), while an exception
raised by the step function, an out-of-memory kill, a runtime-env failure or a timeout is a
failure (retrying on the same kind of hardware repeats it). An ambiguous failure -- say a
collective that broke because a peer VM was reclaimed -- becomes a preemption when the instance
metadata says the VM was preempted; that probe is injected, so tests never touch the network.
The table of Ray errors is the executor's (`marin_lab.execution.run.preemption`): one table for both.
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.request
from collections.abc import Callable

from marin_lab.cluster.errors import PreemptedError
from marin_lab.execution.run.preemption import FAILURE, PREEMPTION, RAY_ERROR_KINDS, ErrorKind, ray_error_kind

logger = logging.getLogger(__name__)

PreemptionProbe = Callable[[], bool]
"""Returns True when this machine's instance metadata says it was preempted."""


def classify_error(exc: BaseException, *, probe: PreemptionProbe | None = None) -> ErrorKind:
    """Map an exception from running a step to 'preemption' or 'failure'."""
    if isinstance(exc, PreemptedError):
        return PREEMPTION
    # A step function (or a host wrapper) that raised PreemptedError arrives wrapped in RayTaskError.
    cause = getattr(exc, "cause", None)
    if isinstance(cause, PreemptedError):
        return PREEMPTION
    if getattr(exc, "actor_init_failed", False):
        # The actor's constructor raised: that is our code or the environment, not lost hardware.
        return FAILURE
    kind = ray_error_kind(exc)
    if kind == PREEMPTION:
        return PREEMPTION
    if probe is not None and safe_probe(probe):
        return PREEMPTION
    return FAILURE


def safe_probe(probe: PreemptionProbe) -> bool:
    """Run a probe; a probe that breaks says 'not preempted' (we never invent preemptions)."""
    try:
        return bool(probe())
    except Exception as err:  # noqa: BLE001 - the probe is best-effort by design
        logger.warning("preemption probe %r failed (%s); treating as not preempted", probe, err)
        return False


GCE_PREEMPTED_URL = "http://metadata.google.internal/computeMetadata/v1/instance/preempted"
PREEMPTED_URL_ENV = "MARIN_PREEMPTED_URL"
"""Another URL to ask instead of GCE's (a local stand-in for tests and drills); set, it is asked off GCE too."""


def _urllib_fetch(url: str, timeout_s: float) -> str:
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - fixed URL
        return response.read().decode()


def _on_gce() -> bool:
    if os.environ.get("NO_GCE_CHECK", "").lower() in ("1", "true", "yes"):
        return False
    try:
        with open("/sys/class/dmi/id/product_name") as f:
            return "Google" in f.read()
    except OSError:
        return False


class MetadataPreemptionProbe:
    """Asks the GCE metadata server whether this VM was preempted; `fetch` is injectable for tests.

    The URL is `url`, else $MARIN_PREEMPTED_URL of the process asking (read at each call, so a
    host's own environment decides), else GCE's. Off GCE (or with NO_GCE_CHECK=true), with neither
    set and without an injected `fetch`, it answers False without any network access.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        fetch: Callable[[str, float], str] | None = None,
        timeout_s: float = 2.0,
    ):
        self.url = url
        self.fetch = fetch
        self.timeout_s = timeout_s

    def __call__(self) -> bool:
        url = self.url or os.environ.get(PREEMPTED_URL_ENV)
        if url is None:
            if self.fetch is None and not _on_gce():
                return False
            url = GCE_PREEMPTED_URL
        text = (self.fetch or _urllib_fetch)(url, self.timeout_s)
        return text.strip().upper() == "TRUE"

    def __repr__(self) -> str:
        return f"MetadataPreemptionProbe({self.url!r})" if self.url else "MetadataPreemptionProbe()"


class PreemptionWatcher:
    """Asks `probe` about every `interval_s` in a daemon thread; its first True sets `notice`.

    GCE gives a preempted VM about 30 s; a training loop that checks `notice` (the slice runner
    passes `host_env.PREEMPTION_NOTICE`) saves a checkpoint and stops within it."""

    def __init__(self, probe: PreemptionProbe, notice: threading.Event, where: str, interval_s: float = 1.0):
        self.probe, self.notice, self.where, self.interval_s = probe, notice, where, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="preemption-watcher", daemon=True)

    def start(self) -> None:
        self.notice.clear()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.is_set():
            if safe_probe(self.probe):
                logger.warning("%s: the instance metadata says this VM is being preempted", self.where)
                self.notice.set()
                return
            self._stop.wait(self.interval_s)


class FilePreemptionProbe:
    """A probe that reads a flag file: simulated instance metadata for tests and drills."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self) -> bool:
        try:
            with open(self.path) as f:
                return f.read().strip().upper() == "TRUE"
        except FileNotFoundError:
            return False

    def __repr__(self) -> str:
        return f"FilePreemptionProbe({self.path!r})"


__all__ = [
    "FAILURE",
    "PREEMPTION",
    "RAY_ERROR_KINDS",
    "ErrorKind",
    "FilePreemptionProbe",
    "MetadataPreemptionProbe",
    "PreemptionProbe",
    "PreemptionWatcher",
    "classify_error",
    "safe_probe",
]
