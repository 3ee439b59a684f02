"""Evaluation of trained models: lm-eval tasks, perplexity and bits-per-byte.

The names below load on first use, so that `marin_lab.evaluation.stats` and `.results` (read by
the CLI and the browser) import without the model code, JAX and lm-eval behind `evaluate_lm`.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, typed, for readers and mypy
    from marin_lab.evaluation.evaluate_lm import (
        CORE_TASKS,
        CORE_TASKS_OFFLINE,
        EvalLmConfig,
        EvaluationError,
        evaluate_lm,
        parse_task,
    )
    from marin_lab.evaluation.harness import HarnessError, MarinLM, TaskSpec, check_task_names

_LAZY = {
    **{
        name: "evaluate_lm"
        for name in ("CORE_TASKS", "CORE_TASKS_OFFLINE", "EvalLmConfig", "EvaluationError", "evaluate_lm", "parse_task")
    },
    **{name: "harness" for name in ("HarnessError", "MarinLM", "TaskSpec", "check_task_names")},
}

__all__ = [
    "CORE_TASKS",
    "CORE_TASKS_OFFLINE",
    "EvalLmConfig",
    "EvaluationError",
    "HarnessError",
    "MarinLM",
    "TaskSpec",
    "check_task_names",
    "evaluate_lm",
    "parse_task",
]


class _Package(types.ModuleType):
    """The package, whose lazy names always resolve to the objects: `evaluate_lm` is both a
    submodule and a function, and importing the submodule binds the module under that name."""

    def __getattribute__(self, name: str) -> Any:
        module = _LAZY.get(name)
        if module is not None:
            return getattr(importlib.import_module(f"{__name__}.{module}"), name)
        return super().__getattribute__(name)


sys.modules[__name__].__class__ = _Package
