"""Evaluation during `train_lm`: the hooks its Trainer runs.

`marin_lab.main.train_lm` registers the hooks `training_hooks` builds from the config, once
`jax.distributed` is up and the config is checked (the loop in training/ knows only `Hook`):

- every `steps_per_eval` steps and after the run's last step, loss and bits per byte on every
  validation set (`eval/<name>/loss`, `eval/<name>/bpb`), scored by `perplexity.evaluate_cache`,
  the code `evaluate_lm` runs on a checkpoint, so the numbers agree;
- each of `eval_tasks` (lm-eval tasks, `name[:num_fewshot[:limit]]`, capped at `eval_task_limit`
  items) with the first cache's tokenizer, through the adapter `evaluate_lm` uses
  (`evaluation.harness`): every `steps_per_task_eval` steps and after the last step, or once when
  training reaches `num_train_steps` if that is None; logged as `eval/<task>/<metric>` with the
  interval's bounds (`eval/<task>/<metric>_low`, `_high`).

Both score on the training mesh, with the parameters as the run holds them (sharded over every
host of a multi-process run): every process runs the hooks, in lockstep, on the same batches
(`scoring`), and the Trainer's metrics logger writes the lines from process 0 only.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from marin_lab.evaluation.evaluate_lm import EvaluationError, evaluate_tasks, parse_task, task_keys
from marin_lab.evaluation.harness import HarnessError, MarinLM, check_task_names
from marin_lab.evaluation.perplexity import evaluate_cache
from marin_lab.evaluation.scoring import params_mesh
from marin_lab.precision import masters
from marin_lab.processing.tokenizers import optional_tokenizer_at
from marin_lab.training.config import TrainLmConfig, validation_sets
from marin_lab.training.errors import TrainingError
from marin_lab.training.token_cache import TokenCache
from marin_lab.training.trainer import Hook, StepInfo

logger = logging.getLogger(__name__)


def training_hooks(config: TrainLmConfig) -> list[Hook]:
    """The evaluation hooks of a train_lm run; raises TrainingError for a task that cannot load."""
    if config.eval_tasks:
        try:
            check_task_names([parse_task(t).name for t in config.eval_tasks])
        except (HarnessError, EvaluationError) as err:
            raise TrainingError(f"eval_tasks: {err}") from err
    sets = validation_sets(config)
    hooks = []
    if config.steps_per_eval:
        if sets:
            hooks.append(Hook("eval", functools.partial(_validation, config, sets), every=config.steps_per_eval))
        else:
            logger.warning("train_lm %s: no evaluation during training (no validation set)", config.output_path)
    if config.eval_tasks:
        hooks.append(Hook("tasks", functools.partial(_tasks, config), every=config.steps_per_task_eval))
    return hooks


def _validation(config: TrainLmConfig, sets: dict[str, str], info: StepInfo) -> dict[str, Any]:
    """eval/<name>/loss and eval/<name>/bpb at `info.step`."""
    line: dict[str, Any] = {"step": info.step, "time": time.time()}
    limit = None if config.max_eval_batches is None else config.max_eval_batches * config.batch_size
    params = masters.plain_params(info.state["params"])  # float16 masters are scored decoded
    for name, path in sorted(sets.items()):
        r = evaluate_cache(
            params,
            config.model,
            path,
            split=config.data.validation_split,
            seq_len=config.seq_len,
            batch_size=config.batch_size,
            max_sequences=limit,
            compute_dtype=config.compute_dtype,
            name=name,
            mesh=params_mesh(params),
        )
        line[f"eval/{name}/loss"], line[f"eval/{name}/bpb"] = r["loss"], r["bits_per_byte"]
    logger.info(
        "train_lm %s: eval at step %d: %s",
        config.output_path,
        info.step,
        ", ".join(f"{k} {v:.4f}" for k, v in line.items() if k.endswith("/loss")),
    )
    return line


def _tasks(config: TrainLmConfig, info: StepInfo) -> dict[str, Any] | None:
    """Each of `config.eval_tasks` scored with the first cache's tokenizer: eval/<task>/<metric>."""
    if config.steps_per_task_eval is None and info.step != config.num_train_steps:
        return None
    first = TokenCache(config.data.caches[sorted(config.data.caches)[0]])
    tokenizer = optional_tokenizer_at(first.tokenizer_url())
    if tokenizer is None:
        raise TrainingError(f"eval_tasks need a tokenizer, but cache {first.path} holds no tokenizer.json")
    line: dict[str, Any] = {"step": info.step, "time": time.time()}
    params = masters.plain_params(info.state["params"])
    lm = MarinLM(
        params,
        config.model,
        tokenizer,
        batch_size=config.batch_size,
        compute_dtype=config.compute_dtype,
        mesh=params_mesh(params),
    )
    specs = [parse_task(t, config.eval_task_limit) for t in config.eval_tasks]
    out = evaluate_tasks(lm, specs, None)
    for key in task_keys(specs):
        entry = out["tasks"][key]
        if entry["status"] != "ok":
            logger.warning(
                "train_lm %s: eval task %s failed at step %d: %s", config.output_path, key, info.step, entry["error"]
            )
            line[f"eval/{key}/failed"] = 1
            continue
        for metric, m in entry["metrics"].items():
            name = metric.replace(",", "/")
            line[f"eval/{key}/{name}"] = m["value"]
            if m.get("low") is not None:
                line[f"eval/{key}/{name}_low"], line[f"eval/{key}/{name}_high"] = m["low"], m["high"]
        line[f"eval/{key}/coverage"] = entry["coverage"]
    logger.info(
        "train_lm %s: tasks at step %d: %s",
        config.output_path,
        info.step,
        ", ".join(f"{k} {v:.4f}" for k, v in line.items() if k.endswith("/acc")),
    )
    return line
