"""The experiment record (`{prefix}/experiments/{script}-{hash8}.json`) as a type, with one parser.

The executor writes one per run of a script (`ExperimentRecord.to_json()`, redacted whole); the
CLI (`marin-lab status`), gc, explain's last run, reproduce and the browser (which hands the bytes
from its confined reader) all read it with `parse_experiment_record`, so a record one of them calls
damaged is damaged to all. The JSON on disk is the contract: `to_json()` writes the keys in the
order the executor always wrote them, and a field this version does not know is kept in `extra`
and written back, so a record read and written again is the same bytes.

Damage is one `RecordError` naming the file (and the field): not UTF-8, not JSON, not an object,
`steps` not a list, or (in a record with a `schema`) a known field of the wrong type. An entry of
`steps` that is not an object is not damage to the record: listings show that step as CORRUPT.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from marin_lab.store.errors import RecordError
from marin_lab.store.reader import Reader, read_file

SCHEMA = 1

_STR = (str,)
_LAYOUT: tuple[tuple[str, tuple[type, ...], str], ...] = (
    ("schema", (int,), "an integer"),
    ("script", _STR, "a string"),
    ("name", _STR, "a string"),
    ("hash", _STR, "a string"),
    ("description", _STR, "a string"),
    ("created", _STR, "a string"),
    ("command_line", (list,), "a list of strings"),
    ("git", (dict,), "an object"),
    ("code", (dict,), "an object"),
    ("packages", (dict,), "an object"),
    ("prefix", _STR, "a string"),
    ("driver", _STR, "a string"),
    ("steps", (list,), "a list"),
    ("cross_region_reads", (list,), "a list of objects"),
    ("run", _STR, "a string"),
    ("launch", (dict,), "an object"),
)
_OPTIONAL = {"cross_region_reads", "run", "launch"}
"""Written only when set: reads allowed across regions, this run's id, the launch that started it."""


@dataclasses.dataclass
class ExperimentRecord:
    """One run of an experiment script: its provenance and its steps. Field meanings:
    docs/executor.md and docs/reproducibility.md."""

    schema: int | None = SCHEMA
    """None for a record written without one (older than the schema field)."""
    script: str | None = None
    name: str | None = None
    hash: str | None = None
    description: str | None = None
    created: str | None = None
    command_line: list[Any] | None = None
    git: dict[str, Any] | None = None
    code: dict[str, Any] | None = None
    packages: dict[str, Any] | None = None
    prefix: str | None = None
    driver: str | None = None
    steps: list[Any] = dataclasses.field(default_factory=list)
    """One object per step: name, identity, output_path, info_path, fn, dependencies, version, config."""
    cross_region_reads: list[Any] | None = None
    run: str | None = None
    """This run's id: its run record is `{script}-{hash8}/runs/{started}-{run}.json`."""
    launch: dict[str, Any] | None = None
    """`{run_id, attempt}` when `marin-lab launch` started the run."""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Fields this version does not know, kept as they were and written back."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, _, _ in _LAYOUT:
            value = getattr(self, key)
            if value is None and (key in _OPTIONAL or key == "schema"):
                continue
            out[key] = value
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Any, url: str = "<experiment record>") -> ExperimentRecord:
        """Parse a record; `url` names it in errors. Raises RecordError when it is damaged."""
        if not isinstance(data, dict):
            raise RecordError(
                url, f"is {type(data).__name__}, not a JSON object; rerun the experiment to write it again"
            )
        strict = "schema" in data  # ours; older records are read leniently (a field of the wrong type kept aside)
        known = {k for k, _, _ in _LAYOUT}
        extra = {k: v for k, v in data.items() if k not in known}
        kwargs: dict[str, Any] = {}
        for key, types, what in _LAYOUT:
            if key not in data:
                continue
            value = data[key]
            ok = value is None or (isinstance(value, types) and not isinstance(value, bool))
            if key == "steps" and not isinstance(value, list):
                # Without its steps a record says nothing: damage whatever its schema.
                raise RecordError(url, "is not a list", field="steps")
            if ok:
                kwargs[key] = value
            elif strict:
                raise RecordError(
                    url,
                    f"is {type(value).__name__}, expected {what}; rerun the experiment to write it again",
                    field=key,
                )
            else:
                extra[key] = value
        if "schema" not in data:
            kwargs["schema"] = None
        if "steps" not in data:
            raise RecordError(url, "is not a list", field="steps")
        # `extra` keeps the keys' written order among the unknown ones; known ones come first.
        return cls(**kwargs, extra=extra)


def parse_experiment_record(raw: bytes, url: str) -> ExperimentRecord:
    """A record from its bytes; raises RecordError naming `url` (and the field) when it is damaged."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise RecordError(url, f"unreadable (UnicodeDecodeError: not UTF-8 at byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise RecordError(url, f"unreadable (JSONDecodeError: not valid JSON: {err})") from None
    except RecursionError:
        raise RecordError(url, "unreadable (RecursionError: not valid JSON: nested too deep)") from None
    return ExperimentRecord.from_json(data, url)


def read_experiment_record(url: str, read: Reader = read_file) -> ExperimentRecord | None:
    """The experiment record at `url`; None when there is no such file. Raises RecordError naming
    the file when it cannot be read or is damaged. `read` supplies the bytes (`store.reader`)."""
    try:
        raw = read(url)
    except OSError as err:  # a folder, a FIFO, a permission problem
        raise RecordError(url, f"unreadable ({type(err).__name__}: {err})") from None
    return None if raw is None else parse_experiment_record(raw, url)
