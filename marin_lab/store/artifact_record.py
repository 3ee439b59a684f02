"""A name@version artifact's record (`.artifact.json`) with one parser.

`marin_lab.marin.artifact` writes it (its `ArtifactRecord`, pydantic) next to an artifact's output;
that module and the browser's step page read it with `parse_artifact_record`:

    {"name": "datasets/toy", "version": "2026.06.28", "fingerprint": "...", "result_type": "module.Type",
     "output_path": "...", "deps": ["raw/x@2026.06.01"], "config": {...}, "source": null,
     "result": {...}, "fingerprint_payload": "...", "provenance": {...}}

An artifact written before records existed left its value alone, as a bare payload (in
`.artifact.json`, or in `BARE_PAYLOAD_FILE`): a JSON object none of whose identity fields (name,
fingerprint, result_type, result) is set and that has keys a record does not; it is read as a record
whose `result` is that payload. Damage (not UTF-8, not JSON, not an object, a field of the wrong type)
is one `RecordError` naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from marin_lab.io.fs import join
from marin_lab.store.errors import RecordError
from marin_lab.store.layout import ARTIFACT_RECORD_FILE
from marin_lab.store.reader import Reader, read_file

BARE_PAYLOAD_FILE = ".artifact"
"""Where the oldest artifacts kept their bare payload."""

_TYPES: dict[str, tuple[type, str]] = {
    "name": (str, "a string"),
    "version": (str, "a string"),
    "fingerprint": (str, "a string"),
    "result_type": (str, "a string"),
    "output_path": (str, "a string"),
    "deps": (list, "a list of strings"),
    "config": (dict, "an object"),
    "source": (str, "a string"),
    "result": (dict, "an object"),
    "fingerprint_payload": (str, "a string"),
    "provenance": (dict, "an object"),
}
_IDENTITY = ("name", "fingerprint", "result_type", "result")


@dataclasses.dataclass(frozen=True)
class ArtifactDoc:
    """The fields of an `.artifact.json` as written (None: absent or null)."""

    name: str | None = None
    version: str | None = None
    fingerprint: str | None = None
    result_type: str | None = None
    output_path: str | None = None
    deps: list[str] | None = None
    config: dict[str, Any] | None = None
    source: str | None = None
    result: dict[str, Any] | None = None
    fingerprint_payload: str | None = None
    provenance: dict[str, Any] | None = None
    bare: bool = False
    """A payload written before records existed (then only `result` is set)."""

    def to_json(self) -> dict[str, Any]:
        """The fields that are set, in the record's order."""
        return {k: getattr(self, k) for k in _TYPES if getattr(self, k) is not None}


def _decode(raw: bytes, url: str) -> dict[str, Any]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise RecordError(url, f"not UTF-8 at byte {err.start}") from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise RecordError(url, f"not valid JSON ({getattr(err, 'msg', 'nested too deep')})") from None
    if not isinstance(data, dict):
        raise RecordError(url, f"is {type(data).__name__}, not a JSON object")
    return data


def parse_artifact_record(raw: bytes, url: str) -> ArtifactDoc:
    """An `.artifact.json` from its bytes; raises RecordError naming `url` (and the field) when damaged."""
    data = _decode(raw, url)
    if not any(data.get(k) for k in _IDENTITY) and data.keys() - _TYPES.keys():
        return ArtifactDoc(result=data, bare=True)
    fields: dict[str, Any] = {}
    for key, (kind, what) in _TYPES.items():
        value = data.get(key)
        bad = key == "deps" and isinstance(value, list) and not all(isinstance(d, str) for d in value)
        if value is not None and (not isinstance(value, kind) or bad):
            raise RecordError(url, f"is {type(value).__name__}, expected {what}", key)
        fields[key] = value
    return ArtifactDoc(**fields)


def read_artifact_record(output_path: str, read: Reader = read_file) -> ArtifactDoc | None:
    """The record next to `output_path`: its `.artifact.json`, else a bare `BARE_PAYLOAD_FILE`; None
    when there is neither. Raises RecordError when the file is damaged."""
    url = join(output_path, ARTIFACT_RECORD_FILE)
    raw = read(url)
    if raw is not None:
        return parse_artifact_record(raw, url)
    url = join(output_path, BARE_PAYLOAD_FILE)
    raw = read(url)
    return None if raw is None else ArtifactDoc(result=_decode(raw, url), bare=True)
