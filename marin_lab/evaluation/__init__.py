"""Evaluation of trained models: perplexity, bits-per-byte and multiple-choice tasks."""

from marin_lab.evaluation.evaluate_lm import EvalLmConfig, EvaluationError, evaluate_lm
from marin_lab.evaluation.multiple_choice import TaskError, load_task, shipped_tasks

__all__ = ["EvalLmConfig", "EvaluationError", "TaskError", "evaluate_lm", "load_task", "shipped_tasks"]
