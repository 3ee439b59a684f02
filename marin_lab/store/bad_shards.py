"""The bad-shard report (`layout.BAD_SHARDS_FILE`, `{output_path}/.bad_shards.json`), one parser.

A data step that FAILED for bad shards leaves it (`marin_lab.processing.quarantine` writes it);
`marin-lab rerun-shards` (reproduce/rerun_shards.py) and the next run of the step read it. A JSON
object whose `bad` is a list of objects, each naming a shard (`shard`) and why it failed; `rerun_requested` is set by
`marin-lab rerun-shards`. Damage is one line naming the file and what to do.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from marin_lab.io.fs import join, write_json
from marin_lab.store.errors import RecordError
from marin_lab.store.layout import BAD_SHARDS_FILE
from marin_lab.store.reader import Reader, read_file

_FIX = "delete it and rerun the experiment with --force_run_failed true"


class BadShardsReportError(RecordError):
    """A damaged bad-shard report: `{url} is damaged (why); delete it and rerun ...`."""

    def __init__(self, url: str, why: str):
        super().__init__(url, why)
        self.args = (f"{url} is damaged ({why}); {_FIX}",)

    def __str__(self) -> str:
        return str(self.args[0])


def bad_shards_url(output_path: str) -> str:
    """`{output_path}/.bad_shards.json`."""
    return join(output_path, BAD_SHARDS_FILE)


def parse_bad_shards(raw: bytes, url: str) -> dict[str, Any]:
    """The report from its bytes; raises BadShardsReportError naming `url` when it is damaged."""
    try:
        report = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as err:  # not UTF-8 (UnicodeDecodeError), not JSON
        raise BadShardsReportError(url, f"{type(err).__name__}: {err}") from None
    if not (isinstance(report, dict) and isinstance(report.get("bad"), list)):
        raise BadShardsReportError(url, "not an object with a `bad` list")
    for i, entry in enumerate(report["bad"]):
        if not isinstance(entry, dict):
            raise BadShardsReportError(url, f"bad[{i}] is {type(entry).__name__}, not an object naming a shard")
    return report


def read_bad_shards(output_path: str, read: Reader = read_file) -> dict[str, Any] | None:
    """The bad-shard report of a step's output; None when there is none."""
    url = bad_shards_url(output_path)
    try:
        raw = read(url)
    except OSError as err:
        raise BadShardsReportError(url, f"{type(err).__name__}: {err}") from None
    return None if raw is None else parse_bad_shards(raw, url)


def shard_names(report: dict[str, Any] | None) -> list[str]:
    """The names of a report's bad shards, as text (a hand-edited report may hold numbers)."""
    return [str(b.get("shard", "?")) for b in (report or {}).get("bad", []) if isinstance(b, dict)]


def request_rerun(output_path: str) -> dict[str, Any]:
    """Mark the report: the next run of the step must finish every shard (no allowance)."""
    report = read_bad_shards(output_path)
    if report is None:
        raise RecordError(bad_shards_url(output_path), f"no bad-shard report ({BAD_SHARDS_FILE}) to rerun from")
    report["rerun_requested"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    write_json(bad_shards_url(output_path), report)
    return report
