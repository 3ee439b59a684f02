"""Regions and egress: a step that would read across regions is refused at plan time.

Reading a bucket from another region is billed per byte, silently (Marin #8136: the reason Marin
added a region guard and a transfer budget). Here each planned step's inputs and output are
placed by region before anything runs: a `gs://` path is in its bucket's location (asked once per
bucket), anything else is `local`; only reads from a bucket are checked (http, hf and local
sources are downloads or local reads, not inter-region transfers). A step whose input lies in another region than its output is
refused, with one line naming the input, both regions and how to allow it:

- per step: `--allow_cross_region REGEX` (over step names; repeatable), or
- experiment-wide: `--transfer_budget_bytes N`: cross-region inputs are allowed while their total
  size (measured at plan time) stays within N.

Allowed cross-region reads are recorded in the experiment record (`cross_region_reads`: step,
input, regions, bytes) and logged. Paths a step's config names (any `scheme://` string) and its
dependencies' output paths are its inputs; the prefix's own region is where its output goes.
The bucket-location lookup and the size measure are injectable (`Executor(regions=Regions(...))`), so unit tests need no cloud; tests/integration/test_egress.py
asks the GCS emulator for real bucket locations.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from marin_lab.execution.errors import ExecutorConfigError
from marin_lab.execution.plan import Plan, PlannedStep
from marin_lab.execution.secrets import scrub_text
from marin_lab.execution.step import InputName, OutputName, VersionedValue
from marin_lab.io.conditional import gcs_bucket_location
from marin_lab.io.fs import fs_and_path, is_local

logger = logging.getLogger(__name__)

LOCAL = "local"
LocationLookup = Callable[[str], str]


class CrossRegionError(ExecutorConfigError):
    """A step would read across regions without an allowance."""


class Regions:
    """Where a URL's bytes live; one lookup per bucket."""

    def __init__(self, bucket_location: Callable[[str], str] | None = None,
                 size: Callable[[str], int | None] | None = None):
        self._bucket_location = bucket_location or gcs_bucket_location
        self.size = size or _size
        self._cache: dict[str, str] = {}

    def of(self, url: str) -> str:
        if is_local(url) or not url.startswith(("gs://", "gcs://")):
            return LOCAL
        scheme, _, rest = url.partition("://")
        bucket = rest.split("/", 1)[0]
        key = f"{scheme}://{bucket}"
        if key not in self._cache:
            try:
                self._cache[key] = self._bucket_location(bucket)
            except Exception as err:  # no such bucket, no permission: say so at plan time
                raise CrossRegionError(f"cannot find the location of bucket {bucket!r} ({type(err).__name__}: "
                                       f"{scrub_text(str(err))}); check the path and the credentials") from None
        return self._cache[key]


@dataclasses.dataclass(frozen=True)
class CrossRegionRead:
    step: str
    input: str
    input_region: str
    output_region: str
    bytes: int | None


def _urls(value: Any) -> Iterator[str]:
    if isinstance(value, VersionedValue):
        value = value.value
    if isinstance(value, InputName | OutputName):
        return
    if isinstance(value, str):
        if re.match(r"^[a-z][a-z0-9+.-]*://", value):
            yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _urls(getattr(value, f.name))
    elif isinstance(value, dict):
        for v in value.values():
            yield from _urls(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _urls(v)


def step_inputs(ps: PlannedStep) -> list[str]:
    """What `ps` reads: its dependencies' outputs and every URL its config names."""
    seen = [d.output_path for d in ps.dependencies]
    for url in _urls(ps.step.config):
        if url not in seen:
            seen.append(url)
    return seen


def _size(url: str) -> int | None:
    try:
        fs, path = fs_and_path(url)
        return int(fs.du(path, total=True))
    except Exception:  # a path that does not exist yet (a dependency's future output)
        return None


def check_egress(plan: Plan, regions: Regions, *, allow: Sequence[str] = (),
                 budget_bytes: int | None = None) -> list[CrossRegionRead]:
    """The allowed cross-region reads of `plan`; raises CrossRegionError at the first refused one."""
    patterns = [re.compile(p) for p in allow]
    allowed: list[CrossRegionRead] = []
    spent = 0
    for ps in plan.steps:
        out_region = regions.of(ps.output_path)
        for url in step_inputs(ps):
            if not url.startswith(("gs://", "gcs://")):
                continue  # only a bucket has a region to bill from (http, hf and local reads are not placed)
            in_region = regions.of(url)
            if in_region == out_region:
                continue
            read = CrossRegionRead(ps.name, url, in_region, out_region, regions.size(url))
            if any(p.search(ps.name) for p in patterns):
                allowed.append(read)
                continue
            if budget_bytes is not None and read.bytes is not None and spent + read.bytes <= budget_bytes:
                spent += read.bytes
                allowed.append(read)
                continue
            over = (f"; the transfer budget of {budget_bytes} bytes would be exceeded ({spent} spent, this input is "
                    f"{read.bytes if read.bytes is not None else 'of unknown size'})" if budget_bytes is not None else "")
            raise CrossRegionError(scrub_text(
                f"step '{ps.identity}' would read {url} ({in_region}) into {ps.output_path} ({out_region}): a "
                f"cross-region read{over}; copy the input to {out_region}, or allow it with "
                f"--allow_cross_region '^{re.escape(ps.name)}$' or --transfer_budget_bytes N"))
    for read in allowed:
        logger.warning("cross-region read allowed: step %s reads %s (%s) into %s (%s bytes)", read.step, read.input,
                       read.input_region, read.output_region, read.bytes if read.bytes is not None else "?")
    return allowed
