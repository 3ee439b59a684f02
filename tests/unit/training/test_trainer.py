"""The Trainer: one loop for train_lm and finetune_lm, driven here by a one-parameter toy step."""

import dataclasses
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_lab.training import checkpoint as ckpt
from marin_lab.training.checkpoint import CheckpointConfig
from marin_lab.training.errors import TrainingError
from marin_lab.training.metrics import GOODPUT_FIELDS, WandbConfig
from marin_lab.training.trainer import Hook, LoopConfig, Trainer, programs

# Fields measured by the wall clock, which two runs never share.
WALL_CLOCK = {"time", "tokens_per_s", "segment_start", "resumed_at", "steps_redone", *GOODPUT_FIELDS}


@jax.jit
def _step(state, target):
    """Gradient descent on (w - target)^2; returns the new state and the step's metrics."""
    loss, grad = jax.value_and_grad(lambda w: jnp.sum((w - target) ** 2))(state["w"])
    return {"w": state["w"] - 0.1 * grad, "step": state["step"] + 1}, {"loss": loss, "w": state["w"][0]}


def _fresh():
    return {"w": jnp.zeros((1,), jnp.float32), "step": jnp.zeros((), jnp.int32)}


class _Toy:
    """A toy run through the Trainer, as a step function drives it: start, loop, summary."""

    def __init__(self, out, *, targets=None, save_every=2, stop_after=None, steps=6, summaries=None):
        self.targets, self.summaries = targets or {}, summaries
        loop = LoopConfig(
            name="toy",
            output_path=str(out),
            num_train_steps=steps,
            tokens_per_step=4,
            checkpoint=CheckpointConfig(save_every_steps=save_every, save_interval_s=None, keep_last=10),
            wandb=WandbConfig(enabled=False),
            summary_file="toy_summary.json",
            stop_after_steps=stop_after,
            nonfinite_advice="Try a smaller step.",
        )
        self.trainer = Trainer(loop)
        self.check_step = None

    def add_hook(self, hook):
        self.trainer.add_hook(hook)

    def train(self, state=None):
        start = self.trainer.initial_state(_fresh) if state is None else None
        result = self.trainer.train(
            start.state if start else state,
            _step,
            lambda step: (jnp.float32(self.targets.get(step, 3.0)),),
            checkpoint_metadata=lambda step: {"note": "toy"},
            check_step=self.check_step,
        )
        if self.summaries is not None:
            self.summaries.append(result)
        return self.trainer.finish(
            result,
            {
                "final_step": result.final_step,
                "start": result.start_step,
                "final_loss": result.last.get("loss"),
                "hooks": result.hook_lines,
                "checkpoint": result.checkpoint,
                "how": start.how if start else None,
            },
        )


_trainer = _Toy


def _lines(out):
    return [json.loads(line) for line in Path(out / "metrics.jsonl").read_text().splitlines()]


def test_hooks_run_on_their_interval_and_at_the_end_and_their_lines_are_logged(tmp_path):
    out = tmp_path / "run"
    seen = []
    trainer = _trainer(out, steps=5)
    trainer.add_hook(
        Hook(
            "every2",
            lambda info: (
                seen.append(("every2", info.step, int(info.state["step"])))
                or {"step": info.step, "every2": float(info.state["w"][0])}
            ),
            every=2,
        )
    )
    trainer.add_hook(
        Hook(
            "once",
            lambda info: seen.append(("once", info.step, int(info.state["step"]))) or {"step": info.step, "once": 1.0},
        )
    )
    summary = trainer.train(_fresh())
    # Every 2 steps, after the run's last step (5), then the final hook once; each sees its step's state.
    assert seen == [("every2", 2, 2), ("every2", 4, 4), ("every2", 5, 5), ("once", 5, 5)]
    lines = _lines(out)
    assert [line["step"] for line in lines if "loss" in line] == [1, 2, 3, 4, 5]
    assert [line["step"] for line in lines if "every2" in line] == [2, 4, 5]
    assert lines[-1] == {"step": 5, "once": 1.0}
    assert summary["hooks"]["every2"]["step"] == 5 and summary["hooks"]["once"] == {"step": 5, "once": 1.0}
    assert json.loads((out / "toy_summary.json").read_text()) == summary
    # The step's own metrics become the line: every returned value, tokens/s, the time and the
    # seconds goodput counts (the first line also says when this run's logging began).
    assert set(lines[0]) - WALL_CLOCK == {"step", "loss", "w"} and {"tokens_per_s", "time"} <= set(lines[0])
    assert lines[0]["loss"] == pytest.approx(9.0)


def test_checkpoints_follow_the_policy_and_a_stopped_run_resumes_bit_identically(tmp_path):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    unbroken = _trainer(whole, steps=6, save_every=4).train(_fresh())
    assert [s for s, _ in ckpt.list_checkpoints(str(whole / "checkpoints"))] == [4, 6]

    first = _trainer(parts, steps=6, save_every=4, stop_after=3).train(_fresh())
    assert first["final_step"] == 3  # the run's last step is always saved, whatever the policy
    assert [s for s, _ in ckpt.list_checkpoints(str(parts / "checkpoints"))] == [3]
    restored = ckpt.load_checkpoint(first["checkpoint"], _fresh())
    assert ckpt.read_metadata(first["checkpoint"]) == {"note": "toy", "step": 3}
    results = []
    second = _trainer(parts, steps=6, save_every=4, summaries=results).train(restored)
    assert second["start"] == 3 and second["final_step"] == 6
    assert [s for s, _ in ckpt.list_checkpoints(str(parts / "checkpoints"))] == [3, 4, 6]
    # Each step logged once, and the metrics match the unbroken run's but for wall-clock fields.
    strip = lambda lines: [{k: v for k, v in line.items() if k not in WALL_CLOCK} for line in lines]  # noqa: E731
    assert strip(_lines(parts)) == strip(_lines(whole))
    assert second["final_loss"] == unbroken["final_loss"]
    assert np.array_equal(
        np.asarray(results[0].state["w"]), np.asarray(ckpt.load_checkpoint(unbroken["checkpoint"], _fresh())["w"])
    )


def test_a_non_finite_loss_stops_the_run_naming_the_step_before_any_later_checkpoint(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(TrainingError, match=r"^loss is nan at step 2; stopping\. Try a smaller step\.$"):
        _trainer(out, targets={2: math.nan}, save_every=1).train(_fresh())
    # Steps 1 and 2 were saved; the state after the NaN step never was.
    assert [s for s, _ in ckpt.list_checkpoints(str(out / "checkpoints"))] == [1, 2]
    assert [line["step"] for line in _lines(out)] == [1, 2]
    assert not (out / "toy_summary.json").exists()


def test_check_step_stops_the_run_with_its_own_line(tmp_path):
    trainer = _trainer(tmp_path / "run")
    trainer.check_step = lambda values, step: f"w left its range at step {step}" if values["w"] > 1.0 else None
    with pytest.raises(TrainingError, match=r"^w left its range at step \d$"):
        trainer.train(_fresh())


def test_a_hook_with_no_positive_interval_is_refused_when_added(tmp_path):
    with pytest.raises(TrainingError, match=r"hook 'eval': every=0 must be positive"):
        _trainer(tmp_path / "run").add_hook(Hook("eval", lambda info: None, every=0))


def test_initial_state_is_fresh_then_restored_from_the_runs_own_checkpoint(tmp_path):
    out = tmp_path / "run"
    first = _trainer(out, steps=6, save_every=4, stop_after=3).train()
    assert first["how"] == "fresh" and first["final_step"] == 3
    inits = []

    def init():
        inits.append(1)
        return _fresh()

    loop = _trainer(out).trainer.loop
    start = Trainer(loop).initial_state(init)
    assert inits == [1]  # the init gives the shapes and shardings the checkpoint is read into
    assert start.how == f"resumed from {first['checkpoint']}" and start.step == 3
    assert start.metadata == {"note": "toy", "step": 3}
    again = _trainer(out).train()  # no state given: the Trainer finds the checkpoint and resumes from it
    assert again["how"] == f"resumed from {first['checkpoint']}" and again["start"] == 3 and again["final_step"] == 6
    refused = Trainer(loop)
    with pytest.raises(TrainingError, match=r"^resuming .*step-000006: shape mismatch$"):
        refused.initial_state(_fresh, lambda meta, path: (_ for _ in ()).throw(ckpt.CheckpointError("shape mismatch")))


def test_resume_asks_for_the_agreed_checkpoint_once(monkeypatch, tmp_path):
    asked = []
    monkeypatch.setattr(ckpt, "agreed_latest_checkpoint", lambda root: asked.append(root))
    monkeypatch.setattr(ckpt, "latest_checkpoint", lambda root: pytest.fail("resumed from this host's own listing"))
    trainer = _trainer(tmp_path / "run").trainer
    assert trainer.resume_checkpoint() is None and trainer.initial_state(_fresh).how == "fresh"
    assert asked == [str(tmp_path / "run" / "checkpoints")]


def test_programs_are_built_once_per_key_whichever_builder_asks():
    built = []

    @programs
    def build(a, b):
        built.append((a, b))
        return object()

    first = build(1, "x")
    assert build(1, "x") is first and build(2, "x") is not first
    assert built == [(1, "x"), (2, "x")]


def test_export_hf_writes_the_runs_tokenizer_and_ids_from_process_0(tmp_path):
    from tokenizers import Tokenizer, models

    from marin_lab.models.llama import init_params
    from marin_lab.testing.training import tiny_model, write_synthetic_cache
    from marin_lab.training.hf_export import param_leaves

    vocab = {f"t{i}": i for i in range(255)} | {"<|endoftext|>": 255}  # the synthetic cache's EOS is 255
    tokenizer_json = Tokenizer(models.WordLevel(vocab, unk_token="t0")).to_str()
    cache = write_synthetic_cache(
        str(tmp_path / "cache"), train_docs=4, validation_docs=2, tokenizer_json=tokenizer_json
    )
    toy = _trainer(tmp_path / "run")
    trainer = Trainer(dataclasses.replace(toy.trainer.loop, tokenizer_cache=cache))
    model = tiny_model()
    path = trainer.export_hf(model, param_leaves(init_params(model, jax.random.key(0))))
    assert path == str(tmp_path / "run" / "hf")
    assert (tmp_path / "run" / "hf" / "tokenizer.json").read_text() == tokenizer_json
    assert json.loads((tmp_path / "run" / "hf" / "config.json").read_text())["eos_token_id"] == 255
    assert json.loads((tmp_path / "run" / "hf" / "tokenizer_config.json").read_text())["eos_token"] == "<|endoftext|>"
    assert (tmp_path / "run" / "hf" / "model.safetensors").exists()


def test_a_damaged_checkpoint_stops_the_start_with_its_own_line(tmp_path):
    out = tmp_path / "run"
    first = _trainer(out, steps=6, save_every=4, stop_after=3).train()
    (tmp_path / "run" / "checkpoints" / "step-000003" / "metadata.json").write_text("{not json")
    with pytest.raises(TrainingError) as caught:
        _trainer(out).train()
    message = str(caught.value)
    # The checkpoint's own line (it names the checkpoint and what to do), not wrapped in a second one.
    assert len(message.splitlines()) == 1 and message.startswith(f"checkpoint {first['checkpoint']} is damaged: ")


def test_a_preemption_notice_saves_a_checkpoint_and_ends_the_attempt_as_a_preemption(tmp_path):
    """The VM's metadata says preempted at step 3 (a hook stands in for the slice runner's watcher):
    the loop saves step 3 off its policy, raises PreemptedError, and the next attempt resumes there
    and ends where an unbroken run does."""
    from marin_lab.execution.errors import PreemptedError
    from marin_lab.host_env import PREEMPTION_NOTICE

    unbroken = _trainer(tmp_path / "whole", steps=6, save_every=4).train(_fresh())
    run = _trainer(tmp_path / "parts", steps=6, save_every=4)
    run.add_hook(Hook("notice", lambda info: PREEMPTION_NOTICE.set() if info.step == 3 else None, every=1))
    try:
        with pytest.raises(PreemptedError, match="preemption notice: checkpoint saved at step 3") as raised:
            run.train(_fresh())
    finally:
        PREEMPTION_NOTICE.clear()
    assert "\n" not in str(raised.value)
    assert [s for s, _ in ckpt.list_checkpoints(str(tmp_path / "parts" / "checkpoints"))] == [3]
    resumed = _trainer(tmp_path / "parts", steps=6, save_every=4).train()
    assert resumed["start"] == 3 and resumed["how"].startswith("resumed from")
    assert resumed["final_loss"] == unbroken["final_loss"]
