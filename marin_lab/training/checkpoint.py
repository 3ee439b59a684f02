"""Checkpoints under `{output_path}/checkpoints/step-NNNNNN/`, complete only with a COMPLETE marker.

Layout of one checkpoint: `arrays/NNNNN.npy` (one file per pytree leaf, in flattening order),
`index.json` (each leaf's path name, shape and dtype), `metadata.json` (step, model shape, data
position, anything the trainer adds) and `COMPLETE`, written last. A reader ignores a folder
without COMPLETE, so a crash mid-save leaves the previous checkpoint in charge. Deleting an old
checkpoint removes COMPLETE first for the same reason.

Policies: save every `save_every_steps` steps, and also when `save_interval_s` seconds passed since
the last save (the clock is injected so tests never sleep). Keep the newest `keep_last`;
checkpoints at multiples of `keep_every_steps` are never deleted.
"""

from __future__ import annotations

from marin_lab.errors import MarinLabError

import dataclasses
import io
import json
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import numpy as np

from marin_lab.io import fs as mfs

logger = logging.getLogger(__name__)

_STEP_DIR = re.compile(r"step-(\d+)$")
_IO_THREADS = 8


class CheckpointError(MarinLabError, ValueError):
    """A checkpoint is missing, incomplete, or does not fit the model being trained."""


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """When to save checkpoints and which to keep."""

    save_every_steps: int | None = 1000
    """Save at every multiple of this step count (None: never by step count)."""
    save_interval_s: float | None = 600.0
    """Also save when this many seconds passed since the last save (None: never by time)."""
    keep_last: int = 2
    """Keep this many newest checkpoints (at least 1)."""
    keep_every_steps: int | None = None
    """Checkpoints at multiples of this are permanent and never deleted."""
    save_final: bool = True
    """Save at the last step whatever the policies say."""


def step_dir(root: str, step: int) -> str:
    return mfs.join(root, f"step-{step:06d}")


def _leaf_name(path: tuple) -> str:
    return jax.tree_util.keystr(path)


def _to_savable(arr: np.ndarray) -> tuple[np.ndarray, str]:
    # bfloat16 and friends are not native numpy dtypes; store their bits.
    if arr.dtype.kind == "V" or arr.dtype.name not in np.sctypeDict:
        return arr.view(np.uint16 if arr.dtype.itemsize == 2 else np.uint8), arr.dtype.name
    return arr, arr.dtype.name


def list_checkpoints(root: str) -> list[tuple[int, str]]:
    """(step, path) of every complete checkpoint under root, oldest first."""
    fs, path = mfs.fs_and_path(root)
    if not fs.exists(path):
        return []
    out = []
    for entry in fs.ls(path, detail=False):
        m = _STEP_DIR.search(entry.rstrip("/"))
        if m and fs.exists(f"{entry.rstrip('/')}/COMPLETE"):
            out.append((int(m.group(1)), step_dir(root, int(m.group(1)))))
    return sorted(out)


def latest_checkpoint(root: str) -> str | None:
    found = list_checkpoints(root)
    return found[-1][1] if found else None


def resolve_checkpoint(path: str) -> str:
    """A checkpoint folder, or the latest complete one under a `checkpoints/` root or run output."""
    if mfs.exists(mfs.join(path, "COMPLETE")):
        return path
    for root in (path, mfs.join(path, "checkpoints")):
        found = latest_checkpoint(root)
        if found:
            return found
    raise CheckpointError(
        f"no complete checkpoint at {path} (looked for COMPLETE there, under it and under "
        f"{mfs.join(path, 'checkpoints')}); point at a train step's output or a step-NNNNNN folder"
    )


def save_checkpoint(path: str, state: Any, metadata: dict[str, Any]) -> None:
    """Write `state` (a pytree of arrays) and metadata to `path`; COMPLETE last."""
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    host = jax.device_get([leaf for _, leaf in leaves])

    def write(i: int) -> dict[str, Any]:
        arr, dtype = _to_savable(np.asarray(host[i]))
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        mfs.atomic_write_bytes(mfs.join(path, "arrays", f"{i:05d}.npy"), buf.getvalue())
        return {"name": _leaf_name(leaves[i][0]), "shape": list(arr.shape), "dtype": dtype}

    # Leaves are independent files: write them concurrently (I/O and fsync dominate).
    with ThreadPoolExecutor(max_workers=_IO_THREADS) as pool:
        index = list(pool.map(write, range(len(leaves))))
    mfs.write_json(mfs.join(path, "index.json"), {"leaves": index})
    mfs.write_json(mfs.join(path, "metadata.json"), metadata)
    mfs.atomic_write_text(mfs.join(path, "COMPLETE"), json.dumps({"time": time.time()}))


def _read_leaf(path: str, i: int, dtype: str) -> np.ndarray:
    arr = np.load(io.BytesIO(mfs.read_bytes(mfs.join(path, "arrays", f"{i:05d}.npy"))))
    if arr.dtype.name != dtype:  # stored as raw bits (bfloat16 and other ml_dtypes)
        arr = arr.view(np.dtype(dtype) if dtype in np.sctypeDict else jax.numpy.dtype(dtype))
    return arr


def read_metadata(path: str) -> dict[str, Any]:
    return mfs.read_json(mfs.join(path, "metadata.json"))


def load_checkpoint(path: str, template: Any, shardings: Any = None) -> Any:
    """Arrays of the checkpoint at `path`, in the structure of `template` (checked leaf by leaf)."""
    if not mfs.exists(mfs.join(path, "COMPLETE")):
        raise CheckpointError(f"checkpoint {path} has no COMPLETE marker; it was not fully written")
    index = mfs.read_json(mfs.join(path, "index.json"))["leaves"]
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    if len(index) != len(leaves):
        raise CheckpointError(
            f"checkpoint {path} holds {len(index)} arrays but the model/optimizer being trained "
            f"has {len(leaves)}; it comes from a different model or optimizer configuration"
        )
    for (kpath, leaf), entry in zip(leaves, index):
        name = _leaf_name(kpath)
        if entry["name"] != name or tuple(entry["shape"]) != tuple(np.shape(leaf)):
            raise CheckpointError(
                f"checkpoint {path}: array {entry['name']} has shape {tuple(entry['shape'])} but "
                f"the model expects {name} with shape {tuple(np.shape(leaf))}; the checkpoint "
                "comes from a different model shape (check the `model` config)"
            )

    def read(i: int) -> np.ndarray:
        return _read_leaf(path, i, index[i]["dtype"])

    with ThreadPoolExecutor(max_workers=_IO_THREADS) as pool:
        values = list(pool.map(read, range(len(index))))
    restored = jax.tree_util.tree_unflatten(treedef, values)
    if shardings is not None:
        return jax.device_put(restored, shardings)
    return jax.tree_util.tree_map(jax.numpy.asarray, restored)


def load_params(path: str, template_params: Any) -> Any:
    """Only the `params` subtree of a training checkpoint (for evaluation and export)."""
    path = resolve_checkpoint(path)
    index = mfs.read_json(mfs.join(path, "index.json"))["leaves"]
    by_name = {entry["name"]: (i, entry) for i, entry in enumerate(index)}
    leaves, treedef = jax.tree_util.tree_flatten_with_path({"params": template_params})
    values = []
    for kpath, leaf in leaves:
        name = _leaf_name(kpath)
        if name not in by_name or tuple(by_name[name][1]["shape"]) != tuple(np.shape(leaf)):
            found = tuple(by_name[name][1]["shape"]) if name in by_name else "nothing"
            raise CheckpointError(
                f"checkpoint {path}: expected {name} with shape {tuple(np.shape(leaf))}, found "
                f"{found}; it comes from a different model shape"
            )
        i, entry = by_name[name]
        values.append(jax.numpy.asarray(_read_leaf(path, i, entry["dtype"])))
    return jax.tree_util.tree_unflatten(treedef, values)["params"]


class Checkpointer:
    """Applies the save/keep policies of a CheckpointConfig to one checkpoints root."""

    def __init__(self, root: str, config: CheckpointConfig, clock: Callable[[], float] = time.monotonic):
        if config.keep_last < 1:
            raise CheckpointError(f"checkpoint.keep_last={config.keep_last} must be at least 1")
        self.root, self.config, self.clock = root, config, clock
        self._last_save_time = clock()

    def should_save(self, step: int, *, is_last: bool = False) -> bool:
        c = self.config
        if is_last and c.save_final:
            return True
        if c.save_every_steps and step % c.save_every_steps == 0:
            return True
        return c.save_interval_s is not None and self.clock() - self._last_save_time >= c.save_interval_s

    def save(self, step: int, state: Any, metadata: dict[str, Any]) -> str:
        path = step_dir(self.root, step)
        started = self.clock()
        save_checkpoint(path, state, {**metadata, "step": step})
        self._last_save_time = self.clock()
        logger.info("saved checkpoint %s in %.2fs", path, self._last_save_time - started)
        self._prune()
        return path

    def _prune(self) -> None:
        found = list_checkpoints(self.root)
        keep_every = self.config.keep_every_steps
        removable = [(s, p) for s, p in found[: -self.config.keep_last]
                     if not (keep_every and s % keep_every == 0)]
        for _step, path in removable:
            mfs.remove(mfs.join(path, "COMPLETE"))
            mfs.remove(path, recursive=True)
