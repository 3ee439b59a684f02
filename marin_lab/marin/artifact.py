"""Artifacts, their `.artifact.json` record, and the drift check (Marin's `marin.execution.artifact`).

- `Artifact`: a produced output: a directory (`path`) plus value fields a subclass declares, which
  round-trip through the record's `result`. `raw_load(path)` reads one back.
- `ArtifactRecord`: the one descriptor next to an output: name, version, fingerprint, result type,
  the config that ran, dependencies as `name@version`, provenance.
- `read_record` is the single reader of what a step leaves behind: `.artifact.json` (this API's)
  or a bare pre-record payload, parsed by `marin_lab.store.artifact_record`, and, when neither
  exists, `.executor_info` (marin_lab's step record or Marin's Ray-era one), parsed by
  `marin_lab.store.step_record`.
- `check_drift(step)`: before a cached SUCCESS is served, compare fingerprints: a warning naming
  the changed fields (the cache is served), or FingerprintMismatchError under
  `expected_fingerprint`; a mutable (`dev`) version always rebuilds.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import asdict, is_dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from marin_lab.io.fs import atomic_write_text
from marin_lab.marin.fingerprint import describe_drift
from marin_lab.marin.provenance import Provenance
from marin_lab.marin.step_spec import StepSpec, _is_relative_path, marin_prefix, prefix_join
from marin_lab.store.artifact_record import read_artifact_record
from marin_lab.store.layout import ARTIFACT_RECORD_FILE
from marin_lab.store.step_record import StepRecord, read_step_record

__all__ = [
    "EXPECTED_FINGERPRINT_KEY",
    "FINGERPRINT_KEY",
    "RECORD_FILENAME",
    "RESULT_TYPE_KEY",
    "VERSION_KEY",
    "Artifact",
    "ArtifactRecord",
    "ArtifactTypeMismatchError",
    "FingerprintMismatchError",
    "check_drift",
    "is_mutable_version",
    "read_artifact",
    "read_record",
    "result_type_name",
    "validate_version",
    "write_artifact",
    "write_record",
]

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

RECORD_FILENAME = ARTIFACT_RECORD_FILE
STEP_RUNNER_EXECUTOR_VERSION = "step_runner"

FINGERPRINT_KEY = "fingerprint"
VERSION_KEY = "version"
RESULT_TYPE_KEY = "result_type"
EXPECTED_FINGERPRINT_KEY = "expected_fingerprint"

_CALVER_RE = re.compile(r"^\d{4}\.\d{2}\.\d{2}(\.\d+)?$")
# A mutable label: one path segment, so `{name}/{version}` names exactly one name@version. With a '/'
# in the version, `lab@team/exp-dev` and `lab/team@exp-dev` would share the folder `lab/team/exp-dev`.
_DEV_RE = re.compile(r"^(dev|[A-Za-z0-9][A-Za-z0-9._-]*-dev)$")


class FingerprintMismatchError(Exception):
    """An `expected_fingerprint` pin differs from the computed or the recorded fingerprint."""


class ArtifactTypeMismatchError(Exception):
    """A record's `result_type` differs from the type the handle asks for."""


def is_mutable_version(version: str) -> bool:
    """`dev` and `<label>-dev` are mutable: no drift check, rebuilt on every run."""
    return version == "dev" or version.endswith("-dev")


def validate_segment(label: str, value: str) -> None:
    """A name or version is a path segment: non-empty, no scheme, no '..', no edge slash."""
    if not value:
        raise ValueError(f"{label} must be non-empty")
    if "://" in value or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", value):
        raise ValueError(f"{label} {value!r} must not contain a URL scheme")
    if ".." in value:
        raise ValueError(f"{label} {value!r} must not contain '..'")
    if value.startswith("/") or value.endswith("/"):
        raise ValueError(f"{label} {value!r} must not start or end with '/'")


def validate_version(version: str) -> None:
    """A calendar version `YYYY.MM.DD[.N]`, or a mutable `dev` / `<label>-dev` whose label is one
    path segment of letters, digits, '.', '_' and '-'."""
    validate_segment("version", version)
    if _DEV_RE.match(version) or _CALVER_RE.match(version):
        return
    if is_mutable_version(version):
        raise ValueError(
            f"version {version!r}: the label of a '<label>-dev' version must be one path segment of letters, "
            "digits, '.', '_' and '-' (no '/': the version is the last folder of {name}/{version})"
        )
    raise ValueError(
        f"version {version!r} must be a calendar version YYYY.MM.DD (optionally YYYY.MM.DD.N) "
        "or a mutable 'dev'/'<label>-dev'"
    )


def result_type_name(artifact_type: type[Artifact]) -> str:
    """`module.Qualname`, as recorded in `result_type` and compared on load."""
    return f"{artifact_type.__module__}.{artifact_type.__qualname__}"


class Artifact(BaseModel):
    """A produced artifact: `path` plus the value fields a subclass declares."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    path: str = ""

    @functools.cached_property
    def record(self) -> ArtifactRecord | None:
        """The record at `path` (read once), or None."""
        return read_record(self.path)

    def result_payload(self) -> dict | None:
        """The declared value fields (all but `path`), or None for a pure data reference."""
        keys = {name for name in type(self).model_fields if name != "path"}
        if not keys:
            return None
        return self.model_dump(mode="json", include=keys) or None

    @classmethod
    def raw_load(cls, source: str) -> Any:
        """A handle into `source` with its value fields from the record (tolerates no record);
        ArtifactTypeMismatchError when the record was written for another type."""
        rec = read_record(source)
        if rec is not None and rec.result_type and rec.result_type != result_type_name(cls):
            raise ArtifactTypeMismatchError(
                f"{source}: recorded result_type is {rec.result_type}, but loading as "
                f"{result_type_name(cls)}. The value type changed under a reused version — bump the version."
            )
        return cls(path=source, **((rec.result if rec is not None else None) or {}))

    @classmethod
    def load(cls, source: str) -> Any:
        """`raw_load` (Marin's earlier name)."""
        return cls.raw_load(source)


class ArtifactRecord(BaseModel):
    """The descriptor written next to an output; every field has a default."""

    name: str = ""
    version: str = ""
    fingerprint: str = ""
    result_type: str = ""
    output_path: str = ""
    deps: list[str] = Field(default_factory=list)
    config: dict[str, Any] | None = None
    source: str | None = None
    result: dict[str, Any] | None = None
    fingerprint_payload: str | None = None
    provenance: Provenance | None = None


def _resolved(output_path: str) -> str:
    return prefix_join(marin_prefix(), output_path) if _is_relative_path(output_path) else output_path


def _join(output_path: str, filename: str) -> str:
    return f"{output_path.rstrip('/')}/{filename}"


def _from_step_record(info: StepRecord) -> ArtifactRecord | None:
    """marin_lab's step record (it has `schema`) or Marin's Ray-era one, as far as consumers read it;
    None for a step still running (or failed), as for Marin's schedule-time stub (#6836)."""
    if info.extra.get("executor_version") == STEP_RUNNER_EXECUTOR_VERSION:
        return None
    config = info.config
    if info.schema is not None:  # marin_lab's record: written from the start of a run, so honoured only once done
        if info.status != "SUCCESS":
            return None
        if isinstance(config, dict) and {"identity", "deps", "output_path"} <= config.keys():
            config = None  # a StepSpec's executor config (its identity), not the config its function ran
    return ArtifactRecord(
        name=info.name or "",
        config=config if isinstance(config, dict) else None,
        output_path=info.output_path or "",
        deps=[
            d if isinstance(d, str) else str(d.get("identity", d)) if isinstance(d, dict) else str(d)
            for d in info.dependencies
        ],
    )


def read_record(output_path: str) -> ArtifactRecord | None:
    """The record at `output_path`: `.artifact.json`, else a bare `.artifact` payload, else the
    step's `.executor_info`; None when there is none. A damaged record raises RecordError."""
    output_path = _resolved(output_path)
    doc = read_artifact_record(output_path)
    if doc is not None:
        return ArtifactRecord.model_validate(doc.to_json())
    info = read_step_record(output_path)
    return None if info is None else _from_step_record(info)


def write_record(record: ArtifactRecord) -> None:
    """Write `record` to `{record.output_path}/.artifact.json` (atomically)."""
    atomic_write_text(_join(record.output_path, RECORD_FILENAME), record.model_dump_json(indent=2))


def _payload_json(value: object) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value


def read_artifact(output_path: str, schema: type[M]) -> M:
    """The record's `result` validated as the pydantic model `schema`; FileNotFoundError if none."""
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise TypeError(f"schema must be a pydantic BaseModel subclass, got {schema!r}")
    output_path = _resolved(output_path)
    record = read_record(output_path)
    if record is not None and record.result is not None:
        return schema.model_validate(record.result)
    raise FileNotFoundError(f"no artifact payload at {output_path}")


def write_artifact(value: object, output_path: str) -> None:
    """A minimal record with `value` as its `result`."""
    write_record(ArtifactRecord(output_path=output_path, result=_payload_json(value)))


def check_drift(step: StepSpec) -> bool:
    """Before serving a cached SUCCESS: True when the step must rebuild (a mutable version).

    A recorded fingerprint that differs is a warning naming the changed fields (and the cached
    output is served), or FingerprintMismatchError when the step pins `expected_fingerprint`.
    """
    fingerprint = step.hash_attrs.get(FINGERPRINT_KEY)
    if fingerprint is None:
        return False
    version = step.hash_attrs.get(VERSION_KEY, "")
    if is_mutable_version(version):
        return True
    record = read_record(step.output_path)
    if record is None or record.fingerprint == fingerprint:
        return False
    change = describe_drift(record.fingerprint_payload, step.fingerprint_payload)
    if step.hash_attrs.get(EXPECTED_FINGERPRINT_KEY) is not None:
        raise FingerprintMismatchError(
            f"{step.name}@{version} is pinned to expected_fingerprint, but its recorded build has "
            f"fingerprint {record.fingerprint} (now {fingerprint}).{change} "
            "Update the pin and bump the version if this is meant to be a different artifact."
        )
    logger.warning(
        "%s@%s: recipe drift — recorded fingerprint %s, now %s; serving the cached output. "
        "Bump the version to build the new recipe.%s",
        step.name,
        version,
        record.fingerprint,
        fingerprint,
        change,
    )
    return False
