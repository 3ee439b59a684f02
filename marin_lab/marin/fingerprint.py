"""Canonical JSON and the recipe fingerprint of an ArtifactStep (Marin's `marin.execution.fingerprint`).

The fingerprint is the first 8 hex digits of the md5 of the config's canonical JSON. The encoder
writes what serializes the same way in every process (dataclasses, enums, paths, timedeltas,
dtypes, sets by sorted members, arrays by content), then a type's form given with
`register_fingerprint(tp, encode)` (subclasses included). Anything else, as in Marin, is advisory
by default: a stable stand-in (the type's name and its `vars()`, else its repr) and one warning per
type. Strict mode (`set_strict(True)`, or `MARIN_FINGERPRINT_STRICT=1|true|yes` while `set_strict`
was not called) refuses such a value instead: a callable, an object with the default repr (a memory
address), or any other unknown type. `describe_drift` turns two fingerprint payloads into the
field-by-field change a warning names.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import logging
import os
from collections.abc import Callable
from datetime import timedelta
from enum import Enum
from pathlib import PurePath
from typing import Any

import numpy as np

__all__ = ["canonical_json", "describe_drift", "fingerprint_hash", "register_fingerprint", "set_strict"]

logger = logging.getLogger(__name__)

STRICT_ENV = "MARIN_FINGERPRINT_STRICT"

_REGISTRY: dict[type, Callable[[Any], object]] = {}
_WARNED: set[str] = set()  # types already warned about (the stand-in warns once per type)
_STRICT_OVERRIDE: bool | None = None  # set by set_strict; None defers to $MARIN_FINGERPRINT_STRICT


def register_fingerprint(tp: type, encode: Callable[[Any], object]) -> None:
    """Fingerprint values of `tp` (and its subclasses) as `encode(value)`, itself encoded canonically.
    The canonical forms above (dataclasses, enums, ...) come first."""
    _REGISTRY[tp] = encode


def set_strict(enabled: bool) -> None:
    """Refuse (True) or stand in for (False) a value with no canonical form; overrides $MARIN_FINGERPRINT_STRICT."""
    global _STRICT_OVERRIDE
    _STRICT_OVERRIDE = enabled


def _is_strict() -> bool:
    if _STRICT_OVERRIDE is not None:
        return _STRICT_OVERRIDE
    return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes")


def _registered(tp: type) -> Callable[[Any], object] | None:
    return next((_REGISTRY[k] for k in tp.__mro__ if k in _REGISTRY), None)


def _refuse(o: object, why: str) -> TypeError:
    t = type(o)
    return TypeError(
        f"cannot fingerprint a config value of type {t.__module__}.{t.__qualname__}: {why}. "
        "Strict fingerprinting wants every value to serialize the same in every process: make it a "
        "dataclass, an Enum or another canonical type, give its type a form with "
        f"marin_lab.marin.fingerprint.register_fingerprint, or turn strict mode off ({STRICT_ENV}=0)."
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
    if isinstance(o, np.ndarray) or (hasattr(o, "__array__") and hasattr(o, "dtype") and hasattr(o, "shape")):
        arr = np.asarray(o)  # numpy and JAX arrays alike, by content
        return {"__array__": arr.tolist(), "dtype": arr.dtype.name, "shape": list(arr.shape)}
    encode = _registered(type(o))
    if encode is not None:
        return encode(o)
    if _is_strict():
        if inspect.isroutine(o) or isinstance(o, functools.partial):
            raise _refuse(o, "a callable has no stable identity")
        if type(o).__repr__ is object.__repr__:
            raise _refuse(o, "it uses the default object repr (a memory address)")
        raise _refuse(o, "no deterministic serialization is known")
    return _stand_in(o)


def _stand_in(o: object) -> dict[str, Any]:
    """The advisory form of a value with no canonical one: its type's name and its `vars()` (never
    a default repr, which holds a memory address), else its repr."""
    t = type(o)
    name = f"{t.__module__}.{t.__qualname__}"
    if name not in _WARNED:
        _WARNED.add(name)
        logger.warning(
            "fingerprint: %s has no canonical form; fingerprinting it by its type and attributes "
            "(give it an exact one with marin_lab.marin.fingerprint.register_fingerprint, or refuse such "
            "values with %s=1)",
            name,
            STRICT_ENV,
        )
    if hasattr(o, "__dict__"):
        return {"__repr__": name, "vars": vars(o)}
    return {"__repr__": name, "str": repr(o)}


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
