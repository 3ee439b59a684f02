"""Evaluation of trained models: lm-eval tasks, perplexity and bits-per-byte."""

from marin_lab.evaluation.evaluate_lm import (
    CORE_TASKS,
    CORE_TASKS_OFFLINE,
    EvalLmConfig,
    EvaluationError,
    evaluate_lm,
    parse_task,
)
from marin_lab.evaluation.harness import HarnessError, MarinLM, TaskSpec, check_task_names

__all__ = ["CORE_TASKS", "CORE_TASKS_OFFLINE", "EvalLmConfig", "EvaluationError", "HarnessError", "MarinLM",
           "TaskSpec", "check_task_names", "evaluate_lm", "parse_task"]
