"""Regions and egress: a step that would read across regions is refused before it runs.

Reading a bucket from another region is billed per byte, silently (Marin #8136: the reason Marin
added a region guard and a transfer budget). Here each planned step's inputs and output are
placed by region before anything runs: a `gs://` path is in its bucket's location (asked once per
bucket: `gs://b` and `gcs://b` are one bucket), anything else is `local`; only reads from a bucket
are checked (http, hf and local sources are downloads or local reads, not inter-region
transfers). A step whose input lies in another region than its output is refused, with one line
naming the input, both regions and how to allow it:

- per step: `--allow_cross_region REGEX` (over step names; repeatable), or
- experiment-wide: `--transfer_budget_bytes N`: cross-region inputs are allowed while their total
  size (measured at plan time) stays within N.

Allowed cross-region reads are recorded in the experiment record (`cross_region_reads`: step,
input, regions, bytes) and logged. A step's inputs are its dependencies' output paths and every
URL its config names (any `scheme://` string, found by the identity walk, `hashing.scan_config`,
so no config is walked twice); the prefix's own region is where its output goes. A plan whose
outputs and inputs hold no bucket path asks nothing and costs one pass over its steps.

A plan never needs credentials or network: when a plan (`--dry_run`, `marin-lab compile`,
`explain`) cannot ask for a bucket's location (no credentials, no network, no answer within
10 s), that bucket's reads are *unchecked*, the plan reports says so, and the real run checks them
before it starts (`strict`: the run refuses what cannot be checked). A definite answer (no such
bucket, permission denied) is an error in both. After the first "cannot ask", a plan asks for no
other bucket: its time is bounded by one timeout.

The bucket-location lookup and the size measure are injectable (`Executor(regions=Regions(...))`),
so unit tests need no cloud; tests/integration/test_egress_gcs.py asks the GCS emulator for real
bucket locations.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Sequence

from marin_lab.execution.errors import ExecutorConfigError
from marin_lab.execution.plan.planner import Plan, PlannedStep
from marin_lab.io.conditional import cannot_ask, gcs_bucket_location
from marin_lab.io.fs import fs_and_path
from marin_lab.io.secrets import scrub_text

logger = logging.getLogger(__name__)

LOCAL = "local"
UNCHECKED = "unchecked"
CLOUD = ("gs://", "gcs://")
"""URL schemes whose bytes have a region (a bucket's location)."""
LocationLookup = Callable[[str], str]
PLAN_TIMEOUT_S = 10.0
RUN_TIMEOUT_S = 60.0


class CrossRegionError(ExecutorConfigError):
    """A step would read across regions without an allowance."""


def bucket_of(url: str) -> str:
    """The bucket of a `gs://` / `gcs://` URL."""
    rest = url[url.index("://") + 3 :]
    slash = rest.find("/")
    return rest if slash < 0 else rest[:slash]


class Regions:
    """Where a URL's bytes live; one lookup per bucket, cached.

    `of(url)` is the bucket's location; in a plan (`strict=False`) a bucket whose location cannot be
    asked for is UNCHECKED (`unchecked[bucket]` says why), and a strict lookup (the run) asks again.
    """

    def __init__(self, bucket_location: LocationLookup | None = None, size: Callable[[str], int | None] | None = None):
        self._bucket_location = bucket_location
        self.size = size or _size
        self._cache: dict[str, str] = {}
        self.unchecked: dict[str, str] = {}
        """bucket -> why its location could not be asked for (plans only)."""
        self._cannot_ask: str | None = None
        self.lookups = 0
        """How many times a bucket's location was asked for (each distinct bucket once)."""

    def of(self, url: str, *, strict: bool = True) -> str:
        if not url.startswith(CLOUD):
            return LOCAL
        bucket = bucket_of(url)
        region = self._cache.get(bucket)
        if region is not None:
            return region
        if not strict and bucket in self.unchecked:
            return UNCHECKED
        return self._ask(bucket, strict)

    def _ask(self, bucket: str, strict: bool) -> str:
        if not strict and self._cannot_ask is not None:  # bounded: one timeout per plan, not one per bucket
            self.unchecked[bucket] = self._cannot_ask
            return UNCHECKED
        self.lookups += 1
        try:
            region = _bounded(lambda: self._lookup(bucket, strict), RUN_TIMEOUT_S if strict else PLAN_TIMEOUT_S)
        except Exception as err:
            why = f"{type(err).__name__}: {scrub_text(str(err))}"
            if not strict and cannot_ask(err):
                self._cannot_ask = why
                self.unchecked[bucket] = why
                return UNCHECKED
            raise CrossRegionError(
                f"cannot find the location of bucket {bucket!r} ({why}); check the path and the credentials"
            ) from None
        self._cache[bucket] = region
        self.unchecked.pop(bucket, None)
        return region

    def _lookup(self, bucket: str, strict: bool) -> str:
        if self._bucket_location is not None:
            return self._bucket_location(bucket)
        return gcs_bucket_location(bucket, patient=strict)

    def cannot_read(self, url: str) -> str | None:
        """Why a plan cannot read under the bucket path `url` (no credentials or network), else None."""
        if not url.startswith(CLOUD):
            return None
        self.of(url, strict=False)
        return self.unchecked.get(bucket_of(url))


def _bounded(fn: Callable[[], str], timeout_s: float) -> str:
    """`fn()` in a daemon thread, given up after `timeout_s` (TimeoutError): a lookup never blocks a
    plan on the network, whatever the client library does (credential discovery included)."""
    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # handed to the caller
            box["error"] = err

    thread = threading.Thread(target=work, name="bucket-location", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return str(box["value"])


@dataclasses.dataclass(frozen=True)
class CrossRegionRead:
    step: str
    input: str
    input_region: str
    output_region: str
    bytes: int | None


@dataclasses.dataclass(frozen=True)
class UncheckedRead:
    """A bucket read a plan could not place (the run checks it before it starts)."""

    step: str
    input: str
    output_path: str
    buckets: tuple[str, ...]
    reason: str


@dataclasses.dataclass
class Egress:
    """What the guard found: allowed cross-region reads, and (plans only) the reads left unchecked."""

    allowed: list[CrossRegionRead] = dataclasses.field(default_factory=list)
    unchecked: list[UncheckedRead] = dataclasses.field(default_factory=list)

    def unchecked_buckets(self) -> dict[str, str]:
        """bucket -> why it could not be placed, over the unchecked reads."""
        return {b: r.reason for r in self.unchecked for b in r.buckets}


def step_inputs(ps: PlannedStep) -> list[str]:
    """What `ps` reads: its dependencies' outputs and every URL its config names."""
    seen = [d.output_path for d in ps.dependencies]
    for url in ps.scan.urls:
        if url not in seen:
            seen.append(url)
    return seen


def _size(url: str) -> int | None:
    try:
        fs, path = fs_and_path(url)
        return int(fs.du(path, total=True))
    except Exception:  # a path that does not exist yet (a dependency's future output)
        return None


def check_egress(
    plan: Plan, regions: Regions, *, allow: Sequence[str] = (), budget_bytes: int | None = None, strict: bool = True
) -> Egress:
    """The allowed (and, unless `strict`, the unchecked) cross-region reads of `plan`; raises
    CrossRegionError at the first refused one.

    Only steps that read a bucket are looked at; each bucket's location is asked once (`Regions`).
    """
    patterns = [re.compile(p) for p in allow]
    egress = Egress()
    spent = 0
    # A dependency's output is a bucket path only if some output is: else only config URLs can be.
    cloud_outputs = plan.prefix.startswith(CLOUD) or any(
        ps.output_path.startswith(CLOUD) for ps in plan.uncommon_steps() if ps.step.override_output_path
    )
    for ps in plan.steps if cloud_outputs or plan.names_urls else ():
        if not (cloud_outputs or ps.scan.urls):
            continue
        cloud = [d.output_path for d in ps.dependencies if d.output_path.startswith(CLOUD)] if cloud_outputs else []
        cloud += [url for url in ps.scan.urls if url.startswith(CLOUD)]
        if not cloud:
            continue  # only a bucket has a region to bill from (http, hf and local reads are not placed)
        out_region = regions.of(ps.output_path, strict=strict)
        for url in dict.fromkeys(cloud):
            in_region = regions.of(url, strict=strict)
            if in_region == out_region and (in_region != UNCHECKED or bucket_of(url) == bucket_of(ps.output_path)):
                continue  # one region (or one bucket, whatever its region)
            if UNCHECKED in (in_region, out_region):
                buckets = tuple(
                    bucket_of(u)
                    for u in (url, ps.output_path)
                    if u.startswith(CLOUD) and bucket_of(u) in regions.unchecked
                )
                egress.unchecked.append(
                    UncheckedRead(ps.name, url, ps.output_path, buckets, regions.unchecked[buckets[0]])
                )
                continue
            read = CrossRegionRead(ps.name, url, in_region, out_region, regions.size(url))
            if any(p.search(ps.name) for p in patterns):
                egress.allowed.append(read)
                continue
            if budget_bytes is not None and read.bytes is not None and spent + read.bytes <= budget_bytes:
                spent += read.bytes
                egress.allowed.append(read)
                continue
            over = (
                f"; the transfer budget of {budget_bytes} bytes would be exceeded ({spent} spent, this input is "
                f"{read.bytes if read.bytes is not None else 'of unknown size'})"
                if budget_bytes is not None
                else ""
            )
            raise CrossRegionError(
                scrub_text(
                    f"step '{ps.identity}' would read {url} ({in_region}) into {ps.output_path} ({out_region}): a "
                    f"cross-region read{over}; copy the input to {out_region}, or allow it with "
                    f"--allow_cross_region '^{re.escape(ps.name)}$' or --transfer_budget_bytes N"
                )
            )
    for read in egress.allowed:
        logger.warning(
            "cross-region read allowed: step %s reads %s (%s) into %s (%s bytes)",
            read.step,
            read.input,
            read.input_region,
            read.output_region,
            read.bytes if read.bytes is not None else "?",
        )
    if egress.unchecked:
        logger.warning(
            "egress: the regions of %s were not checked (%s); the run checks them before it starts",
            ", ".join(f"gs://{b}" for b in egress.unchecked_buckets()),
            next(iter(egress.unchecked_buckets().values())),
        )
    return egress
