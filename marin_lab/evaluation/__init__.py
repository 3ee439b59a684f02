"""Evaluation of trained models: perplexity, bits-per-byte and multiple-choice tasks.

The names below load on first use, so that `marin_lab.evaluation.stats` and `.results` (read by
the CLI and the browser) import without the model code and JAX behind `evaluate_lm`.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, typed, for readers and mypy
    from marin_lab.evaluation.evaluate_lm import EvalLmConfig, EvaluationError, evaluate_lm
    from marin_lab.evaluation.multiple_choice import TaskError, load_task, shipped_tasks

_LAZY = {"EvalLmConfig": "evaluate_lm", "EvaluationError": "evaluate_lm", "evaluate_lm": "evaluate_lm",
         "TaskError": "multiple_choice", "load_task": "multiple_choice", "shipped_tasks": "multiple_choice"}

__all__ = ["EvalLmConfig", "EvaluationError", "TaskError", "evaluate_lm", "load_task", "shipped_tasks"]


class _Package(types.ModuleType):
    """The package, whose lazy names always resolve to the objects: `evaluate_lm` is both a
    submodule and a function, and importing the submodule binds the module under that name."""

    def __getattribute__(self, name: str) -> Any:
        module = _LAZY.get(name)
        if module is not None:
            return getattr(importlib.import_module(f"{__name__}.{module}"), name)
        return super().__getattribute__(name)


sys.modules[__name__].__class__ = _Package
