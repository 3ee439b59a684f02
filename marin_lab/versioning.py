"""Declaring, on a config class, which fields enter a step's identity.

    @dataclass(frozen=True)
    class TokenizeConfig:
        input_path: str = versioned_field()
        tokenizer: str = versioned_field()
        num_workers: int = 1          # a tuning knob: changing it reruns nothing

The executor's planner treats a value in a `versioned_field` exactly as if it were wrapped in
`versioned(...)`; references to other steps inside it (`output_path_of(...)`) stay dependencies.
So recipe helpers only name a step and wire its inputs, and what makes a step new is said once,
next to the field it is about. This module imports only the standard library, so any config module
may use it.

`@field_hints` (above `@dataclass`) makes a misspelt keyword name the closest field:
`LlamaConfig(hiden_dim=64)` raises `TypeError: LlamaConfig has no field 'hiden_dim'; did you
mean 'hidden_dim'?` instead of Python's "unexpected keyword argument".
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

T = TypeVar("T", bound=type)

VERSIONED_METADATA_KEY = "marin_lab.versioned"
IDENTITY_DEFAULT_KEY = "marin_lab.identity_default"


def versioned_field(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Any = dataclasses.MISSING,
    metadata: dict | None = None,
    **kwargs: Any,
) -> Any:
    """A dataclass field whose value always enters the step's identity hash."""
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        metadata={**(metadata or {}), VERSIONED_METADATA_KEY: True},
        **kwargs,
    )


def versioned_field_names(cls: type) -> frozenset[str]:
    """The names of `cls`'s fields declared with `versioned_field`."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.metadata.get(VERSIONED_METADATA_KEY))


def added_field(default: Any, *, versioned: bool = False, **kwargs: Any) -> Any:
    """A field added to a config class after steps were recorded with it: inside a versioned value
    it enters the identity only when it differs from `default`, so every step recorded before the
    field existed (which behaved as `default`) keeps its identity and output path. `versioned=True`
    does the same for a field of a step's own config (a `versioned_field` away from its default)."""
    metadata = {**kwargs.pop("metadata", {}), IDENTITY_DEFAULT_KEY: default}
    if versioned:
        metadata[VERSIONED_METADATA_KEY] = True
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def identity_defaults(cls: type) -> dict[str, Any]:
    """{field name: default} for `cls`'s fields declared with `added_field`."""
    return {
        f.name: f.metadata[IDENTITY_DEFAULT_KEY] for f in dataclasses.fields(cls) if IDENTITY_DEFAULT_KEY in f.metadata
    }


@overload
def field_hints(cls: T) -> T: ...


@overload
def field_hints(cls: None = None, *, extra: Sequence[str] = ()) -> Callable[[T], T]: ...


def field_hints(cls: T | None = None, *, extra: Sequence[str] = ()) -> Any:
    """Class decorator, placed above `@dataclass`: when constructing the class fails with a
    `TypeError` and a keyword argument is not one it takes, the error names that keyword and the
    closest valid name (difflib), or lists the valid ones. A call that works is not checked.

    The valid names are the `__init__` parameters, the dataclass fields, and `extra` (for an
    `__init__` that takes `**kwargs`): `@field_hints(extra=("learning_rate",))`."""
    if cls is None:
        return functools.partial(field_hints, extra=extra)
    init = cls.__init__  # type: ignore[misc]
    params = inspect.signature(init).parameters
    names = [
        n for i, (n, p) in enumerate(params.items()) if i > 0 and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if dataclasses.is_dataclass(cls):
        names += [f.name for f in dataclasses.fields(cls) if f.init and f.name not in names]
    names += [n for n in extra if n not in names]
    valid = tuple(names)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
        except TypeError:
            unknown = [k for k in kwargs if k not in valid]
            if not unknown:
                raise
            raise TypeError(unknown_field_message(cls.__name__, unknown, valid)) from None

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def unknown_field_message(owner: str, unknown: Sequence[str], valid: Sequence[str]) -> str:
    """One line: each unknown name with the closest valid one, else (once) the valid names."""
    parts = []
    listed = False
    for name in unknown:
        close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.75)
        if close:
            parts.append(f"{owner} has no field {name!r}; did you mean {close[0]!r}?")
        else:
            parts.append(
                f"{owner} has no field {name!r}" + ("" if listed else f" (its fields are: {', '.join(valid)})")
            )
            listed = True
    return " ".join(p if p.endswith("?") else p + "." for p in parts) if len(parts) > 1 else parts[0]
