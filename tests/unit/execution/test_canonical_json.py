"""The identity encoder made once (hashing.canonical_json) writes exactly what json.dumps writes with
the same settings, and refuses what it refuses: identities must not move with the encoder."""

from __future__ import annotations

import json

import pytest

from marin_lab.execution.plan.hashing import canonical_json


def _dumps(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@pytest.mark.parametrize(
    "obj",
    [
        {
            "name": "tokenize/docs",
            "config": {"b": 1, "a": [1.5, -0.0, 1e300, None, True]},
            "inputs": {"x": "DEP[0]"},
            "dependencies": ["raw/docs-1a2b3c4d"],
        },
        {"é": '\u2028"\\\n\t', "z": {"nested": {"deeper": [{"k": 2**70}]}}, "0": 0},
        {},
    ],
)
def test_the_same_text_as_json_dumps(obj):
    assert canonical_json(obj) == _dumps(obj)


@pytest.mark.parametrize("obj", [{"x": float("nan")}, {"x": float("inf")}, {"x": object()}, {"a": 1, 2: 3}])
def test_the_same_refusals_as_json_dumps(obj):
    with pytest.raises((ValueError, TypeError)) as ours:
        canonical_json(obj)
    with pytest.raises((ValueError, TypeError)) as theirs:
        _dumps(obj)
    assert type(ours.value) is type(theirs.value)
