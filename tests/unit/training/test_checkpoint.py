"""Checkpoints: exact round trip, COMPLETE marker, keep policies, time-based saves, shape checks,
damaged complete checkpoints (lost or cut array files, unparsable index) named in one line."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_lab.training.checkpoint import (
    CheckpointConfig,
    Checkpointer,
    CheckpointError,
    DamagedCheckpointError,
    iter_arrays,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_params,
    read_metadata,
    resolve_checkpoint,
    save_checkpoint,
)


def _state(scale=1.0):
    return {
        "params": {"w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3) * scale, "h": jnp.ones(4, jnp.bfloat16) * scale},
        "step": jnp.asarray(3, jnp.int32),
    }


def _bytes(tree):
    return [np.asarray(x).tobytes() for x in jax.tree_util.tree_leaves(tree)]


def test_round_trip_is_bit_exact_and_partial_reads_match(tmp_path):
    path = str(tmp_path / "c")
    state = _state(1.37)
    save_checkpoint(path, state, {"step": 3})
    back = load_checkpoint(path, jax.eval_shape(lambda: _state(0.0)))
    assert back["params"]["h"].dtype == jnp.bfloat16
    assert _bytes(back) == _bytes(state)
    params = load_params(path, jax.eval_shape(lambda: _state()["params"]))
    assert _bytes(params) == _bytes(state["params"])
    leaves = dict(iter_arrays(path))
    assert sorted(leaves) == [("h",), ("w",)] and isinstance(leaves[("w",)], np.ndarray)
    assert leaves[("h",)].tobytes() == np.asarray(state["params"]["h"]).tobytes()


def test_incomplete_checkpoint_is_never_restored(tmp_path):
    root = str(tmp_path)
    save_checkpoint(f"{root}/step-000002", _state(), {"step": 2})
    save_checkpoint(f"{root}/step-000004", _state(), {"step": 4})
    (tmp_path / "step-000004" / "COMPLETE").unlink()  # as if a host died before the marker
    assert latest_checkpoint(root) == f"{root}/step-000002"
    with pytest.raises(CheckpointError, match="COMPLETE"):
        load_checkpoint(f"{root}/step-000004", _state())
    assert resolve_checkpoint(root) == f"{root}/step-000002"


def test_shape_mismatch_names_the_array(tmp_path):
    save_checkpoint(str(tmp_path), _state(), {"step": 3})
    other = {"params": {"w": jnp.zeros((3, 3)), "h": jnp.ones(4, jnp.bfloat16)}, "step": jnp.asarray(0)}
    with pytest.raises(CheckpointError, match=r"\['params'\]\['w'\] with shape \(3, 3\).*different model shape"):
        load_checkpoint(str(tmp_path), other)


def test_an_old_npy_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / "arrays").mkdir()
    (tmp_path / "index.json").write_text('{"leaves": []}')
    (tmp_path / "COMPLETE").write_text("{}")
    with pytest.raises(CheckpointError, match="older marin_lab"):
        load_checkpoint(str(tmp_path), _state())


def test_memory_filesystem_is_refused_up_front():
    with pytest.raises(CheckpointError, match="local paths and gs://"):
        Checkpointer("memory://run/checkpoints", CheckpointConfig())


def test_keep_last_permanent_steps_and_dead_partial_saves(tmp_path):
    ck = Checkpointer(
        str(tmp_path),
        CheckpointConfig(save_every_steps=1, save_interval_s=None, keep_last=2, keep_every_steps=3),
        clock=FakeClock(),
    )
    (tmp_path / "step-000001" / "state").mkdir(parents=True)  # a save that died on some host
    for step in range(2, 8):
        ck.save(step, _state(), {})
    # Newest two (6, 7) plus the permanent multiple of 3 that fell out of the window (3).
    assert [s for s, _ in list_checkpoints(str(tmp_path))] == [3, 6, 7]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000003", "step-000006", "step-000007"]


def test_saving_over_a_dead_partial_save_of_the_same_step(tmp_path):
    (tmp_path / "step-000004" / "state").mkdir(parents=True)
    (tmp_path / "step-000004" / "state" / "junk").write_text("half a shard")
    save_checkpoint(str(tmp_path / "step-000004"), _state(2.0), {"step": 4})
    assert _bytes(load_checkpoint(str(tmp_path / "step-000004"), _state())) == _bytes(_state(2.0))


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_time_based_policy_uses_the_injected_clock(tmp_path):
    clock = FakeClock()
    ck = Checkpointer(
        str(tmp_path), CheckpointConfig(save_every_steps=None, save_interval_s=60, save_final=True), clock=clock
    )
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


def test_step_policy(tmp_path):
    ck = Checkpointer(
        str(tmp_path), CheckpointConfig(save_every_steps=5, save_interval_s=None, save_final=False), clock=FakeClock()
    )
    assert [s for s in range(1, 16) if ck.should_save(s)] == [5, 10, 15]
    with pytest.raises(CheckpointError, match="keep_last"):
        Checkpointer(str(tmp_path), CheckpointConfig(keep_last=0))


@pytest.mark.gcs
def test_gcs_round_trip_and_incomplete_save_ignored(gcs_bucket):
    root = f"{gcs_bucket}/run/checkpoints"
    ck = Checkpointer(root, CheckpointConfig(save_every_steps=1, save_interval_s=None, keep_last=1), clock=FakeClock())
    ck.save(1, _state(1.0), {})
    ck.save(2, _state(2.0), {})
    assert [s for s, _ in list_checkpoints(root)] == [2]
    assert _bytes(load_checkpoint(latest_checkpoint(root), _state())) == _bytes(_state(2.0))
    from marin_lab.io import fs as mfs

    mfs.remove(f"{root}/step-000002/COMPLETE")  # as if a host died before the marker
    assert latest_checkpoint(root) is None


def _two_checkpoints(tmp_path):
    root = tmp_path / "checkpoints"
    save_checkpoint(str(root / "step-000002"), _state(1.0), {"step": 2})
    save_checkpoint(str(root / "step-000004"), _state(2.0), {"step": 4})
    return root


def _largest_array_file(path):
    return max(
        (p for p in (path / "state").rglob("*") if p.is_file() and "/d/" in str(p)), key=lambda p: p.stat().st_size
    )


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_complete_checkpoint_with_a_lost_array_file_is_damaged_and_the_previous_one_offered(tmp_path, damage):
    root = _two_checkpoints(tmp_path)
    victim = _largest_array_file(root / "step-000004")
    if damage == "missing":
        victim.unlink()
    else:
        victim.write_bytes(victim.read_bytes()[:-5])
    with pytest.raises(DamagedCheckpointError) as caught:
        load_checkpoint(latest_checkpoint(str(root)), _state())
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and victim.name in message
    assert ("is missing" if damage == "missing" else "cut short") in message
    assert f"previous complete checkpoint is {root}/step-000002" in message
    # The offer holds: with the damaged folder moved aside, the previous one restores exactly.
    (root / "step-000004").rename(tmp_path / "damaged-step-000004")
    assert _bytes(load_checkpoint(latest_checkpoint(str(root)), _state())) == _bytes(_state(1.0))


def test_an_array_file_damaged_in_place_is_one_line_naming_the_checkpoint(tmp_path):
    root = _two_checkpoints(tmp_path)
    path = root / "step-000004"
    index = json.loads((path / "index.json").read_text())
    del index["files"]  # as written before the index listed its files: only the restore can tell
    (path / "index.json").write_text(json.dumps(index))
    for victim in (path / "state").rglob("*"):
        if victim.is_file() and "/d/" in str(victim):
            victim.write_bytes(b"\0" * victim.stat().st_size)
    with pytest.raises(DamagedCheckpointError) as caught:
        load_checkpoint(str(path), _state())
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and f"checkpoint {path} is damaged" in message
    assert "step-000002" in message


@pytest.mark.parametrize("text", ["{not json", '{"format": "orbax", "leaves": 3}', "[]", '{"format": "orbax"}'])
def test_an_unparsable_index_is_one_clear_line(tmp_path, text):
    root = _two_checkpoints(tmp_path)
    (root / "step-000004" / "index.json").write_text(text)
    with pytest.raises(DamagedCheckpointError) as caught:
        load_checkpoint(str(root / "step-000004"), _state())
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and "index.json" in message and "step-000002" in message
    (root / "step-000004" / "metadata.json").write_text("{cut")
    with pytest.raises(DamagedCheckpointError, match="metadata.json is not readable JSON"):
        read_metadata(str(root / "step-000004"))


@pytest.mark.parametrize("step_fn", ["train_lm", "finetune_lm"])
def test_the_same_state_saved_twice_reproduces_and_a_changed_leaf_does_not(tmp_path, step_fn):
    """orbax names its chunk files at random, so index.json's file list differs between two saves
    of the same arrays; `reproduce` must read that as a run log, and still catch a changed leaf."""
    from marin_lab.execution.record.artifacts import compare_outputs, declaration
    from marin_lab.execution.record.provenance import manifest
    from marin_lab.main.train_lm import train_lm
    from marin_lab.training.finetune import finetune_lm

    declared = declaration({"train_lm": train_lm, "finetune_lm": finetune_lm}[step_fn], None)
    roots = [str(tmp_path / name) for name in ("a", "b", "c")]
    save_checkpoint(f"{roots[0]}/checkpoints/step-000003", _state(), {"step": 3})
    save_checkpoint(f"{roots[1]}/checkpoints/step-000003", _state(), {"step": 3})
    changed = _state()
    changed["params"]["w"] = changed["params"]["w"].reshape(3, 2)
    save_checkpoint(f"{roots[2]}/checkpoints/step-000003", changed, {"step": 3})
    first = json.loads((tmp_path / "a/checkpoints/step-000003/index.json").read_text())
    second = json.loads((tmp_path / "b/checkpoints/step-000003/index.json").read_text())
    assert first["files"] != second["files"]  # what made the two runs look different

    same = compare_outputs(manifest(roots[0]), roots[0], manifest(roots[1]), roots[1], declared)
    assert same.differences == [] and same.excluded
    other = compare_outputs(manifest(roots[0]), roots[0], manifest(roots[2]), roots[2], declared)
    assert other.differences == ["content differs (beyond its volatile fields): checkpoints/step-000003/index.json"]
