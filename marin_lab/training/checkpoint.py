"""Sharded checkpoints under `{output_path}/checkpoints/step-NNNNNN/`, complete only with a marker.

Layout of one checkpoint:

- `state/`: the train state written by orbax-checkpoint (tensorstore underneath). Every process
  writes the shards its devices hold; nothing is gathered to one host. Restore reads, on each
  process, only the pieces its devices need under the *new* shardings, so a checkpoint written on
  2 hosts x 2 devices restores onto 1 x 2 or 4 x 1 (resharding).
- `index.json`: each leaf's path name, shape and dtype, checked against the model before a restore
  so that a checkpoint of another shape is refused with the leaf's name, not an orbax traceback;
  and every file under `state/` with its size, checked before a restore so that a checkpoint whose
  array files were lost or cut after it was completed (a partial copy, a storage clean-up) is
  reported as damaged, naming the file, with the previous complete checkpoint offered.
- `metadata.json`: step, model shape, data position, environment, anything the trainer adds.
- `COMPLETE`: written last, by process 0, after every process finished its shards. A reader
  ignores a folder without it, so a crash mid-save (on any host) leaves the previous checkpoint in
  charge; pruning removes COMPLETE first for the same reason. On `gs://` this marker is what makes
  a save atomic: orbax writes straight into the final folder there (objects cannot be renamed).

A damaged complete checkpoint is not skipped on resume: the run stops with one line naming the
damaged file and the checkpoint it could resume from instead (`DamagedCheckpointError`). Falling
back on its own would hide that storage lost data a completed save had written, would let the
next save at that step delete the evidence, and on several hosts would need every host to agree
on the fallback; moving the damaged folder aside is one command, and resuming from an earlier
checkpoint reaches the same parameters (the data order is a function of the step).

Policies: save every `save_every_steps` steps, and also when `save_interval_s` seconds passed since
the last save (the clock is injected so tests never sleep; with several processes, process 0's
clock decides for all, or they would disagree and deadlock in the collective save). Keep the newest
`keep_last`; checkpoints at multiples of `keep_every_steps` are never deleted.

Storage: local paths and `gs://`. tensorstore does not read `STORAGE_EMULATOR_HOST` (the variable
gcsfs and google-cloud-storage use for an emulator), so it is mirrored into tensorstore's own
`TENSORSTORE_GCS_HTTP_URL` when only the former is set.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

import jax
import numpy as np

from marin_lab.errors import MarinLabError
from marin_lab.io import fs as mfs
from marin_lab.versioning import field_hints

logger = logging.getLogger(__name__)

_STEP_DIR = re.compile(r"step-(\d+)$")
STATE_DIR = "state"
COMPLETE = "COMPLETE"
# For `marin-lab reproduce`, relative to a step's output path: orbax names its chunk files at
# random and stamps times, so the array store (and the file list index.json keeps of it, to catch
# a file cut short) is a run log; the arrays themselves are compared through their checksums in the
# step's summary. The leaves (names, shapes, dtypes) in index.json must match.
RUN_LOG_FILES = (f"checkpoints/*/{STATE_DIR}/*",)
VOLATILE_FIELDS = {f"checkpoints/*/{COMPLETE}": ("time",), "checkpoints/*/index.json": ("files",)}


class CheckpointError(MarinLabError, ValueError):
    """A checkpoint is missing, incomplete, or does not fit the model being trained."""


class DamagedCheckpointError(CheckpointError):
    """A checkpoint marked complete whose files are missing, cut short or unreadable."""

    def __init__(self, path: str, problem: str, previous: str | None = None):
        self.path, self.problem = path, problem
        # "" (as pickled) means "looked: there is none"; None means "not looked yet".
        self.previous = _previous_complete(path) if previous is None else (previous or None)
        offer = (
            f"the previous complete checkpoint is {self.previous}: move {path} aside (or delete it) "
            "and start again to resume from there"
            if self.previous
            else f"there is no earlier complete checkpoint: delete {path} to start the run afresh"
        )
        super().__init__(f"checkpoint {path} is damaged: {problem}; {offer}")

    def __reduce__(self):  # crosses process boundaries (Ray) as it was, without listing storage again
        return (type(self), (self.path, self.problem, self.previous or ""))


@field_hints
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


def _is_primary() -> bool:
    return jax.process_index() == 0


def _sync(tag: str) -> None:
    """Every process waits here for the others (a no-op with one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(tag)


def check_storage(url: str, what: str = "checkpoint path") -> None:
    """Refuse storage orbax cannot write before a run starts (e.g. fsspec's memory://)."""
    if "://" in url and not url.startswith(("gs://", "file://")):
        raise CheckpointError(
            f"{what} {url!r}: sharded checkpoints are written by tensorstore, which supports local "
            "paths and gs:// here; use one of those for the output path"
        )


def _orbax_path(url: str) -> str:
    if os.environ.get("STORAGE_EMULATOR_HOST") and not os.environ.get("TENSORSTORE_GCS_HTTP_URL"):
        os.environ["TENSORSTORE_GCS_HTTP_URL"] = os.environ["STORAGE_EMULATOR_HOST"]
    url = url.removeprefix("file://")
    return url if "://" in url else os.path.abspath(url)


def _leaf_name(path: tuple) -> str:
    return jax.tree_util.keystr(path)


def list_checkpoints(root: str) -> list[tuple[int, str]]:
    """(step, path) of every complete checkpoint under root, oldest first."""
    return [(s, p) for s, p, complete in _step_dirs(root) if complete]


def _step_dirs(root: str) -> list[tuple[int, str, bool]]:
    """(step, path, complete) of every step folder under root, oldest first."""
    fs, path = mfs.fs_and_path(root)
    if not fs.exists(path):
        return []
    found = []
    for entry in fs.ls(path, detail=False):
        m = _STEP_DIR.search(entry.rstrip("/"))
        if m:
            step = int(m.group(1))
            found.append((step, step_dir(root, step), fs.exists(f"{entry.rstrip('/')}/{COMPLETE}")))
    return sorted(found)


def _step_number(path: str) -> int:
    """The N of a `.../step-N` checkpoint folder (which `list_checkpoints` only ever returns)."""
    match = _STEP_DIR.search(path.rstrip("/"))
    if match is None:
        raise CheckpointError(f"{path}: not a step-N checkpoint folder")
    return int(match.group(1))


def latest_checkpoint(root: str) -> str | None:
    found = list_checkpoints(root)
    return found[-1][1] if found else None


def agreed_latest_checkpoint(root: str) -> str | None:
    """The latest complete checkpoint as process 0 sees it, on every process.

    Each process lists storage itself; were a marker to land between two listings, hosts would
    restore different steps. Broadcasting process 0's answer rules that out.
    """
    found = latest_checkpoint(root)
    if jax.process_count() == 1:
        return found
    from jax.experimental import multihost_utils

    step = int(multihost_utils.broadcast_one_to_all(np.int32(-1 if found is None else _step_number(found))))
    return None if step < 0 else step_dir(root, step)


def resolve_checkpoint(path: str) -> str:
    """A checkpoint folder, or the latest complete one under a `checkpoints/` root or run output."""
    if mfs.exists(mfs.join(path, COMPLETE)):
        return path
    for root in (path, mfs.join(path, "checkpoints")):
        found = latest_checkpoint(root)
        if found:
            return found
    raise CheckpointError(
        f"no complete checkpoint at {path} (looked for {COMPLETE} there, under it and under "
        f"{mfs.join(path, 'checkpoints')}); point at a train step's output or a step-NNNNNN folder"
    )


@functools.lru_cache(maxsize=1)
def _orbax() -> Any:
    import orbax.checkpoint as ocp

    return ocp


def save_checkpoint(
    path: str, state: Any, metadata: dict[str, Any], *, max_bytes_in_flight: int | None = None, compress: bool = True
) -> None:
    """Write `state` (a pytree of jax arrays) and metadata to `path`; COMPLETE last.

    Every process must call this (the save is collective); each writes only its own shards.
    `max_bytes_in_flight`: at most this many bytes copied to host memory for writing at once (at
    least the largest leaf); default: orbax's (all leaves at once, fastest). `compress=False`
    writes the chunks without zstd, whose buffers otherwise cost about a leaf of memory more: for
    data that hardly compresses (NF4 codes, bf16 weights). Either way restores the same.
    """
    check_storage(path)
    ocp = _orbax()
    if _is_primary() and mfs.exists(path):
        # A folder left by an attempt that died mid-save: never let it look complete, then clear it.
        mfs.remove(mfs.join(path, COMPLETE))
        mfs.remove(path, recursive=True)
    _sync(f"marin-checkpoint-clear:{path}")
    if max_bytes_in_flight is None and compress:
        handler, args = ocp.StandardCheckpointHandler(), ocp.args.StandardSave(state)
    else:  # the same format (StandardCheckpointHandler is this handler underneath), bounded transfers
        gb = None if max_bytes_in_flight is None else (max_bytes_in_flight // 10**6 + 1) / 10**3  # GB, rounded up
        handler = ocp.PyTreeCheckpointHandler(
            save_concurrent_gb=gb, save_device_host_concurrent_gb=gb, use_compression=compress
        )
        args = ocp.args.PyTreeSave(state)
    with ocp.Checkpointer(handler) as checkpointer:
        # Synchronous: returns once every process's shards are written and orbax's commit is done.
        checkpointer.save(_orbax_path(mfs.join(path, STATE_DIR)), args=args, force=True)
    if _is_primary():
        leaves = jax.tree_util.tree_flatten_with_path(state)[0]
        index = [
            {"name": _leaf_name(k), "shape": list(np.shape(v)), "dtype": np.dtype(v.dtype).name} for k, v in leaves
        ]
        files = dict(mfs.list_files(mfs.join(path, STATE_DIR)))
        mfs.write_json(mfs.join(path, "index.json"), {"leaves": index, "format": "orbax", "files": files})
        mfs.write_json(mfs.join(path, "metadata.json"), metadata)
        mfs.atomic_write_text(mfs.join(path, COMPLETE), json.dumps({"time": time.time()}))


def read_metadata(path: str) -> dict[str, Any]:
    meta = _read_json_file(path, "metadata.json")
    if not isinstance(meta, dict):
        raise DamagedCheckpointError(path, f"metadata.json holds {type(meta).__name__}, not an object")
    return meta


def _read_json_file(path: str, name: str) -> Any:
    url = mfs.join(path, name)
    try:
        return mfs.read_json(url)
    except FileNotFoundError:
        raise DamagedCheckpointError(path, f"{name} is missing") from None
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise DamagedCheckpointError(path, f"{name} is not readable JSON ({err})") from None


def _previous_complete(path: str) -> str | None:
    """The newest complete checkpoint older than `path` in the same root, if any."""
    match = _STEP_DIR.search(path.rstrip("/"))
    if not match:
        return None
    root = path.rstrip("/").rsplit("/", 1)[0]
    try:
        older = [p for s, p in list_checkpoints(root) if s < int(match.group(1))]
    except OSError:
        return None
    return older[-1] if older else None


def _read_index(path: str, *, check_files: bool = True) -> dict[str, dict[str, Any]]:
    if not mfs.exists(mfs.join(path, COMPLETE)):
        raise CheckpointError(f"checkpoint {path} has no {COMPLETE} marker; it was not fully written")
    if not mfs.exists(mfs.join(path, "index.json")) or not mfs.exists(mfs.join(path, STATE_DIR)):
        raise CheckpointError(
            f"checkpoint {path} is not a sharded (orbax) checkpoint: it was written by an older "
            "marin_lab (one .npy per leaf); resume it with that version, or start the run afresh"
        )
    index = _read_json_file(path, "index.json")
    leaves = index.get("leaves") if isinstance(index, dict) else None
    if (
        not isinstance(leaves, list)
        or index.get("format") != "orbax"
        or not all(
            isinstance(e, dict)
            and isinstance(e.get("name"), str)
            and isinstance(e.get("shape"), list)
            and isinstance(e.get("dtype"), str)
            for e in leaves
        )
    ):
        raise DamagedCheckpointError(
            path,
            'index.json is not an index of arrays (expected {"format": "orbax", "leaves": '
            '[{"name", "shape", "dtype"}, ...]})',
        )
    if check_files:
        _check_files(path, index.get("files"))
    return {entry["name"]: entry for entry in leaves}


def _check_files(path: str, recorded: Any) -> None:
    """Every file the save wrote under state/ is there with its size (checkpoints saved before the
    index listed its files are checked by the restore alone)."""
    if not isinstance(recorded, dict):
        return
    found = dict(mfs.list_files(mfs.join(path, STATE_DIR)))
    for rel, size in sorted(recorded.items()):
        url = mfs.join(path, STATE_DIR, rel)
        if rel not in found:
            raise DamagedCheckpointError(path, f"its array file {url} is missing")
        if found[rel] != size:
            raise DamagedCheckpointError(
                path, f"its array file {url} holds {found[rel]} bytes, {size} were written (cut short or overwritten)"
            )


def _first_line(err: BaseException) -> str:
    """An error's first line: orbax appends pages of internal spec to what went wrong."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}"


def _check_against(path: str, index: dict[str, dict[str, Any]], target: Any, *, exact: bool) -> None:
    leaves = jax.tree_util.tree_flatten_with_path(target)[0]
    if exact and len(index) != len(leaves):
        raise CheckpointError(
            f"checkpoint {path} holds {len(index)} arrays but the model/optimizer being trained "
            f"has {len(leaves)}; it comes from a different model or optimizer configuration"
        )
    # By keys, not spelling: a registered node's field (".packed") may be read as a dict entry ("['packed']").
    by_keys = {leaf_keys(n): e for n, e in index.items()}
    for kpath, leaf in leaves:
        name = _leaf_name(kpath)
        entry = by_keys.get(leaf_keys(name))
        if entry is None or tuple(entry["shape"]) != tuple(np.shape(leaf)):
            found = f"shape {tuple(entry['shape'])}" if entry else "no such array"
            raise CheckpointError(
                f"checkpoint {path}: the model expects {name} with shape {tuple(np.shape(leaf))} but "
                f"the checkpoint holds {found}; it comes from a different model shape (check the "
                "`model` config)"
            )


def _abstract(target: Any) -> Any:
    """ShapeDtypeStructs (keeping any sharding) for a tree of arrays or ShapeDtypeStructs."""

    def one(x: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=getattr(x, "sharding", None))

    return jax.tree_util.tree_map(one, target)


def load_checkpoint(path: str, target: Any) -> Any:
    """The state at `path`, laid out as `target` says (its shapes and shardings: any mesh).

    `target` is the state's abstract tree (`jax.ShapeDtypeStruct` with `sharding`, e.g. from
    `jax.eval_shape` of the sharded init function) or arrays carrying their shardings. Every
    process calls this and receives only the pieces its devices hold.
    """
    index = _read_index(path)
    _check_against(path, index, target, exact=True)
    ocp = _orbax()
    with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as checkpointer:
        try:
            return checkpointer.restore(
                _orbax_path(mfs.join(path, STATE_DIR)), args=ocp.args.StandardRestore(_abstract(target))
            )
        except Exception as err:  # orbax and tensorstore raise many types for unreadable data
            raise DamagedCheckpointError(path, f"its arrays could not be read ({_first_line(err)})") from err


def load_subtree(path: str, key: str, target: Any, *, this_process_only: bool = False, check_files: bool = True) -> Any:
    """Only `state[key]` (e.g. "params") of the checkpoint at `path`, laid out as `target`.

    Collective (every process calls it) unless `this_process_only`: then this process reads alone,
    e.g. process 0 exporting or hashing while the other hosts have finished.
    """
    index = _read_index(path, check_files=check_files)
    _check_against(path, index, {key: target}, exact=False)
    ocp = _orbax()
    abstract = _abstract(target)
    restore_args = jax.tree_util.tree_map(
        lambda a: (
            ocp.ArrayRestoreArgs(sharding=a.sharding)
            if a.sharding is not None
            else ocp.RestoreArgs(restore_type=np.ndarray)
        ),
        abstract,
    )
    options = {}
    if this_process_only and jax.process_count() > 1:
        me = jax.process_index()
        mp = ocp.options.MultiprocessingOptions(
            primary_host=me, active_processes={me}, barrier_sync_key_prefix=f"solo{me}"
        )
        options = {"multiprocessing_options": mp}
    with ocp.Checkpointer(ocp.PyTreeCheckpointHandler(**options), **options) as checkpointer:
        try:
            restored = checkpointer.restore(
                _orbax_path(mfs.join(path, STATE_DIR)),
                args=ocp.args.PyTreeRestore(
                    item={key: abstract}, restore_args={key: restore_args}, partial_restore=True
                ),
            )
        except Exception as err:  # orbax and tensorstore raise many types for unreadable data
            raise DamagedCheckpointError(path, f"its arrays could not be read ({_first_line(err)})") from err
    return restored[key]


def load_params(path: str, template_params: Any) -> Any:
    """The `params` subtree of a training checkpoint (for evaluation), on this process's devices.

    Leaves of `template_params` with a sharding are restored as jax arrays with it; without one, on
    the default device. Arrays go straight from storage into their buffers: one copy, not two.
    """
    path = resolve_checkpoint(path)
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=getattr(x, "sharding", None) or device),
        template_params,
    )
    return load_subtree(path, "params", target)


_KEY = re.compile(r"\['([^']*)'\]|\.([A-Za-z_]\w*)")


def leaf_keys(name: str) -> tuple[str, ...]:
    """The keys of an index entry's name, dict keys and attribute names alike: "['params']['layers']
    ['wq'].packed" (an NF4Tensor's field, as `quantize_base` writes them) -> ("params", "layers", "wq", "packed")."""
    return tuple(a or b for a, b in _KEY.findall(name))


def iter_arrays(
    path: str, key: str = "params", names: Collection[str] | None = None
) -> Iterator[tuple[tuple[str, ...], np.ndarray]]:
    """(keys below `key`, numpy array) of `state[key]`, one leaf at a time, read by this process
    alone (the others need not take part); with `names` ("embed", "layers/wq/packed"), only those.

    Peak memory is the largest leaf, not the tree: for exporting a model no host could hold twice.
    A leaf inside a registered node (an NF4Tensor's `packed`) is read as a dict entry of its field:
    orbax stores such nodes by their field names.
    """
    path = resolve_checkpoint(path)
    index = _read_index(path)
    wanted = None if names is None else set(names)
    for name in index:
        keys = leaf_keys(name)
        if not keys or keys[0] != key or (wanted is not None and "/".join(keys[1:]) not in wanted):
            continue
        entry = index[name]
        leaf: Any = jax.ShapeDtypeStruct(tuple(entry["shape"]), np.dtype(entry["dtype"]))
        for k in reversed(keys[1:]):
            leaf = {k: leaf}
        value = load_subtree(path, key, leaf, this_process_only=True, check_files=False)  # checked above
        for k in keys[1:]:
            value = value[k]
        yield keys[1:], np.asarray(value)


class Checkpointer:
    """Applies the save/keep policies of a CheckpointConfig to one checkpoints root."""

    def __init__(self, root: str, config: CheckpointConfig, clock: Callable[[], float] = time.monotonic):
        if config.keep_last < 1:
            raise CheckpointError(f"checkpoint.keep_last={config.keep_last} must be at least 1")
        check_storage(root)
        self.root, self.config, self.clock = root, config, clock
        self._last_save_time = clock()

    def should_save(self, step: int, *, is_last: bool = False) -> bool:
        c = self.config
        if (is_last and c.save_final) or (c.save_every_steps and step % c.save_every_steps == 0):
            return True  # step-based: every process reaches the same answer on its own
        if c.save_interval_s is None:
            return False
        due = self.clock() - self._last_save_time >= c.save_interval_s
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            due = bool(multihost_utils.broadcast_one_to_all(np.bool_(due)))
        return due

    def save(self, step: int, state: Any, metadata: dict[str, Any]) -> str:
        path = step_dir(self.root, step)
        started = self.clock()
        save_checkpoint(path, state, {**metadata, "step": step})
        self._last_save_time = self.clock()
        logger.info("saved checkpoint %s in %.2fs", path, self._last_save_time - started)
        if _is_primary():
            self._prune(step)
        return path

    def _prune(self, saved_step: int) -> None:
        found = _step_dirs(self.root)
        complete = [(s, p) for s, p, ok in found if ok]
        keep_every = self.config.keep_every_steps
        removable = [(s, p) for s, p in complete[: -self.config.keep_last] if not (keep_every and s % keep_every == 0)]
        # Folders without COMPLETE older than the checkpoint just saved are leftovers of saves
        # that died; nobody will finish them.
        removable += [(s, p) for s, p, ok in found if not ok and s < saved_step]
        for _step, path in removable:
            mfs.remove(mfs.join(path, COMPLETE))
            mfs.remove(path, recursive=True)
