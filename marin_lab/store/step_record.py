"""The step record (`.executor_info`) as types, with one reader.

The on-disk JSON is the contract (docs/executor.md, "The step record"): these types describe it,
they do not change it. `StepRecord.to_json()` writes the keys in the order the executor always
wrote them, so a record read and written again is the same bytes.

One parser, `parse_step_record` (bytes in; `read_step_record` reads them first), is used by the
executor, the CLI, gc, explain and the browser (which hands it bytes from its confined reader):

- tolerant: a field it does not know (written by a newer version, or added by hand) is kept in
  `extra` and written back; a field an older record lacks takes its default;
- clear: a damaged record is a `RecordError` naming the file, and the field when one field is
  the problem (`.../.executor_info: field 'attempts' is a str, expected a list of objects`).

Records that carry no `schema` (Marin's own `.executor_info`, very old ones) are read leniently:
a known field of an unexpected type moves to `extra` instead of being an error, so that outputs
Marin produced are still reused.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from marin_lab.io.fs import join
from marin_lab.store.errors import RecordError
from marin_lab.store.layout import INFO_FILE
from marin_lab.store.reader import Reader, read_file

SCHEMA = 1


_MISSING = object()


def _check(
    data: dict[str, Any],
    key: str,
    types: tuple[type, ...],
    what: str,
    url: str,
    strict: bool,
    extra: dict[str, Any],
    default: Any = None,
) -> Any:
    """`data[key]` when it has one of `types` (None always allowed); else an error (strict) or
    the value moved to `extra` (lenient)."""
    value = data.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default if value is _MISSING else None
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return value
    if strict:
        raise RecordError(url, f"is {_kind(value)}, expected {what}; rerun the step to rewrite its record", key)
    extra[key] = value
    return default


def _kind(value: Any) -> str:
    text = json.dumps(value, default=str)
    return f"{type(value).__name__} ({text[:40]}{'...' if len(text) > 40 else ''})"


def _entries(data: dict[str, Any], key: str, url: str, strict: bool, extra: dict[str, Any], parse: Any) -> list[Any]:
    """A list of objects, each parsed by `parse(entry, where)`."""
    items = _check(data, key, (list,), "a list of objects", url, strict, extra, default=[]) or []
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            if strict:
                raise RecordError(
                    url, f"is {_kind(item)}, expected an object; rerun the step to rewrite its record", f"{key}[{i}]"
                )
            extra[key] = items
            return []
        out.append(parse(item, f"{key}[{i}]", url, strict))
    return out


@dataclasses.dataclass
class Attempt:
    """One try at running the step's function."""

    attempt: int
    kind: str | None = None
    """None while running or after a success; 'preemption' or 'failure' after a failed try."""
    started: str | None = None
    ended: str | None = None
    status: str = "RUNNING"
    error: str | None = None
    """The traceback (redacted) of a failed try."""
    driver: str | None = None
    hardware: dict[str, Any] | None = None
    """What this try ran on (a HardwareRunner's slices and hosts), once it got as far as holding it;
    written only when known, so records without it (older ones, local steps) keep their bytes."""
    submitted: str | None = None
    """When the try was handed to the backend, where its work started later (`started`): it waited
    `queued_s` seconds for resources, which is neither its duration nor its cost. Written only then."""
    queued_s: float | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "attempt": self.attempt,
            "kind": self.kind,
            "started": self.started,
            "ended": self.ended,
            "status": self.status,
            "error": self.error,
            "driver": self.driver,
        }
        if self.submitted is not None:
            out["submitted"], out["queued_s"] = self.submitted, self.queued_s
        if self.hardware is not None:
            out["hardware"] = self.hardware
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str, url: str, strict: bool) -> Attempt:
        types = {"attempt": (int,), "hardware": (dict,), "queued_s": (int, float)}
        return cls(**_fields(cls, data, where, url, strict, types))


@dataclasses.dataclass
class StatusEvent:
    """One line of the status history: RUNNING when an attempt starts, then its end."""

    status: str
    time: str | None = None
    attempt: int | None = None
    driver: str | None = None
    message: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "time": self.time,
            "attempt": self.attempt,
            "driver": self.driver,
            "message": self.message,
            **self.extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str, url: str, strict: bool) -> StatusEvent:
        return cls(**_fields(cls, data, where, url, strict, {"attempt": (int,)}))


_EXPECTED: dict[tuple[type, ...], str] = {(int,): "an integer", (dict,): "an object", (int, float): "a number"}


def _fields(
    cls: type, data: dict[str, Any], where: str, url: str, strict: bool, types: dict[str, tuple[type, ...]]
) -> dict[str, Any]:
    """Keyword arguments for a small record type: its fields (strings unless `types` says), the
    rest in `extra`."""
    names = [f.name for f in dataclasses.fields(cls) if f.name != "extra"]
    extra = {k: v for k, v in data.items() if k not in names}
    out: dict[str, Any] = {"extra": extra}
    for name in names:
        value = data.get(name)
        ok = types.get(name, (str,))
        if value is None or (isinstance(value, ok) and not isinstance(value, bool)):
            out[name] = value
        elif strict:
            expected = _EXPECTED.get(ok, "a string")
            raise RecordError(
                url, f"is {_kind(value)}, expected {expected}; rerun the step to rewrite its record", f"{where}.{name}"
            )
        else:
            extra[name] = value
            out[name] = None
    first = names[0]
    if out[first] is None:  # the one field every entry has (`attempt`, `status`)
        if strict:
            raise RecordError(url, "is missing; rerun the step to rewrite its record", f"{where}.{first}")
        out[first] = 0 if types.get(first) == (int,) else "?"
    return out


@dataclasses.dataclass
class Timings:
    started: str | None = None
    ended: str | None = None
    duration_s: float | None = None
    """Absent while the step runs."""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"started": self.started, "ended": self.ended}
        if self.duration_s is not None:
            out["duration_s"] = self.duration_s
        return {**out, **self.extra}


# (field, JSON types, what the error says): the step record's top-level fields, in written order.
_DICT, _LIST, _STR = (dict,), (list,), (str,)
_LAYOUT: tuple[tuple[str, tuple[type, ...], str], ...] = (
    ("schema", (int,), "an integer"),
    ("name", _STR, "a string"),
    ("identity", _STR, "a string"),
    ("hash", _STR, "a string"),
    ("output_path", _STR, "a string"),
    ("fn", _STR, "a string"),
    ("description", _STR, "a string"),
    ("version", _DICT, "an object"),
    ("config", (dict, list, str, int, float, bool), "JSON data"),
    ("unversioned", _DICT, "an object"),
    ("config_fingerprint", _STR, "a string"),
    ("dependencies", _LIST, "a list"),
    ("resources", _DICT, "an object"),
    ("reproducibility", _DICT, "an object"),
    ("git", _DICT, "an object"),
    ("code", _DICT, "an object"),
    ("driver", _STR, "a string"),
    ("backend", _STR, "a string"),
    ("step_environment", _DICT, "an object"),
    ("status", _STR, "a string"),
    ("status_history", _LIST, "a list of objects"),
    ("attempts", _LIST, "a list of objects"),
    ("error", _STR, "a string"),
    ("result", (dict, list, str, int, float, bool), "JSON data"),
    ("environment", _DICT, "an object"),
    ("hardware", _DICT, "an object"),
    ("manifest", _DICT, "an object"),
    ("timings", _DICT, "an object"),
    ("usage", _DICT, "an object"),
)
# Written only when set (a RUNNING record has no manifest); `result` and `hardware` of a SUCCESS
# are written even when null (the function returned None; no hardware was seen).
_OPTIONAL = {"step_environment", "error", "result", "environment", "hardware", "manifest", "usage"}
_NULL_ON_SUCCESS = {"result", "hardware"}


@dataclasses.dataclass
class StepRecord:
    """A step's `.executor_info`. Field meanings: docs/executor.md, "The step record"."""

    schema: int | None = SCHEMA
    """None for a record written without one (Marin's, or older than the schema field)."""
    name: str | None = None
    identity: str | None = None
    hash: str | None = None
    output_path: str | None = None
    fn: str | None = None
    description: str | None = None
    version: dict[str, Any] | None = None
    config: Any = None
    unversioned: dict[str, Any] | None = None
    config_fingerprint: str | None = None
    dependencies: list[Any] = dataclasses.field(default_factory=list)
    """{name, identity, output_path} per dependency (Marin's records: output paths)."""
    resources: dict[str, Any] | None = None
    reproducibility: dict[str, Any] | None = None
    git: dict[str, Any] | None = None
    code: dict[str, Any] | None = None
    driver: str | None = None
    backend: str | None = None
    step_environment: dict[str, Any] | None = None
    status: str | None = None
    status_history: list[StatusEvent] = dataclasses.field(default_factory=list)
    attempts: list[Attempt] = dataclasses.field(default_factory=list)
    error: str | None = None
    result: Any = None
    environment: dict[str, Any] | None = None
    hardware: dict[str, Any] | None = None
    manifest: dict[str, Any] | None = None
    timings: Timings = dataclasses.field(default_factory=Timings)
    usage: dict[str, Any] | None = None
    """Accelerator-hours over the attempts that ended (execution/review/cost.py); absent in older records."""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Fields this version does not know, kept as they were and written back."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        success = self.status == "SUCCESS"
        for key, _, _ in _LAYOUT:
            value = getattr(self, key)
            if key == "schema" and value is None:
                continue
            if key in _OPTIONAL and value is None and not (success and key in _NULL_ON_SUCCESS):
                continue
            if key in ("status_history", "attempts"):
                value = [v.to_json() for v in value]
            elif key == "timings":
                value = value.to_json()
            out[key] = value
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Any, url: str = "<record>") -> StepRecord:
        """Parse a record; `url` names it in errors. Raises RecordError when it is damaged."""
        if not isinstance(data, dict):
            raise RecordError(url, f"is {_kind(data)}, not a JSON object; rerun the step to rewrite its record")
        strict = "schema" in data  # ours; records without a schema are read leniently (see module doc)
        known = {k for k, _, _ in _LAYOUT}
        extra = {k: v for k, v in data.items() if k not in known}
        kwargs: dict[str, Any] = {}
        for key, types, what in _LAYOUT:
            if key == "status_history":
                kwargs[key] = _entries(data, key, url, strict, extra, StatusEvent.from_json)
            elif key == "attempts":
                kwargs[key] = _entries(data, key, url, strict, extra, Attempt.from_json)
            elif key == "timings":
                t = _check(data, key, types, what, url, strict, extra) or {}
                started = _check(t, "started", _STR, "a string", url, strict, {}, None)
                ended = _check(t, "ended", _STR, "a string", url, strict, {}, None)
                duration = _check(t, "duration_s", (int, float), "a number", url, strict, {}, None)
                kwargs[key] = Timings(
                    started,
                    ended,
                    duration,
                    {k: v for k, v in t.items() if k not in ("started", "ended", "duration_s")},
                )
            elif key == "dependencies":
                kwargs[key] = _check(data, key, types, what, url, strict, extra, default=[]) or []
            else:
                kwargs[key] = _check(data, key, types, what, url, strict, extra)
        if "schema" not in data:
            kwargs["schema"] = None
        return cls(**kwargs, extra=extra)

    # ---- what readers ask of a record --------------------------------------------------------
    @property
    def recency(self) -> str:
        """When this version started (ISO-8601 text sorts by time): the order of "previous"."""
        if self.timings.started:
            return self.timings.started
        for event in self.status_history:
            if event.time:
                return event.time
        return ""


def read_step_record(path: str, read: Reader = read_file) -> StepRecord | None:
    """The step record of an output path (or of the `.executor_info` URL itself); None when
    there is none. Raises RecordError, naming the file (and field), when it is damaged. `read`
    supplies the bytes (`store.reader`)."""
    url = path if path.rstrip("/").endswith("/" + INFO_FILE) or path == INFO_FILE else join(path, INFO_FILE)
    try:
        raw = read(url)
    except OSError as err:  # a folder, a FIFO, a permission problem
        raise RecordError(url, f"unreadable ({type(err).__name__}: {err})") from None
    return None if raw is None else parse_step_record(raw, url)


def parse_step_record(raw: bytes, url: str) -> StepRecord:
    """A record from its bytes; raises RecordError naming `url` (and the field) when it is damaged."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise RecordError(url, f"not UTF-8 at byte {err.start}") from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise RecordError(url, f"not valid JSON ({getattr(err, 'msg', 'nested too deep')})") from None
    return StepRecord.from_json(data, url)
