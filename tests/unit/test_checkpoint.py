"""Checkpoints: exact round trip, COMPLETE marker, keep policies, time-based saves, shape checks."""

import jax.numpy as jnp
import numpy as np
import pytest

from marin_lab.training.checkpoint import (
    CheckpointConfig,
    CheckpointError,
    Checkpointer,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
)


def _state(scale=1.0):
    return {"params": {"w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3) * scale,
                       "h": jnp.ones(4, jnp.bfloat16) * scale},
            "step": jnp.asarray(3, jnp.int32)}


@pytest.mark.parametrize("root", ["local", "memory://ckpt-test/run"])
def test_round_trip_is_bit_exact(tmp_path, root):
    path = str(tmp_path / "c") if root == "local" else root
    state = _state(1.37)
    save_checkpoint(path, state, {"step": 3})
    back = load_checkpoint(path, _state(0.0))
    assert back["params"]["h"].dtype == jnp.bfloat16
    for a, b in zip(jax_leaves(state), jax_leaves(back)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def jax_leaves(tree):
    import jax

    return jax.tree_util.tree_leaves(tree)


def test_incomplete_checkpoint_is_ignored(tmp_path):
    root = str(tmp_path)
    save_checkpoint(f"{root}/step-000002", _state(), {"step": 2})
    save_checkpoint(f"{root}/step-000004", _state(), {"step": 4})
    (tmp_path / "step-000004" / "COMPLETE").unlink()  # as if the writer died before the marker
    assert latest_checkpoint(root) == f"{root}/step-000002"
    with pytest.raises(CheckpointError, match="COMPLETE"):
        load_checkpoint(f"{root}/step-000004", _state())
    assert resolve_checkpoint(root) == f"{root}/step-000002"


def test_shape_mismatch_is_a_clear_error(tmp_path):
    save_checkpoint(str(tmp_path), _state(), {"step": 3})
    other = {"params": {"w": jnp.zeros((3, 3)), "h": jnp.ones(4, jnp.bfloat16)}, "step": jnp.asarray(0)}
    with pytest.raises(CheckpointError, match="different model shape"):
        load_checkpoint(str(tmp_path), other)


def test_keep_last_and_permanent_steps(tmp_path):
    clock = FakeClock()
    ck = Checkpointer(str(tmp_path), CheckpointConfig(save_every_steps=1, save_interval_s=None,
                                                       keep_last=2, keep_every_steps=3), clock=clock)
    for step in range(1, 8):
        ck.save(step, _state(), {})
    # Newest two (6, 7) plus the permanent multiple of 3 that fell out of the window (3).
    assert [s for s, _ in list_checkpoints(str(tmp_path))] == [3, 6, 7]
    assert not (tmp_path / "step-000005").exists()


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_time_based_policy_uses_the_injected_clock(tmp_path):
    clock = FakeClock()
    ck = Checkpointer(str(tmp_path), CheckpointConfig(save_every_steps=None, save_interval_s=60,
                                                       save_final=True), clock=clock)
    assert not ck.should_save(1)
    clock.now = 59.0
    assert not ck.should_save(2)
    clock.now = 61.0
    assert ck.should_save(3)
    ck.save(3, _state(), {})
    assert not ck.should_save(4)
    assert ck.should_save(5, is_last=True)
    clock.now = 122.0
    assert ck.should_save(6)


def test_step_policy():
    ck = Checkpointer("memory://unused", CheckpointConfig(save_every_steps=5, save_interval_s=None,
                                                          save_final=False), clock=FakeClock())
    assert [s for s in range(1, 16) if ck.should_save(s)] == [5, 10, 15]
    with pytest.raises(CheckpointError, match="keep_last"):
        Checkpointer("memory://unused", CheckpointConfig(keep_last=0))
