"""Canonical JSON and the recipe fingerprint of an ArtifactStep (Marin's `marin.execution.fingerprint`).

The fingerprint is the first 8 hex digits of the md5 of the config's canonical JSON. The encoder
accepts what serializes the same way in every process (dataclasses, enums, paths, timedeltas,
dtypes, sets by sorted members, arrays by content) and refuses the rest (callables, objects whose
repr is a memory address), so a value can never fork the fingerprint from one run to the next.
`describe_drift` turns two fingerprint payloads into the field-by-field change a warning names.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
from datetime import timedelta
from enum import Enum
from pathlib import PurePath
from typing import Any

import numpy as np

__all__ = ["canonical_json", "describe_drift", "fingerprint_hash"]


def _refuse(o: object, why: str) -> TypeError:
    t = type(o)
    return TypeError(
        f"cannot fingerprint a config value of type {t.__module__}.{t.__qualname__}: {why}. "
        "A fingerprint must be identical across processes; make the value a dataclass, an Enum, or "
        "another canonical type, or add a handler in marin_lab.marin.fingerprint."
    )


def _encode(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if isinstance(o, Enum):
        return o.value
    if isinstance(o, timedelta):
        return {"days": o.days, "seconds": o.seconds, "microseconds": o.microseconds}
    if isinstance(o, PurePath):
        return str(o)
    if isinstance(o, (set, frozenset)):
        return {"__set__": sorted(o, key=lambda m: json.dumps(m, sort_keys=True, default=_encode))}
    if isinstance(o, np.dtype):
        return {"__dtype__": o.name}
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, type):
        try:
            return {"__dtype__": np.dtype(o).name}
        except TypeError:
            return {"__type__": f"{o.__module__}.{o.__qualname__}"}
    if inspect.isroutine(o) or isinstance(o, functools.partial):
        raise _refuse(o, "a callable has no stable identity")
    if isinstance(o, np.ndarray) or (hasattr(o, "__array__") and hasattr(o, "dtype") and hasattr(o, "shape")):
        arr = np.asarray(o)  # numpy and JAX arrays alike, by content
        return {"__array__": arr.tolist(), "dtype": arr.dtype.name, "shape": list(arr.shape)}
    if type(o).__repr__ is object.__repr__:
        raise _refuse(o, "it uses the default object repr (a memory address)")
    raise _refuse(o, "no deterministic serialization is known")


def canonical_json(config: object) -> str:
    """The deterministic JSON of `config`: the bytes a fingerprint hashes."""
    return json.dumps(config, sort_keys=True, default=_encode)


def fingerprint_hash(payload: str) -> str:
    """The short recipe fingerprint: 8 hex digits of the md5 of a canonical payload."""
    return hashlib.md5(payload.encode()).hexdigest()[:8]


_ABSENT = object()


def flatten_json(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """`value`'s leaves into `out` as `{dotted.path: leaf}` (an empty dict is a leaf)."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            flatten_json(item, f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix or "<config>"] = value


def drift_fields(old_payload: str | None, new_payload: str | None) -> list[tuple[str, Any, Any]]:
    """(field, recorded, now) for each leaf that differs (None for a side that lacks the field)."""
    if not old_payload or not new_payload:
        return []
    try:
        old, new = json.loads(old_payload), json.loads(new_payload)
    except ValueError:
        return []
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    flatten_json(old, "", a)
    flatten_json(new, "", b)
    changes = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if va != vb:
            changes.append((key, None if va is _ABSENT else va, None if vb is _ABSENT else vb))
    return changes


def describe_drift(old_payload: str | None, new_payload: str | None, limit: int = 10) -> str:
    """' Changed: lr: 0.003 -> 0.001; steps: ...' for a warning, or '' when it cannot tell."""
    changes = drift_fields(old_payload, new_payload)
    if not changes:
        return ""
    shown = "; ".join(f"{k}: {va!r} -> {vb!r}" for k, va, vb in changes[:limit])
    more = f"; and {len(changes) - limit} more" if len(changes) > limit else ""
    return f" Changed: {shown}{more}."
