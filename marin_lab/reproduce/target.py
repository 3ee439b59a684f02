"""What `marin-lab reproduce` reproduces: the experiment record a target names, checked whole
before anything is executed.

A record may be damaged, old, copied or written by hand, so everything reproduce will use is read
and type-checked here, and every location is placed with the one containment rule
(`marin_lab.io.paths`), before the recorded script runs:

- the record is JSON, an object, its `steps` a list of `{name, identity}` and its `code` an object
  with a stored script (`code.stored_script`, relative to the record's folder, never leaving it)
  and the script's sha256;
- the original prefix is the record's folder's parent when the record lies in `{prefix}/experiments/`,
  else the record's `prefix` field; it is resolved once, here (symlinks, `file://`), and every
  other location is derived from that resolved form, so what the artifacts embed and what the
  comparison substitutes are the same spelling;
- a scratch prefix that reaches the original (the same folder, inside it, around it, through a
  symlink or a `file://` URL) is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from typing import Any

from marin_lab.execution.errors import MarinLabError, RecordError
from marin_lab.io.fs import exists, join, normalize_prefix, read_bytes
from marin_lab.io.paths import PathOutsideError, canonical, confine, overlaps
from marin_lab.store.experiment_record import ExperimentRecord, read_experiment_record
from marin_lab.store.layout import EXPERIMENTS_DIR, info_url
from marin_lab.store.step_record import read_step_record

__all__ = ["RecordedExperiment", "ReproduceError", "check_scratch", "compile_steps", "locate", "read_script"]

# The temporary copy of the script is named after the recorded one when that name is plain.
_SCRIPT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*\.py")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ReproduceError(MarinLabError):
    """A record that cannot be reproduced at all (damaged, older schema, bad target or flag)."""


@dataclasses.dataclass(frozen=True)
class RecordedExperiment:
    url: str
    """The experiment record, as named."""
    record: ExperimentRecord
    original: str
    """The original prefix, resolved (local: its real path; a URL: its canonical form)."""
    aliases: tuple[str, ...]
    """Other spellings of the same prefix that artifacts may embed (as named, as recorded)."""
    steps: dict[str, str]
    """Step name -> recorded identity."""
    script_name: str
    script_url: str
    script_sha256: str


def _canonical(url: str, what: str) -> str:
    try:
        return canonical(url)
    except PathOutsideError as err:
        raise ReproduceError(f"{what}: {err}") from None


def locate(target: str) -> RecordedExperiment:
    """The experiment record `target` names (the record itself or a step's output path), checked."""
    target = target.rstrip("/") or target
    if target.endswith(".json"):
        record = _read_record(target)
        if record is None:
            raise ReproduceError(
                f"{target}: no such experiment record; give {{prefix}}/experiments/NAME-HASH.json "
                "or a step's output path"
            )
        head, _, name = _folder(target).rpartition("/")
        if name == EXPERIMENTS_DIR:  # named as the executor writes it: the prefix is the folder above
            prefix = named = head or ("/" if target.startswith("/") else ".")
        elif record.prefix:
            prefix = named = record.prefix
        else:
            raise ReproduceError(
                f"{target} lies outside an experiments/ folder and names no prefix (field 'prefix'); "
                "give the record where the executor wrote it, {prefix}/experiments/NAME-HASH.json"
            )
        return _checked(target, record, prefix, named)
    try:
        info = read_step_record(target)
    except RecordError as err:
        raise ReproduceError(f"{err}; give the experiment record instead") from None
    if info is None:
        raise ReproduceError(
            f"{target} has no step record ({info_url(target)}); give an experiment record "
            "or the output path of a step the executor ran"
        )
    identity = info.identity or ""
    if not target.endswith("/" + identity):
        raise ReproduceError(
            f"{target}: its record names identity {identity!r}, which is not the path's end; "
            "give the experiment record instead"
        )
    prefix = target[: -len(identity) - 1]
    experiment = (info.code or {}).get("experiment")
    if not experiment:
        raise ReproduceError(
            f"{info_url(target)} was written by an older record schema: it names no experiment "
            "record (code.experiment); give the experiment record, or rerun the step with this "
            "version of marin_lab"
        )
    if not isinstance(experiment, str):
        raise ReproduceError(
            f"{info_url(target)}: field 'code.experiment' is {type(experiment).__name__}, expected "
            "the experiment record's path; give the experiment record instead"
        )
    url = experiment if "://" in experiment or experiment.startswith("/") else join(prefix, experiment)
    record = _read_record(url)
    if record is None:
        raise ReproduceError(f"the experiment record {url} named by {info_url(target)} is missing")
    return _checked(url, record, prefix, prefix)


def _read_record(url: str) -> ExperimentRecord | None:
    try:
        return read_experiment_record(url)
    except RecordError as err:
        raise ReproduceError(
            f"{err}; it is not an experiment record ({{prefix}}/experiments/NAME-HASH.json) that reproduce can read"
        ) from None


def _folder(url: str) -> str:
    return (url.rsplit("/", 1)[0] or "/") if "/" in url else "."


def _field(url: str, name: str, value: Any, expected: str) -> ReproduceError:
    return ReproduceError(
        f"{url}: field '{name}' is {type(value).__name__}, expected {expected}; the record is "
        "damaged: give another record, or rerun the experiment to write it again"
    )


def _checked(url: str, record: ExperimentRecord, prefix: str, named: str) -> RecordedExperiment:
    steps: dict[str, str] = {}
    for i, entry in enumerate(record.steps):
        if not isinstance(entry, dict):
            raise _field(url, f"steps[{i}]", entry, "an object with 'name' and 'identity'")
        for key in ("name", "identity"):
            if not isinstance(entry.get(key), str):
                raise _field(url, f"steps[{i}].{key}", entry.get(key), "a string")
        steps[entry["name"]] = entry["identity"]
    code = record.code
    if not isinstance(code, dict) or not code.get("stored_script"):
        why = code.get("script_missing") if isinstance(code, dict) else None
        raise ReproduceError(
            f"{url} holds no stored script ("
            + (why if isinstance(why, str) else "written by an older record schema, before scripts were stored")
            + "); it cannot be rebuilt as "
            "it was recorded. Run the experiment again with this version of marin_lab to record its script"
        )
    stored, digest, script = code["stored_script"], code.get("script_sha256"), code.get("script")
    if not isinstance(stored, str):
        raise _field(url, "code.stored_script", stored, "a path like scripts/NAME-HASH.py")
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise _field(url, "code.script_sha256", digest, "the stored script's sha256 (64 hex digits)")
    if script is not None and not isinstance(script, str):
        raise _field(url, "code.script", script, "the script's path")
    folder = _folder(url)
    try:
        script_url = confine(join(folder, stored), folder)
    except PathOutsideError:
        raise ReproduceError(
            f"{url}: field 'code.stored_script' ({stored!r}) leads outside the record's folder "
            f"{folder}; reproduce runs only a script stored beside its record (this record is "
            "damaged or was edited)"
        ) from None
    original = _canonical(normalize_prefix(prefix), url)
    aliases = tuple(
        dict.fromkeys(
            a
            for a in (normalize_prefix(named), record.prefix)
            if isinstance(a, str) and a and a != original and _same(a, original)
        )
    )
    name = os.path.basename(script or "")
    return RecordedExperiment(
        url,
        record,
        original,
        aliases,
        steps,
        name if _SCRIPT_NAME.fullmatch(name) else "experiment.py",
        script_url,
        digest,
    )


def _same(a: str, b: str) -> bool:
    try:
        return canonical(a) == b
    except PathOutsideError:
        return False


def read_script(rec: RecordedExperiment) -> str:
    """The stored script's text, checked against the record's sha256."""
    try:
        if not exists(rec.script_url):
            raise ReproduceError(f"{rec.url}: its script {rec.script_url} is missing")
        data = read_bytes(rec.script_url)
    except OSError as err:
        raise ReproduceError(
            f"{rec.url}: its script {rec.script_url} cannot be read ({type(err).__name__}: {err})"
        ) from None
    if hashlib.sha256(data).hexdigest() != rec.script_sha256:
        raise ReproduceError(f"{rec.script_url} does not match the sha256 in {rec.url}; the stored script was changed")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ReproduceError(f"{rec.script_url} is not UTF-8 text ({err}); the record is damaged") from None


def compile_steps(steps: str | None, rec: RecordedExperiment) -> re.Pattern[str] | None:
    """`--steps` compiled, and matching at least one recorded step."""
    if steps is None:
        return None
    try:
        pattern = re.compile(steps)
    except re.error as err:
        raise ReproduceError(
            f"--steps {steps!r} is not a regular expression ({err}); e.g. --steps '^tokenized/'"
        ) from None
    if not any(pattern.search(name) for name in rec.steps):
        raise ReproduceError(
            f"--steps {steps!r} matches no step of {rec.url} (its steps: "
            f"{', '.join(sorted(rec.steps)[:8])}{', ...' if len(rec.steps) > 8 else ''})"
        )
    return pattern


def check_scratch(into: str, rec: RecordedExperiment) -> str:
    """`into`, resolved, after checking that it and the original prefix do not reach each other."""
    scratch = _canonical(normalize_prefix(into), f"--into {into}")
    if overlaps(scratch, rec.original):
        raise ReproduceError(
            f"--into {into} reaches the original prefix {rec.original} (the same folder, inside it or "
            "around it, after resolving symlinks and file:// URLs); reproduce never writes there: "
            "give a scratch prefix elsewhere"
        )
    return scratch
