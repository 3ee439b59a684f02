"""explain names the nested field that changed, not the whole versioned object twice."""

from __future__ import annotations

from marin_lab.execution.review.baseline import diff_versions, version_changes
from marin_lab.io.secrets import REDACTED

OPT = {"learning_rate": 0.003, "weight_decay": 0.1, "schedule": {"kind": "cosine", "warmup": 0.1}}


def _version(**opt):
    return {"name": "train/lm", "config": {"optimizer": {**OPT, **opt}, "seq_len": 256}, "dependencies": []}


def test_a_changed_learning_rate_is_one_line_naming_the_nested_field():
    assert diff_versions(_version(), _version(learning_rate=0.002)) == ["optimizer.learning_rate: 0.003 -> 0.002"]


def test_deeper_fields_lists_and_odd_keys_get_structural_paths():
    old = {"config": {"opt": {"schedule": {"kind": "cosine"}, "betas": [0.9, 0.95], "w": {"web.en": 1}, "mix": [1]}}}
    new = {"config": {"opt": {"schedule": {"kind": "linear"}, "betas": [0.9, 0.99], "w": {"web.en": 2}, "mix": [1, 2]}}}
    fields = {c["field"]: (c["old"], c["new"]) for c in version_changes(old, new)}
    assert fields == {
        "config.opt.schedule.kind": ("cosine", "linear"),
        "config.opt.betas[1]": (0.95, 0.99),
        'config.opt.w["web.en"]': (1, 2),
        "config.opt.mix": ([1], [1, 2]),
    }


def test_nested_additions_and_removals_are_named():
    old = {"config": {"opt": {"a": 1}}}
    new = {"config": {"opt": {"b": 2}}}
    assert diff_versions(old, new) == ["opt.a: 1 -> (absent)", "opt.b: (absent) -> 2"]
    changes = {c["field"]: c["change"] for c in version_changes(old, new)}
    assert changes == {"config.opt.a": "removed", "config.opt.b": "added"}


def test_a_nested_secret_stays_redacted():
    lines = diff_versions(
        {"config": {"hub": {"hf_token": "hf_aaaaaaaaaaaaaaaaaaaaaa", "repo": "a"}}},
        {"config": {"hub": {"hf_token": "hf_bbbbbbbbbbbbbbbbbbbbbb", "repo": "b"}}},
    )
    assert lines == [f"hub.hf_token: {REDACTED!r} -> {REDACTED!r}", "hub.repo: 'a' -> 'b'"]
