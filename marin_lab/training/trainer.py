"""The one training loop: `train_lm` (pretraining) and `finetune_lm` (fine-tuning) both run a `Trainer`.

A step function builds what differs between runs and hands it over: the state (fresh, restored
from the run's latest checkpoint, or initialised from another run), the compiled step program, the
batch of each step, how a step's outputs become a metrics line, the checkpoint metadata, and hooks.
The Trainer owns what is the same:

- the loop over the steps from the state's own step (so a restored state resumes where its
  checkpoint left off) to `num_train_steps`, or `stop_after_steps` further. Step k+1 is dispatched
  before step k's metrics are fetched, so the device never waits for the host;
- each step's metrics: a non-finite loss (or whatever `check_step` reports) stops the run with one
  line naming the step; every `log_every` steps a line goes to metrics.jsonl and W&B
  (`MetricsLogger`), and a progress line to the log at most every `print_every_s`;
- hooks (`Hook`): a function of the state run every `every` steps and after the last step of the
  run, or once after the loop (`every=None`); the dict a hook returns is logged as a metrics line
  and kept, by hook name, for the summary. Evaluation during training is such a hook, built by
  marin_lab.evaluation, which sits above training and is never imported from here;
- checkpoints by the `CheckpointConfig` policy and always after the run's last step, so a stopped
  run resumes where it stopped; no state is saved before its loss was checked;
- the end: the summary hook turns the `TrainResult` into the run's summary, which process 0 writes
  to `{output_path}/{summary_file}` and W&B keeps; every process returns it.

On several hosts every process runs the same loop (the saves are collective); process 0 writes the
metrics, the summary and W&B.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
from tqdm.auto import tqdm

from marin_lab.io import fs as mfs
from marin_lab.training import checkpoint as ckpt
from marin_lab.training.checkpoint import CheckpointConfig
from marin_lab.training.errors import TrainingError
from marin_lab.training.metrics import MetricsLogger, StepTimer, WandbConfig
from marin_lab.versioning import field_hints

# A progress line (and a metrics.jsonl flush) at most this often, unless the caller says otherwise.
PRINT_EVERY_S = 10.0


@field_hints
@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """What the loop needs from a run's config (train_lm's and finetune_lm's configs give it)."""

    name: str
    """The step function's name, as log lines start with it (`train_lm: step 3/8, ...`)."""
    output_path: str
    """Where metrics.jsonl, checkpoints/, wandb/ and the summary go."""
    num_train_steps: int
    """The global step at which training is finished."""
    tokens_per_step: int
    """Tokens of one global batch, for tokens/s."""
    checkpoint: CheckpointConfig
    """When to save and which checkpoints to keep."""
    wandb: WandbConfig
    """W&B logging."""
    log_every: int = 1
    """A metrics line every this many steps (and at the run's last step)."""
    stop_after_steps: int | None = None
    """Stop after this many steps of this run (preemption drills and tests)."""

    @property
    def checkpoint_root(self) -> str:
        return mfs.join(self.output_path, "checkpoints")


@dataclasses.dataclass(frozen=True)
class StepInfo:
    """What a hook sees: `step` steps are done and `state` is their result."""

    step: int
    state: Any


@dataclasses.dataclass(frozen=True)
class Hook:
    """A function of the state, run every `every` steps and after the run's last step, or once after
    the loop when `every` is None; a dict it returns is logged as a metrics line."""

    name: str
    fn: Callable[[StepInfo], dict[str, Any] | None]
    every: int | None = None

    def due(self, done: int, end_step: int) -> bool:
        return self.every is not None and (done % self.every == 0 or done == end_step)


@dataclasses.dataclass
class TrainResult:
    """What the loop leaves for the summary hook."""

    state: Any
    start_step: int
    final_step: int
    last: dict[str, Any]
    """The last step's metrics line ({} when no step ran)."""
    hook_lines: dict[str, dict[str, Any]]
    """Each hook's latest line, by hook name."""
    tokens_per_s: float | None
    """Over this run's steps but the first (which includes compilation); None with one step or none."""
    metrics: MetricsLogger
    checkpoint_root: str

    @property
    def checkpoint(self) -> str | None:
        """The run's latest complete checkpoint (after the loop: the final one)."""
        return ckpt.latest_checkpoint(self.checkpoint_root)


def default_metrics_line(step: int, values: dict[str, float], tokens_per_s: float) -> dict[str, Any]:
    """Every value the step returned, with its throughput and the wall-clock time."""
    return {"step": step, **values, "tokens_per_s": tokens_per_s, "time": time.time()}


class Trainer:
    """Runs `step_fn(state, *batch(step))` from the state's step on; see the module docstring."""

    def __init__(
        self,
        loop: LoopConfig,
        step_fn: Callable[..., tuple[Any, dict[str, jax.Array]]],
        batch: Callable[[int], tuple[Any, ...]],
        *,
        checkpoint_metadata: Callable[[int], dict[str, Any]],
        summary: Callable[[TrainResult], dict[str, Any]],
        summary_file: str,
        wandb_run_config: dict[str, Any],
        metrics_line: Callable[[int, dict[str, float], float], dict[str, Any]] = default_metrics_line,
        check_step: Callable[[dict[str, float], int], str | None] | None = None,
        nonfinite_advice: str = "Lower optimizer.learning_rate, or inspect the data of that step",
        on_dispatch: Callable[[int], None] | None = None,
        logger: logging.Logger | None = None,
        print_every_s: float = PRINT_EVERY_S,
    ):
        """`batch(step)` gives the step program's arguments after the state; `check_step(values,
        step)` a reason to stop or None; `on_dispatch(done)` runs once step `done - 1` is
        dispatched (the preemption drills); `logger` is the step function's, for its progress lines."""
        self.loop, self.step_fn, self.batch = loop, step_fn, batch
        self.checkpoint_metadata, self.summary, self.summary_file = checkpoint_metadata, summary, summary_file
        self.wandb_run_config = wandb_run_config
        self.metrics_line, self.check_step, self.nonfinite_advice = metrics_line, check_step, nonfinite_advice
        self.on_dispatch = on_dispatch
        self.logger = logger or logging.getLogger(__name__)
        self.print_every_s = print_every_s
        self.hooks: list[Hook] = []

    def add_hook(self, hook: Hook) -> None:
        if hook.every is not None and hook.every < 1:
            raise TrainingError(f"hook {hook.name!r}: every={hook.every} must be positive (or "
                                "None: once, after the loop)")
        self.hooks.append(hook)

    def add_hooks(self, hooks: Sequence[Hook]) -> None:
        for hook in hooks:
            self.add_hook(hook)

    def train(self, state: Any) -> dict[str, Any]:
        """Train from `state` (fresh or restored), run the hooks, checkpoint; returns the summary."""
        loop = self.loop
        start_step = int(jax.device_get(state["step"]))
        end_step = loop.num_train_steps
        if loop.stop_after_steps is not None:
            end_step = min(end_step, start_step + loop.stop_after_steps)
        checkpointer = ckpt.Checkpointer(loop.checkpoint_root, loop.checkpoint)
        metrics = MetricsLogger(loop.output_path, loop.wandb, run_name=loop.output_path.rstrip("/").rsplit("/", 1)[-1],
                                config_for_wandb=self.wandb_run_config, resume_step=start_step)
        run = _Run(self, metrics, start_step, end_step)
        periodic = [h for h in self.hooks if h.every is not None]
        pending: tuple[int, dict[str, jax.Array], float] | None = None
        try:
            for step in range(start_step, end_step):
                args = self.batch(step)
                started = time.perf_counter()
                state, out = self.step_fn(state, *args)
                done = step + 1
                if self.on_dispatch is not None:
                    self.on_dispatch(done)
                if pending is not None:
                    run.finish_step(*pending)
                pending = (step, out, started)
                due = [h for h in periodic if h.due(done, end_step)]
                if due:
                    run.finish_step(*pending)
                    pending = None
                    for hook in due:
                        run.run_hook(hook, StepInfo(done, state))
                if checkpointer.should_save(done, is_last=done == loop.num_train_steps) or done == end_step:
                    if pending is not None:  # never checkpoint a state whose loss was not checked
                        run.finish_step(*pending)
                    pending = None
                    checkpointer.save(done, state, self.checkpoint_metadata(done))
                    metrics.flush()
            if pending is not None:
                run.finish_step(*pending)
        finally:
            run.progress.close()
            metrics.flush()

        final_step = int(jax.device_get(state["step"]))
        final = [h for h in self.hooks if h.every is None]
        for hook in final:
            run.run_hook(hook, StepInfo(final_step, state))
        if final:
            metrics.flush()
        result = TrainResult(state=state, start_step=start_step, final_step=final_step, last=run.last,
                             hook_lines=run.hook_lines,
                             tokens_per_s=run.tokens_done / run.train_time if run.train_time else None,
                             metrics=metrics, checkpoint_root=loop.checkpoint_root)
        summary = self.summary(result)
        if jax.process_index() != 0:  # one writer of the summary and of W&B
            return summary
        mfs.write_json(mfs.join(loop.output_path, self.summary_file), summary)
        metrics.close(summary)
        return summary


def format_duration(seconds: float) -> str:
    """`45 s`, `2 min 5 s`, `1 h 3 min`: a remaining time as a person reads it."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class _Run:
    """The bookkeeping of one `Trainer.train` call: throughput, the last lines, the progress bar."""

    def __init__(self, trainer: Trainer, metrics: MetricsLogger, start_step: int, end_step: int):
        self.trainer, self.metrics = trainer, metrics
        self.start_step, self.end_step = start_step, end_step
        self.tokens_done, self.train_time = 0, 0.0
        self.last: dict[str, Any] = {}
        self.hook_lines: dict[str, dict[str, Any]] = {}
        self.timer = StepTimer()
        self.printed = float("-inf")  # the first logged step is printed (it includes compilation)
        self.progress = tqdm(total=end_step - start_step, desc="train", unit="step", disable=None)

    def finish_step(self, step: int, out: dict[str, jax.Array], started: float) -> None:
        """Fetch one step's metrics (after the next step was dispatched, to keep the device busy)."""
        t, loop = self.trainer, self.trainer.loop
        values = {k: float(v) for k, v in jax.device_get(out).items()}
        problem = t.check_step(values, step) if t.check_step is not None else None
        if problem:
            raise TrainingError(problem)
        if not math.isfinite(values["loss"]):
            raise TrainingError(f"loss is {values['loss']} at step {step}; stopping. {t.nonfinite_advice}")
        elapsed = self.timer.finished(started)
        if step > self.start_step:  # the first step of a run includes compilation
            self.tokens_done += loop.tokens_per_step
            self.train_time += elapsed
        tps = loop.tokens_per_step / elapsed if elapsed > 0 else 0.0
        self.last = t.metrics_line(step, values, tps)
        is_last = step == self.end_step - 1
        if step % loop.log_every == 0 or is_last:
            self.metrics.log(self.last)
            # Workers are not terminals: a line a person can read, and metrics.jsonl kept current,
            # every log_every steps but at most every print_every_s (log_every=1 would flood).
            now = time.monotonic()
            if now - self.printed >= t.print_every_s or is_last:
                self.printed = now
                t.logger.info("%s: step %d/%d, loss %.4f, %.0f tokens/s%s", loop.name, step + 1, loop.num_train_steps,
                              values["loss"], tps, self.eta(step))
                self.metrics.flush()
        self.progress.update(1)
        self.progress.set_postfix(loss=f"{values['loss']:.4f}")

    def eta(self, step: int) -> str:
        """`, ETA 2 min 5 s` from the mean time of this run's steps so far (the first, which includes
        compilation, left out); empty before there is one to go by, and after the last step."""
        timed = step - self.start_step
        left = self.end_step - 1 - step
        if timed <= 0 or left <= 0 or self.train_time <= 0:
            return ""
        return f", ETA {format_duration(left * self.train_time / timed)}"

    def run_hook(self, hook: Hook, info: StepInfo) -> None:
        line = hook.fn(info)
        if line is not None:
            self.metrics.log(line)
            self.hook_lines[hook.name] = line
