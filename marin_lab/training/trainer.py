"""The one `Trainer` of `train_lm` (pretraining) and `finetune_lm` (fine-tuning).

A step function keeps only what differs between runs: the model's initial state, the compiled
step program, the batch of each step, the metrics line, the checkpoint metadata and the summary's
fields. The Trainer owns what is the same, in the order a step function calls it:

- `Trainer(loop, run_config)` joins the step's JAX cluster when the environment names one
  (`distributed.initialize_from_env`; on several hosts every process runs the same calls);
- `programs` (a decorator) is the one per-process cache of compiled programs: equal frozen
  configs on the same devices compile once, whichever step function asks;
- `resume_checkpoint()` is the run's latest complete checkpoint *as process 0 lists it*, broadcast
  (`checkpoint.agreed_latest_checkpoint`) and looked up once, so every host restores the same step;
  `initial_state(init)` restores it into the shapes and shardings of `init()`'s state (a
  checkpoint written on other hardware is resharded as it is read), or returns `init()` fresh;
  given `abstract` (the state's `jax.eval_shape`), a resumed run reads into that and never
  compiles `init`;
- `train(state, step_fn, batch)`: the loop from the state's own step (a restored state resumes
  where its checkpoint left off) to `num_train_steps`, or `stop_after_steps` further. Step k+1 is
  dispatched before step k's metrics are fetched, so the device never waits for the host. A
  non-finite loss (or whatever `check_step` reports) stops the run with one line naming the step;
  every `log_every` steps a line goes to metrics.jsonl and W&B (`MetricsLogger`), and a progress
  line to the log at most every `print_every_s`. Checkpoints follow the `CheckpointConfig` policy
  and are always written after the run's last step, so a stopped run resumes where it stopped; no
  state is saved before its loss was checked. A preemption notice (`host_env.PREEMPTION_NOTICE`,
  set from the VM's metadata by the slice runner) saves a checkpoint and ends the attempt as a
  `PreemptedError`; on several processes all stop at one agreed step
  (`distributed.PreemptionAgreement`). The preemption drills (`distributed.maybe_fault`) run here on
  multi-process runs;
- hooks (`Hook`): a function of the state run every `every` steps and after the last step of the
  run, or once after the loop (`every=None`); the dict a hook returns is logged as a metrics line
  and kept, by hook name, for the summary. Evaluation during training is such a hook, built by
  marin_lab.evaluation (`during_training.training_hooks`) and registered by the step function
  above both (marin_lab.main.train_lm): the loop never imports the scorers;
- `export_hf(model, leaves)`: the one Hugging Face export tail, with the tokenizer (and bos/eos
  ids) of the run's first token cache, looked up once, and a chat fine-tune's template; written by
  process 0;
- `finish(result, summary)`: process 0 writes `{output_path}/{summary_file}` and closes W&B with
  it; every process returns the summary.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from marin_lab.execution.errors import PreemptedError
from marin_lab.humanize import format_duration
from marin_lab.io import fs as mfs
from marin_lab.models.llama import LlamaConfig
from marin_lab.training import checkpoint as ckpt
from marin_lab.training import distributed
from marin_lab.training.checkpoint import CheckpointConfig
from marin_lab.training.errors import TrainingError
from marin_lab.training.hf_export import chat_template_of, export_hf_leaves
from marin_lab.training.metrics import MetricsLogger, StepTimer, WandbConfig
from marin_lab.training.token_cache import TokenCache
from marin_lab.versioning import field_hints

# A progress line (and a metrics.jsonl flush) at most this often, unless the caller says otherwise.
PRINT_EVERY_S = 10.0
# Compiled programs kept per process (tests, phases and sweeps run several configs in one process).
PROGRAMS_KEPT = 16


@field_hints
@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """What the Trainer needs from a run's config (train_lm's and finetune_lm's configs give it)."""

    name: str
    """The step function's name, as log lines start with it (`train_lm: step 3/8, ...`)."""
    output_path: str
    """Where metrics.jsonl, checkpoints/, wandb/, hf/ and the summary go."""
    num_train_steps: int
    """The global step at which training is finished."""
    tokens_per_step: int
    """Tokens of one global batch, for tokens/s."""
    checkpoint: CheckpointConfig
    """When to save and which checkpoints to keep."""
    wandb: WandbConfig
    """W&B logging."""
    summary_file: str
    """The summary's file name under output_path (`train_summary.json`)."""
    log_every: int = 1
    """A metrics line every this many steps (and at the run's last step)."""
    stop_after_steps: int | None = None
    """Stop after this many steps of this run (preemption drills and tests)."""
    tokenizer_cache: str | None = None
    """The token cache whose tokenizer and bos/eos ids the HF export carries (the run's first)."""
    nonfinite_advice: str = "Lower optimizer.learning_rate, or inspect the data of that step"
    """What the line that stops a run on a non-finite loss tells the reader to do."""

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


@dataclasses.dataclass(frozen=True)
class Start:
    """Where a run starts: its state, and how it came to be (`initial_state`)."""

    state: Any
    how: str
    """'fresh', 'resumed from <checkpoint>' (or what the step function sets, e.g. 'initialized from')."""
    checkpoint: str | None = None
    """The checkpoint the state was read from (None when fresh)."""
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    """That checkpoint's metadata ({} when fresh)."""

    @property
    def step(self) -> int:
        return int(jax.device_get(self.state["step"]))


@dataclasses.dataclass
class TrainResult:
    """What the loop leaves for the summary."""

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


_PROGRAMS: collections.OrderedDict[tuple, Any] = collections.OrderedDict()


def programs(build: Callable[..., Any]) -> Callable[..., Any]:
    """The one per-process cache of compiled programs, as a decorator of a step function's builder.

    `build(*key)` returns what a run compiles (shardings, init, step, eval functions) from frozen,
    hashable configs, so equal keys really mean the same program; the devices of this process are
    part of the key (another device set is another program). The `PROGRAMS_KEPT` latest are kept,
    whichever builder made them: several runs in one process (tests, phases, sweeps) compile each
    program once.
    """

    @functools.wraps(build)
    def cached(*key: Any) -> Any:
        full = (build.__module__, build.__qualname__, key, tuple(d.id for d in jax.devices()))
        if full in _PROGRAMS:
            _PROGRAMS.move_to_end(full)
            return _PROGRAMS[full]
        built = _PROGRAMS[full] = build(*key)
        while len(_PROGRAMS) > PROGRAMS_KEPT:
            _PROGRAMS.popitem(last=False)
        return built

    return cached


class Trainer:
    """Owns a run's start (cluster, resume), its loop, its checkpoints, its export and its summary;
    see the module docstring for the order a step function calls it in."""

    def __init__(
        self,
        loop: LoopConfig,
        run_config: Any = None,
        *,
        logger: logging.Logger | None = None,
        print_every_s: float | None = None,
    ):
        """`run_config` (the step's config dataclass) is what W&B records; `logger` is the step
        function's, for its progress lines, printed at most every `print_every_s` (`PRINT_EVERY_S`)."""
        self.multi_process = distributed.initialize_from_env()
        self.loop = loop
        is_config = dataclasses.is_dataclass(run_config) and not isinstance(run_config, type)
        self.wandb_run_config = dataclasses.asdict(run_config) if is_config else {}
        self.logger = logger or logging.getLogger(__name__)
        self.print_every_s = PRINT_EVERY_S if print_every_s is None else print_every_s
        self.hooks: list[Hook] = []
        self._resume: tuple[str | None] | None = None
        self.restore_s = 0.0
        """Seconds `initial_state` spent reading the checkpoint (a line of metrics.jsonl carries it)."""

    # -- the start -------------------------------------------------------------------------------

    def resume_checkpoint(self) -> str | None:
        """This run's latest complete checkpoint as process 0 lists it, the same on every process
        (a marker landing between two hosts' listings must not make them restore different steps);
        looked up once per Trainer."""
        if self._resume is None:
            self._resume = (ckpt.agreed_latest_checkpoint(self.loop.checkpoint_root),)
        return self._resume[0]

    def initial_state(
        self,
        init: Callable[[], Any],
        check: Callable[[dict[str, Any], str], None] | None = None,
        abstract: Callable[[], Any] | None = None,
    ) -> Start:
        """The state restored from `resume_checkpoint()` into the shapes and shardings of `init()`'s
        (a checkpoint written on other hardware is resharded as it is read), or `init()` itself when
        the run has no checkpoint yet. `abstract()`, when given, is that state's abstract tree
        (`jax.eval_shape` of the sharded init function: shapes, dtypes and shardings): a resumed run
        then reads the checkpoint into it and never compiles or runs `init`. `check(metadata, path)`
        may refuse the checkpoint first; a checkpoint that cannot be read stops the run with one line
        naming it."""
        path = self.resume_checkpoint()
        if path is None:
            return Start(init(), "fresh")
        template = abstract() if abstract is not None else init()
        try:
            meta = ckpt.read_metadata(path)
            if check is not None:
                check(meta, path)
            reading = time.perf_counter()
            state = ckpt.load_checkpoint(path, template)
            self.restore_s = time.perf_counter() - reading
        except ckpt.CheckpointError as err:  # one line, naming the checkpoint once
            raise TrainingError(str(err) if path in str(err) else f"resuming {path}: {err}") from err
        return Start(state, f"resumed from {path}", path, meta)

    # -- the loop --------------------------------------------------------------------------------

    def add_hook(self, hook: Hook) -> None:
        if hook.every is not None and hook.every < 1:
            raise TrainingError(
                f"hook {hook.name!r}: every={hook.every} must be positive (or None: once, after the loop)"
            )
        self.hooks.append(hook)

    def add_hooks(self, hooks: Sequence[Hook]) -> None:
        for hook in hooks:
            self.add_hook(hook)

    def train(
        self,
        state: Any,
        step_fn: Callable[..., tuple[Any, dict[str, jax.Array]]],
        batch: Callable[[int], tuple[Any, ...]],
        *,
        metrics_line: Callable[[int, dict[str, float], float], dict[str, Any]] = default_metrics_line,
        checkpoint_metadata: Callable[[int], dict[str, Any]] = lambda step: {},
        check_step: Callable[[dict[str, float], int], str | None] | None = None,
    ) -> TrainResult:
        """Run `step_fn(state, *batch(step))` from the state's step on, the hooks and the checkpoints.

        `metrics_line(step, values, tokens_per_s)` turns a step's outputs into its line;
        `checkpoint_metadata(step)` is saved beside each checkpoint; `check_step(values, step)` gives
        a reason to stop or None.
        """
        loop = self.loop
        start_step = int(jax.device_get(state["step"]))
        end_step = loop.num_train_steps
        if loop.stop_after_steps is not None:
            end_step = min(end_step, start_step + loop.stop_after_steps)
        checkpointer = ckpt.Checkpointer(loop.checkpoint_root, loop.checkpoint)
        metrics = MetricsLogger(
            loop.output_path,
            loop.wandb,
            run_name=loop.output_path.rstrip("/").rsplit("/", 1)[-1],
            config_for_wandb=self.wandb_run_config,
            resume_step=start_step,
        )
        if self.restore_s:
            metrics.note("restore_s", self.restore_s)
        run = _Run(self, metrics, start_step, end_step, metrics_line, check_step)
        periodic = [h for h in self.hooks if h.every is not None]
        pending: tuple[int, dict[str, jax.Array], float] | None = None
        notice = distributed.PreemptionAgreement(self.multi_process)
        try:
            for step in range(start_step, end_step):
                waited = time.perf_counter()
                args = batch(step)
                metrics.note("data_wait_s", time.perf_counter() - waited)
                if self.multi_process and step == start_step:  # every host's first collective together
                    distributed.compile_then_meet(step_fn, (state, *args), f"the step of {loop.output_path}")
                started = time.perf_counter()
                state, out = step_fn(state, *args)
                done = step + 1
                if self.multi_process:  # the preemption drills, once step `done - 1` is dispatched
                    distributed.maybe_fault(done, loop.output_path)
                if pending is not None:
                    run.finish_step(*pending)
                pending = (step, out, started)
                due = [h for h in periodic if h.due(done, end_step)]
                if due:
                    run.finish_step(*pending)
                    pending = None
                    for hook in due:
                        run.run_hook(hook, StepInfo(done, state))
                stop = notice.stop_step(done)
                noticed = stop is not None and done >= stop and done < end_step
                if checkpointer.should_save(done, is_last=done == loop.num_train_steps) or done == end_step or noticed:
                    if pending is not None:  # never checkpoint a state whose loss was not checked
                        run.finish_step(*pending)
                    pending = None
                    saving = time.perf_counter()
                    checkpointer.save(done, state, checkpoint_metadata(done))
                    metrics.note("checkpoint_s", time.perf_counter() - saving, on_last_line=True)
                    metrics.flush()
                if noticed:
                    raise PreemptedError(
                        f"{loop.name}: preemption notice: checkpoint saved at step {done}; the attempt ends as a "
                        "preemption and the next one resumes there"
                    )
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
        return TrainResult(
            state=state,
            start_step=start_step,
            final_step=final_step,
            last=run.last,
            hook_lines=run.hook_lines,
            tokens_per_s=run.tokens_done / run.train_time if run.train_time else None,
            metrics=metrics,
            checkpoint_root=loop.checkpoint_root,
        )

    # -- the end ---------------------------------------------------------------------------------

    @functools.cached_property
    def tokenizer(self) -> tuple[str | None, int | None, int | None]:
        """(tokenizer.json url, bos id, eos id) of `loop.tokenizer_cache`, read once; Nones without one."""
        if self.loop.tokenizer_cache is None:
            return None, None, None
        cache = TokenCache(self.loop.tokenizer_cache)
        return cache.tokenizer_url(), cache.ledger.get("bos_id"), cache.ledger.get("eos_id")

    def export_hf(
        self,
        model: LlamaConfig,
        leaves: Iterable[tuple[tuple[str, ...], np.ndarray]],
        dtype: str = "float32",
        chat_template: Mapping[str, Any] | None = None,
    ) -> str | None:
        """Write `{output_path}/hf` in Hugging Face format from `leaves` ((keys, array) per parameter,
        read one at a time) with the run's tokenizer and, for a chat fine-tune, the `chat_template`
        record of its instruction cache; process 0 writes it and gets its path, the others None."""
        if jax.process_index() != 0:
            return None
        url, bos_id, eos_id = self.tokenizer
        return export_hf_leaves(
            leaves,
            model,
            mfs.join(self.loop.output_path, "hf"),
            dtype=dtype,
            tokenizer_url=url,
            bos_id=bos_id,
            eos_id=eos_id,
            chat_template=chat_template_of(chat_template),
        )

    def finish(self, result: TrainResult, summary: dict[str, Any]) -> dict[str, Any]:
        """Process 0 writes the summary to `{output_path}/{summary_file}` and closes W&B with it;
        every process returns it."""
        if jax.process_index() != 0:  # one writer of the summary and of W&B
            return summary
        mfs.write_json(mfs.join(self.loop.output_path, self.loop.summary_file), summary)
        result.metrics.close(summary)
        return summary


class _Run:
    """The bookkeeping of one `Trainer.train` call: throughput, the last lines, the progress bar."""

    def __init__(
        self,
        trainer: Trainer,
        metrics: MetricsLogger,
        start_step: int,
        end_step: int,
        metrics_line: Callable[[int, dict[str, float], float], dict[str, Any]],
        check_step: Callable[[dict[str, float], int], str | None] | None,
    ):
        self.trainer, self.metrics = trainer, metrics
        self.metrics_line, self.check_step = metrics_line, check_step
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
        problem = self.check_step(values, step) if self.check_step is not None else None
        if problem:
            raise TrainingError(problem)
        if not math.isfinite(values["loss"]):
            raise TrainingError(f"loss is {values['loss']} at step {step}; stopping. {loop.nonfinite_advice}")
        elapsed = self.timer.finished(started)
        self.metrics.note("train_s", elapsed)
        if step == self.start_step:  # for goodput: the first step of a run includes compilation
            self.metrics.note("first_step_s", elapsed)
        if step > self.start_step:  # the first step of a run includes compilation
            self.tokens_done += loop.tokens_per_step
            self.train_time += elapsed
        tps = loop.tokens_per_step / elapsed if elapsed > 0 else 0.0
        # Rows are numbered by steps completed (1 after the first update), as evaluation rows,
        # checkpoints (`step-000100`) and the console are: a resume from step k keeps every row <= k.
        done = step + 1
        self.last = self.metrics_line(done, values, tps)
        is_last = step == self.end_step - 1
        if done % loop.log_every == 0 or step == self.start_step or is_last:
            self.metrics.log(self.last)
            # Workers are not terminals: a line a person can read, and metrics.jsonl kept current,
            # every log_every steps but at most every print_every_s (log_every=1 would flood).
            now = time.monotonic()
            if now - self.printed >= t.print_every_s or is_last:
                self.printed = now
                t.logger.info(
                    "%s: step %d/%d, loss %.4f, %.0f tokens/s%s",
                    loop.name,
                    step + 1,
                    loop.num_train_steps,
                    values["loss"],
                    tps,
                    self.eta(step),
                )
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
