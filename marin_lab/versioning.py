"""Declaring, on a config class, which fields enter a step's identity.

    @dataclass(frozen=True)
    class TokenizeConfig:
        input_path: str = versioned_field()
        tokenizer: str = versioned_field()
        num_workers: int = 1          # a tuning knob: changing it reruns nothing

The executor's planner treats a value in a `versioned_field` exactly as if it were wrapped in
`versioned(...)`; references to other steps inside it (`output_path_of(...)`) stay dependencies.
So recipe helpers only name a step and wire its inputs, and what makes a step new is said once,
next to the field it is about. This module imports nothing, so any config module may use it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

VERSIONED_METADATA_KEY = "marin_lab.versioned"
IDENTITY_DEFAULT_KEY = "marin_lab.identity_default"


def versioned_field(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING,
                    metadata: dict | None = None, **kwargs: Any) -> Any:
    """A dataclass field whose value always enters the step's identity hash."""
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={**(metadata or {}), VERSIONED_METADATA_KEY: True}, **kwargs)


def versioned_field_names(cls: type) -> frozenset[str]:
    """The names of `cls`'s fields declared with `versioned_field`."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.metadata.get(VERSIONED_METADATA_KEY))


def added_field(default: Any, **kwargs: Any) -> Any:
    """A field added to a config class after steps were recorded with it: inside a versioned value
    it enters the identity only when it differs from `default`, so every step recorded before the
    field existed (which behaved as `default`) keeps its identity and output path."""
    metadata = {**kwargs.pop("metadata", {}), IDENTITY_DEFAULT_KEY: default}
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def identity_defaults(cls: type) -> dict[str, Any]:
    """{field name: default} for `cls`'s fields declared with `added_field`."""
    return {f.name: f.metadata[IDENTITY_DEFAULT_KEY] for f in dataclasses.fields(cls)
            if IDENTITY_DEFAULT_KEY in f.metadata}
