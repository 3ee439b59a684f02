"""Identity hashing: what makes a step "new".

A step's version is a small JSON object:

    {"name": "tokenize/docs",
     "config": {"tokenizer": "gpt2", "special_tokens[0]": "<eos>"},   # versioned values by path
     "inputs": {"input_path": "DEP[0]/data"},                         # dependency references
     "dependencies": ["raw/docs-1a2b3c4d"]}                           # identities, in order

Keys are structural paths (`model.hidden_dim`, `inputs[0]`, `weights["web.en"]`): a field is
`.name`, a list position `[i]`, a dict key always quoted `["key"]`, so two different configs
never produce the same key. The version is encoded canonically (sorted keys, no whitespace),
hashed with sha256, and the first 8 hex characters make the identity `name-hash8` and the output
path `{prefix}/name-hash8`.

Why this shape:
- Only `versioned(...)` values and fields declared with `versioned_field` count. Worker counts
  and other knobs do not change the data, so changing them must not redo finished work (the
  stale-reuse guard reports them instead).
- A dependency enters by its identity, not by its version or its physical path: hashing costs
  O(steps + edges) whatever the depth, and the same experiment under two prefixes (or buckets, or
  regions) gets the same identities.
- Code is not hashed: a bug fix that does not change outputs must not invalidate a week of
  training. A change that should produce new outputs is made visible by a versioned field.
- No machine-local fact enters: a versioned local path enters as the content digest of the files
  it names (or a declared `package@version`; execution/plan/sources.py), the prefix never appears.
- The encoder is strict: a value whose encoding would depend on memory addresses or on Python's
  repr (a lambda, an arbitrary object) is an error naming the step and field, never a silent
  hash that changes from run to run.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import json.encoder
import math
import pathlib
import re
from typing import Any

from marin_lab.execution.errors import EncodingError
from marin_lab.execution.plan.sources import PortableSource, portable_value
from marin_lab.execution.plan.step import ExecutorStep, InputName, OutputName, VersionedValue
from marin_lab.versioning import identity_defaults, versioned_field_names

_FIELDS_CACHE: dict[type, tuple[str, ...] | None] = {}
_VERSIONED_CACHE: dict[type, frozenset[str]] = {}
_ADDED_CACHE: dict[type, dict[str, Any]] = {}
_WALK_CACHE: dict[type, tuple[tuple[str, bool], ...] | None] = {}
_PLACEHOLDERS = frozenset((VersionedValue, PortableSource, InputName, ExecutorStep, OutputName))
"""The dataclasses `_walk` takes as what they stand for, not field by field."""
_SCALARS = (str, int, bool, type(None))
_NUMBERS = (int, bool, float, type(None))
_URL = re.compile(r"[a-z][a-z0-9+.-]*://")


def _field_names(cls: type) -> tuple[str, ...] | None:
    """The field names of a dataclass type (cached), or None for any other type."""
    try:
        return _FIELDS_CACHE[cls]
    except KeyError:
        names = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None
        _FIELDS_CACHE[cls] = names
        _ADDED_CACHE[cls] = identity_defaults(cls) if names is not None else {}
        return names


def _identity_fields(value: Any, names: tuple[str, ...]) -> list[str]:
    """The fields of a dataclass value that enter its encoding: all but `added_field`s at their default."""
    added = _ADDED_CACHE[type(value)]
    if not added:
        return list(names)
    return [n for n in names if n not in added or getattr(value, n) != added[n]]


def canonical_value(value: Any, *, where: str) -> Any:
    """`value` as plain JSON data, or EncodingError naming `where` (e.g. "step 'x': field 'y'")."""
    if type(value) in _SCALARS:
        return value
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EncodingError(f"{where} is {value!r}; versioned floats must be finite")
        return value
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [canonical_value(v, where=f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise EncodingError(
                    f"{where} has a dict key {k!r} of type {type(k).__name__}; versioned dicts must have string keys"
                )
            out[k] = canonical_value(v, where=f"{where}[{k!r}]")
        return out
    if (names := _field_names(type(value))) is not None:
        return {n: canonical_value(getattr(value, n), where=f"{where}.{n}") for n in _identity_fields(value, names)}
    if isinstance(value, (InputName, OutputName, ExecutorStep, VersionedValue)):
        raise EncodingError(
            f"{where} holds a {type(value).__name__} inside a versioned value; put placeholders "
            "directly in the config, not inside versioned(...)"
        )
    kind = "a function" if callable(value) else f"a {type(value).__name__}"
    raise EncodingError(
        f"{where} is {kind}; versioned values must be JSON-like (None, bool, int, float, str, "
        "list, tuple, dict with str keys, dataclass, enum, path)"
    )


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# `json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)`, with
# its C encoder made once instead of per call (dumps builds an encoder object and a C encoder each
# time: half the cost of hashing a step's version). Same bytes: the same C encoder, same settings. No
# circular-reference markers: a version is plain data built by `canonical_value`, never circular.
_MAKE_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # None without the C accelerator
_C_ENCODER = (
    _MAKE_C_ENCODER(None, _not_json, json.encoder.encode_basestring, None, ":", ",", True, False, False)
    if _MAKE_C_ENCODER is not None
    else None
)


def canonical_json(obj: Any) -> str:
    if _C_ENCODER is not None and isinstance(obj, dict):
        return "".join(_C_ENCODER(obj, 0))
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def hash8(obj: Any) -> str:
    """The first 8 hex characters of the sha256 of `obj`'s canonical JSON (its first 4 bytes, in hex)."""
    if _C_ENCODER is not None and type(obj) is dict:  # canonical_json(obj), without a call: once per step
        return _sha256("".join(_C_ENCODER(obj, 0)).encode()).hexdigest()[:8]
    return _sha256(canonical_json(obj).encode("utf-8")).hexdigest()[:8]


_sha256 = hashlib.sha256
_new_object = object.__new__
_quote = json.encoder.encode_basestring  # a JSON string with ensure_ascii=False: what the encoder writes


def version_hash8(name: str, versioned: dict[str, Any], inputs: dict[str, str], dependencies: list[str]) -> str:
    """`hash8(version_of(name, versioned, inputs, dependencies))`, with the canonical JSON written
    around the config's instead of encoded from a new dict: a plan hashes one version per step, and
    the encoder's walk of the outer dict (and its key sorts) cost more than the text written here.

    For what a plan's common step holds: each dependency is a step identity (a valid name and a
    hash: letters, digits, `_.-/`, nothing JSON escapes) and every input entry is a string. The
    bytes are those `canonical_json` gives (tests/unit/execution/test_identity.py compares them)."""
    if _C_ENCODER is None:
        return hash8(version_of(name, versioned, inputs, dependencies))
    head = '{"config":' + "".join(_C_ENCODER(versioned, 0))
    if dependencies:
        head += ',"dependencies":["' + '","'.join(dependencies) + '"],"inputs":{'
    else:
        head += ',"dependencies":[],"inputs":{'
    if len(inputs) == 1:
        ((field, entry),) = inputs.items()
        body = _quote(field) + ":" + _quote(entry)
    else:  # the keys sorted, as `sort_keys` sorts them
        body = ",".join([_quote(k) + ":" + _quote(inputs[k]) for k in sorted(inputs)])
    return _sha256((head + body + '},"name":' + _quote(name) + "}").encode()).hexdigest()[:8]


def lenient_value(value: Any) -> Any:
    """JSON data for the record: like `canonical_value` but never fails (unknown types -> repr)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [lenient_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): lenient_value(v) for k, v in value.items()}
    if isinstance(value, VersionedValue):
        return lenient_value(value.value)
    if (names := _field_names(type(value))) is not None:
        return {n: lenient_value(getattr(value, n)) for n in names}
    if callable(value):
        return f"<function {getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}>"
    return repr(value)


@dataclasses.dataclass(init=False, slots=True)
class ConfigScan:
    """What a walk over one step's config found, keyed by structural field path (`child_path`)."""

    versioned: dict[str, Any]
    inputs: list[tuple[str, InputName]]
    outputs: list[tuple[str, OutputName]]
    unversioned: dict[str, Any]
    urls: list[str]
    """Every URL-looking string (`scheme://...`) the config names, versioned or not, and the fixed URL
    inputs (`InputName.hardcoded("gs://...")`), in walk order: what the egress guard (regions.py)
    checks, found by this walk so that no second walk is needed."""

    def __init__(
        self,
        versioned: dict[str, Any] | None = None,
        inputs: list[tuple[str, InputName]] | None = None,
        outputs: list[tuple[str, OutputName]] | None = None,
        unversioned: dict[str, Any] | None = None,
        urls: list[str] | None = None,
    ) -> None:
        # Written out (not default factories); `scan_config` makes its own without this call (it sets
        # the same five fields: keep the two in step).
        self.versioned = {} if versioned is None else versioned
        self.inputs = [] if inputs is None else inputs
        self.outputs = [] if outputs is None else outputs
        self.unversioned = {} if unversioned is None else unversioned
        self.urls = [] if urls is None else urls


def child_path(parent: str, key: Any, *, field: bool = False) -> str:
    """The structural path of a field (`.name`) or a dict key (`["k"]`); list positions are `[3]`.

    A dict key is always quoted and a position never is, so the path of `{"a.b": x}` (`["a.b"]`)
    differs from that of `{"a": {"b": x}}` (`["a"]["b"]`), and dict key "0" from position 0. A
    non-string dict key carries its type (`[1:int]`).
    """
    if field:
        return f"{parent}.{key}" if parent else str(key)
    if isinstance(key, str):
        return f"{parent}[{json.dumps(key, ensure_ascii=False)}]"
    return f"{parent}[{key!r}:{type(key).__name__}]"


def scan_config(config: Any, *, step_label: str) -> ConfigScan:
    """Walk a config once, collecting versioned values, inputs, outputs and unversioned leaves."""
    scan = _new_object(ConfigScan)  # ConfigScan(), without its keyword handling: one is made per step
    scan.versioned = {}
    scan.inputs = []
    scan.outputs = []
    scan.unversioned = {}
    scan.urls = []
    fields = _WALK_CACHE.get(type(config))  # never holds a placeholder type (`_walk` takes those first)
    if fields is not None:
        _walk_dataclass(config, fields, "", scan, step_label, False)  # what `_walk` does with it, sooner
    else:
        _walk(config, "", scan, step_label)
    return scan


def _versioned_names(cls: type) -> frozenset[str]:
    """The fields a config class declares with `versioned_field` (cached)."""
    try:
        return _VERSIONED_CACHE[cls]
    except KeyError:
        _VERSIONED_CACHE[cls] = names = versioned_field_names(cls)
        return names


def _walk(obj: Any, path: str, scan: ConfigScan, step_label: str, versioned: bool = False) -> None:
    """`versioned`: `obj` sits in a `versioned_field` (or inside one): its values count like
    `versioned(...)` ones, and step references in it stay dependencies."""
    cls = type(obj)
    if cls in _SCALARS or cls is float:
        if cls is str and "://" in obj and _URL.match(obj):
            scan.urls.append(obj)
        if versioned:
            _add_versioned(
                scan, path, obj if cls is not float else canonical_value(obj, where=f"{step_label}: field '{path}'")
            )
        else:
            scan.unversioned[path] = obj
        return
    if cls is VersionedValue:
        value = obj.value
        if type(value) in _SCALARS:  # the common case: no encoding to do (and no label to format)
            if type(value) is str and "://" in value and _URL.match(value):
                scan.urls.append(value)
            _add_versioned(scan, path, value)
        else:
            _collect_urls(value, scan.urls)
            _add_versioned(scan, path, canonical_value(value, where=f"{step_label}: field '{path}'"))
    elif cls is PortableSource:
        # Identified by what it is (a package, a digest); the location itself is an unversioned fact.
        _collect_urls(obj.value, scan.urls)
        scan.versioned[path] = obj.identity
        scan.unversioned[path] = obj.value
    elif cls is InputName:
        if obj.step is None and obj.step_name is None and obj.name and _URL.match(obj.name):
            scan.urls.append(obj.name)  # a fixed URL input
        scan.inputs.append((path, obj))
    elif cls is ExecutorStep:
        scan.inputs.append((path, InputName(step=obj)))
    elif cls is OutputName:
        scan.outputs.append((path, obj))
    elif versioned and _whole_value_versioned(obj, path, scan, step_label):
        _collect_urls(obj, scan.urls)
        return
    elif (fields := _walk_fields(cls)) is not None:
        _walk_dataclass(obj, fields, path, scan, step_label, versioned)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _walk(v, f"{path}[{i}]", scan, step_label, versioned)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _walk(v, child_path(path, k), scan, step_label, versioned)
    elif versioned:
        _collect_urls(obj, scan.urls)
        _add_versioned(scan, path, canonical_value(obj, where=f"{step_label}: field '{path}'"))
    else:
        _collect_urls(obj, scan.urls)
        scan.unversioned[path] = obj


def _walk_dataclass(
    obj: Any, fields: tuple[tuple[str, bool], ...], path: str, scan: ConfigScan, step_label: str, versioned: bool
) -> None:
    """`_walk` of a dataclass value (not a placeholder), field by field."""
    head = f"{path}." if path else ""
    added = _ADDED_CACHE[type(obj)]  # filled with `fields` by `_field_names`
    for n, marked in fields:  # this loop runs for every field of every step
        child = getattr(obj, n)
        if added and marked and n in added and child == added[n]:
            continue  # a versioned `added_field` at its default: the identity before it existed
        at = head + n  # child_path(path, n, field=True)
        kind = type(child)
        # The placeholders a config holds directly, handled here as `_walk` would (same order, same
        # entries) without a call per field; whether the field is versioned does not matter to them.
        if kind is VersionedValue and type(value := child.value) in _SCALARS:
            if type(value) is str:
                if "://" in value and _URL.match(value):
                    scan.urls.append(value)
                _add_versioned(scan, at, value)
            else:
                scan.versioned[at] = value  # None, bool or int: never a path
        elif kind is OutputName:
            scan.outputs.append((at, child))
        elif kind is list and not (versioned or marked):  # a versioned list may be recorded whole
            _walk_list(child, at, scan, step_label)
        else:
            _walk(child, at, scan, step_label, versioned or marked)


def _walk_fields(cls: type) -> tuple[tuple[str, bool], ...] | None:
    """(field name, declared with `versioned_field`) for each field of a dataclass type, cached; None
    for any other type."""
    try:
        return _WALK_CACHE[cls]
    except KeyError:
        names = _field_names(cls)
        fields = None if names is None else tuple((n, n in _versioned_names(cls)) for n in names)
        _WALK_CACHE[cls] = fields
        return fields


def _walk_list(obj: list, path: str, scan: ConfigScan, step_label: str) -> None:
    """`_walk` of an unversioned list, with the step references it most often holds handled without a call each."""
    inputs = scan.inputs
    for i, v in enumerate(obj):
        if type(v) is InputName:
            if v.step is None and v.step_name is None and v.name and _URL.match(v.name):
                scan.urls.append(v.name)  # a fixed URL input
            inputs.append((f"{path}[{i}]", v))
        else:
            _walk(v, f"{path}[{i}]", scan, step_label)


def _collect_urls(value: Any, out: list[str]) -> None:
    """The URL-looking strings inside a value the walk does not enter (a versioned value, a leaf)."""
    if isinstance(value, str):
        if "://" in value and _URL.match(value):
            out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect_urls(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _collect_urls(v, out)
    elif (names := _field_names(type(value))) is not None:
        for n in names:
            _collect_urls(getattr(value, n), out)


def _add_versioned(scan: ConfigScan, path: str, value: Any) -> None:
    """Record a versioned value; local paths in it enter as what they hold (`portable_value`), and
    the value as written (the location) is kept as an unversioned fact."""
    if type(value) in _NUMBERS:  # never a path
        scan.versioned[path] = value
        return
    portable = portable_value(value)
    scan.versioned[path] = portable
    if portable is not value:
        scan.unversioned[path] = value


def _whole_value_versioned(obj: Any, path: str, scan: ConfigScan, step_label: str) -> bool:
    """Record a versioned container as one entry, as `versioned(obj)` would; False when it holds
    step references (or anything the encoder refuses), so that the walk goes inside it."""
    try:
        value = canonical_value(obj, where=f"{step_label}: field '{path}'")
    except EncodingError:
        return False
    _add_versioned(scan, path, value)
    return True


def version_of(name: str, versioned: dict[str, Any], inputs: dict[str, str], dependencies: list[str]) -> dict[str, Any]:
    """The version a step's identity is the hash of (docs/executor.md, "What makes a step new").

    Versioned values and inputs live in separate sections, so a versioned string that reads like
    a reference (`"DEP[0]"`) can never stand in for a real dependency.
    """
    return {"name": name, "config": versioned, "inputs": inputs, "dependencies": dependencies}


def unversioned_fingerprint(unversioned: dict[str, Any]) -> str:
    """A hash of the unversioned fields, to notice a reuse whose knobs differ from the record."""
    return hashlib.sha256(canonical_json(lenient_value(unversioned)).encode("utf-8")).hexdigest()
