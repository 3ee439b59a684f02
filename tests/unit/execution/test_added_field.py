"""A field added to a versioned config class keeps every recorded identity while it holds its default."""

from __future__ import annotations

import dataclasses

from marin_lab.execution.plan.hashing import canonical_value, hash8
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.versioning import added_field


@dataclasses.dataclass(frozen=True)
class Before:
    learning_rate: float = 1e-3


@dataclasses.dataclass(frozen=True)
class After:
    learning_rate: float = 1e-3
    decay_embeddings: bool = added_field(True)


def _hash(value) -> str:
    return hash8(canonical_value(value, where="test"))


def test_an_added_field_at_its_default_hashes_like_the_class_before_it():
    assert canonical_value(After(), where="t") == canonical_value(Before(), where="t") == {"learning_rate": 1e-3}
    assert _hash(After()) == _hash(Before())


def test_an_added_field_away_from_its_default_enters_the_identity():
    assert canonical_value(After(decay_embeddings=False), where="t") == {
        "learning_rate": 1e-3,
        "decay_embeddings": False,
    }
    assert _hash(After(decay_embeddings=False)) != _hash(After())


def test_regression_the_optimizer_default_keeps_recorded_train_identities():
    """decay_embeddings was added with the old behaviour as its default: train steps recorded before
    it existed keep their output paths; tootsie's decay_embeddings=False is a new identity."""
    assert "decay_embeddings" not in canonical_value(OptimizerConfig(), where="optimizer")
    assert canonical_value(OptimizerConfig(decay_embeddings=False), where="optimizer")["decay_embeddings"] is False


def test_a_step_configs_own_added_field_enters_its_identity_only_away_from_its_default():
    """EvalLmConfig.limit_mode came after evaluation steps were recorded: at its default every
    recorded evaluation keeps its output path; limit_mode="first" is a new identity."""
    from marin_lab.evaluation.evaluate_lm import EvalLmConfig
    from marin_lab.execution import this_output_path
    from marin_lab.execution.plan.hashing import scan_config

    def versioned(**kw):
        config = EvalLmConfig(checkpoint_path="/ckpt", output_path=this_output_path(), tasks=("copa",), **kw)
        return scan_config(config, step_label="evaluation/x").versioned

    assert "limit_mode" not in versioned(limit=10)
    assert versioned(limit=10, limit_mode="first")["limit_mode"] == "first"
