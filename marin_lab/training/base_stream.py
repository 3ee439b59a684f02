"""Load a fine-tune's frozen base straight into its final placement, one tensor at a time.

The whole-model path (`hf_import.import_hf` -> arrays on one device -> quantize -> reshard) holds
the model several times over in host memory (fp32 copies) and the whole base on one device; at
70B neither fits anywhere. Here the target is known first — the frozen tree's abstract shapes and
the shardings the compiled step takes (`finetune_state.frozen_shardings`) — and the base is
poured into it:

- every stacked leaf `layers/<name>` [L, ...] is allocated once in its final sharding (each
  device holds only its shard), then filled layer by layer with a donated `dynamic_update_slice`
  (XLA updates the buffer in place);
- each weight is one ranged read of the safetensors file (`safetensors_reader`, any fsspec URL),
  sent to this process's first device in its stored dtype (bf16: half the bytes of fp32),
  quantized to NF4 there, and the packed layer (a quarter of the bf16 bytes) scattered from host
  values to the devices that own its blocks; host memory holds one tensor at a time, no device
  more than its shards plus one matrix being quantized;
- the embedding and head arrive in pieces of at most CHUNK_BYTES along their contiguous axis;
- leaves the base keeps in host memory (`offload_base`: `pinned_host` shardings) are filled into
  per-device host buffers instead, handed to the runtime one shard at a time at the end, so a
  projection never passes through device memory;
- a base already quantized by `quantize_base` is restored by orbax directly into the same
  shardings (`checkpoint.load_params` with sharded targets).

Quantization runs matrix by matrix with the same compiled function as `quantize_params`, so the
bytes equal the whole-model path's (tests compare them).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from marin_lab.models.llama import LlamaConfig, Params, flatten_params, init_params, unflatten_params
from marin_lab.quant.nf4 import NF4Tensor
from marin_lab.training import checkpoint as ckpt
from marin_lab.training.base_model import QuantConfig, base_checkpoint, quantize_one, quantize_params
from marin_lab.training.errors import TrainingError
from marin_lab.training.hf_export import _LAYER_MAP
from marin_lab.training.hf_import import is_hf_checkpoint, open_hf
from marin_lab.training.offload import HOST, OnHost
from marin_lab.training.safetensors_reader import DTYPES, SafetensorsIndex

logger = logging.getLogger(__name__)

CHUNK_BYTES = 8 * 2**20
"""Largest piece of a top-level tensor (embedding, head) in host memory at once."""


class TensorGetter:
    """Our tensors from a base, in our layout ([in, out]), in their stored dtype.

    `__call__(name, layer)` gives a decoder weight of one layer (or a small top-level one);
    `piece(name, axis, start, stop)` gives a slice of a top-level tensor along `axis`, the axis
    along which the storage is contiguous (`contiguous_axis`), so a vocabulary-sized embedding
    never sits in host memory whole.
    """

    def __call__(self, name: str, layer: int | None) -> np.ndarray:
        raise NotImplementedError

    def shape(self, name: str) -> tuple[int, ...]:
        raise NotImplementedError

    def contiguous_axis(self, name: str) -> int:
        return 0

    def stored_dtype(self, name: str) -> np.dtype | None:
        """The dtype `name` ("embed", "layers/attn_norm") is stored in; None when unknown."""
        return None

    def piece(self, name: str, axis: int, start: int, stop: int) -> np.ndarray:
        whole = self(name, None)
        return whole[(slice(None),) * axis + (slice(start, stop),)]


@functools.lru_cache(maxsize=1)
def _large_buffers_by_mmap() -> bool:
    """Make glibc serve every buffer of 1 MiB or more by mmap, returned to the OS when freed.

    The load frees one tensor-sized buffer per tensor. By default glibc raises its mmap threshold
    after the first such free (up to 32 MiB), so later tensor buffers come from its heap, where
    interleaved small allocations pin them: measured on a 0.31 GiB checkpoint, resident memory
    then grows by ~8 MiB per piece read instead of staying flat. Process-wide and harmless
    elsewhere (large arrays are mmapped either way at first); a no-op without glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, 1 << 20))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False


def _release_freed_memory() -> None:
    """Hand memory glibc keeps after frees back to the OS (a no-op without glibc): small pieces
    freed between a leaf's allocations otherwise stay resident, ~0.1 GiB by the end of a 0.85B base."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _spec(sharding: NamedSharding, ndim: int) -> tuple:
    spec = tuple(sharding.spec)
    return spec + (None,) * (ndim - len(spec))


def _zeros(shape: tuple[int, ...], dtype: Any, sharding: NamedSharding) -> jax.Array:
    """Zeros in `sharding`, each device's shard from untouched (calloc'd) host pages: no compiled
    program per shape, no resident host copy."""
    return jax.make_array_from_callback(shape, sharding, lambda idx: np.zeros(sharding.shard_shape(shape), dtype))


@functools.cache
def _updater(sharding: NamedSharding, axis: int) -> Callable:
    """stack, piece, start -> stack with the piece written at `start` along `axis`, in place (donated)."""

    def update(stack: jax.Array, value: jax.Array, start: jax.Array) -> jax.Array:
        if axis == 0 and value.ndim == stack.ndim - 1:  # one layer of a [L, ...] stack
            value = value[None]
        starts = [jnp.zeros((), jnp.int32)] * stack.ndim
        starts[axis] = start.astype(jnp.int32)
        return jax.lax.dynamic_update_slice(stack, value.astype(stack.dtype), starts)

    return jax.jit(update, out_shardings=sharding, donate_argnums=0)


class _Stack:
    """One leaf filled piece by piece where it will live: a [L, ...] stack one layer at a time
    (`axis` 0), or a top-level tensor a slice at a time along `axis`."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, sharding: NamedSharding, axis: int | None = None):
        self.shape, self.dtype, self.sharding = tuple(shape), jnp.dtype(dtype), sharding
        self.layered = axis is None
        self.axis = 0 if axis is None else axis
        spec = _spec(sharding, len(shape))
        if self.layered and spec[0] is not None:
            raise ValueError(f"a layer stack sharded along its layer axis ({sharding.spec}) cannot be filled by layer")
        self.on_host = sharding.memory_kind == HOST
        if self.on_host:
            # Host-resident leaves never pass through device memory: one numpy buffer per device.
            self.buffers: dict[Any, tuple[tuple[slice, ...], np.ndarray]] = {}
            for d, idx in sharding.addressable_devices_indices_map(self.shape).items():
                if idx is None:  # JAX's annotation allows it; a NamedSharding gives every device its slices
                    raise ValueError(f"sharding {sharding} gives device {d} no slices of {self.shape}")
                self.buffers[d] = (idx, np.empty(sharding.shard_shape(self.shape), self.dtype))
        else:
            # A layer arrives split as its stack is; a slice of a top-level tensor arrives whole on
            # every device (it is small) and each keeps its part.
            piece_spec = P(*spec[1:]) if self.layered else P()
            self.piece_sharding = NamedSharding(sharding.mesh, piece_spec)
            self.array = _zeros(self.shape, self.dtype, sharding)

    def put(self, start: int, value: Any) -> None:
        if self.on_host:
            host = np.asarray(value)
            if self.layered:
                host = host[None]
            for idx, buf in self.buffers.values():
                lo = idx[self.axis].start or 0
                hi = idx[self.axis].stop if idx[self.axis].stop is not None else self.shape[self.axis]
                a, b = max(start, lo), min(start + host.shape[self.axis], hi)
                if a >= b:
                    continue
                src = list(idx)
                src[self.axis] = slice(a - start, b - start)
                dst = [slice(None)] * len(self.shape)
                dst[self.axis] = slice(a - lo, b - lo)
                buf[tuple(dst)] = host[tuple(src)]
        else:
            # Through host memory (a layer of NF4 or a small slice): a global sharding spanning
            # several processes takes host values, which every process has alike.
            piece = jax.device_put(np.asarray(value), self.piece_sharding)
            self.array = _updater(self.sharding, self.axis)(self.array, piece, np.int32(start))

    def finish(self) -> jax.Array:
        if not self.on_host:
            return self.array
        shards = []
        for device in list(self.buffers):
            _, buf = self.buffers.pop(device)
            shards.append(jax.device_put(buf, SingleDeviceSharding(device, memory_kind=HOST)))
            del buf
        return jax.make_array_from_single_device_arrays(self.shape, self.sharding, shards)


def _place_whole(get: TensorGetter, name: str, dtype: Any, sharding: NamedSharding) -> jax.Array:
    """A top-level tensor placed piece by piece (pieces of <= CHUNK_BYTES along its contiguous axis)."""
    shape = get.shape(name)
    axis = get.contiguous_axis(name)
    row = max(1, int(np.prod(shape)) // shape[axis]) * max(jnp.dtype(dtype).itemsize, 4)
    step = max(1, CHUNK_BYTES // row)
    stack = _Stack(shape, dtype, sharding, axis=axis)
    for start in range(0, shape[axis], step):
        stop = min(start + step, shape[axis])
        stack.put(start, np.ascontiguousarray(get.piece(name, axis, start, stop).astype(dtype, copy=False)))
    return stack.finish()


def _unwrap(x: Any) -> tuple[Any, bool]:
    return (x.inner, True) if isinstance(x, OnHost) else (x, False)


def place_base(
    tensor: TensorGetter,
    model: LlamaConfig,
    frozen_abs: Params,
    frozen_sh: Params,
    quant: QuantConfig | None,
    *,
    names: Iterator[str] | None = None,
) -> Params:
    """The frozen tree `frozen_abs` (abstract) filled from `tensor(name, layer)`, placed per `frozen_sh`.

    NF4 leaves of the target are quantized here, one matrix at a time on the first device of the
    mesh; floating leaves are cast to the target dtype. Leaves are handled one after another (the
    largest single tensors, embedding and head, first, while nothing else is resident).
    """
    _large_buffers_by_mmap()
    flat_abs, flat_sh = flatten_params(frozen_abs), flatten_params(frozen_sh)
    order = list(names) if names is not None else sorted(flat_abs, key=lambda n: (n.startswith("layers/"), n))
    out: dict[str, Any] = {}
    for name in order:
        target, on_host = _unwrap(flat_abs[name])
        sharding, _ = _unwrap(flat_sh[name])
        if not name.startswith("layers/"):
            out[name] = _place_whole(tensor, name, target.dtype, sharding)
            continue
        ours = name.split("/", 1)[1]
        if isinstance(target, NF4Tensor):
            if quant is None:
                raise ValueError(f"{name}: an NF4 target needs a QuantConfig")
            leaves = {
                f: _Stack(getattr(target, f).shape, getattr(target, f).dtype, getattr(sharding, f))
                for f in ("packed", "absmax", "absmax_scale", "absmax_offset")
                if getattr(target, f) is not None
            }
            fn = quantize_one(quant.block_size, quant.double_quant)
            first = next(d for d in sharding.packed.mesh.devices.flat if d.process_index == jax.process_index())
            for i in range(model.num_layers):
                q = fn(jax.device_put(tensor(ours, i), first))  # stored dtype on the wire; fp32 on the device
                for field, stack in leaves.items():
                    stack.put(i, getattr(q, field))
                del q
            done = {f: s.finish() for f, s in leaves.items()}
            value: Any = NF4Tensor(
                packed=done["packed"],
                absmax=done["absmax"],
                absmax_scale=done.get("absmax_scale"),
                absmax_offset=done.get("absmax_offset"),
                shape=target.shape,
                block_size=target.block_size,
            )
        else:
            stack = _Stack(target.shape, target.dtype, sharding)
            for i in range(model.num_layers):
                stack.put(i, np.ascontiguousarray(tensor(ours, i).astype(target.dtype, copy=False)))
            value = stack.finish()
        out[name] = OnHost(value) if on_host else value
        _release_freed_memory()  # what glibc kept of this leaf's pieces, before the next leaf's
    return unflatten_params(out)


class HfGetter(TensorGetter):
    """Our tensors from a Hugging Face checkpoint: one ranged read each, transposed as a view."""

    TOP = {
        "embed": ("model.embed_tokens.weight", False),
        "final_norm": ("model.norm.weight", False),
        "lm_head": ("lm_head.weight", True),
    }

    def __init__(self, index: SafetensorsIndex):
        self.index = index

    def _hf(self, name: str, layer: int | None) -> tuple[str, bool]:
        if layer is None:
            return self.TOP[name]
        hf_name, transpose = _LAYER_MAP[name]
        return f"model.layers.{layer}.{hf_name}", transpose

    def __call__(self, name: str, layer: int | None) -> np.ndarray:
        hf_name, transpose = self._hf(name, layer)
        raw = self.index.read(hf_name)
        return raw.T if transpose else raw

    def shape(self, name: str) -> tuple[int, ...]:
        hf_name, transpose = self._hf(name, None)
        shape = self.index.entries[hf_name].shape
        return tuple(reversed(shape)) if transpose else shape

    def contiguous_axis(self, name: str) -> int:
        hf_name, transpose = self._hf(name, None)
        return len(self.index.entries[hf_name].shape) - 1 if transpose else 0

    def stored_dtype(self, name: str) -> np.dtype | None:
        layered = name.startswith("layers/")
        hf_name, _ = self._hf(name.split("/", 1)[1] if layered else name, 0 if layered else None)
        entry = self.index.entries.get(hf_name)
        return np.dtype(DTYPES[entry.dtype]) if entry is not None else None

    def piece(self, name: str, axis: int, start: int, stop: int) -> np.ndarray:
        hf_name, transpose = self._hf(name, None)
        rows = self.index.read(hf_name, rows=(start, stop))  # the stored tensor's leading axis
        return rows.T if transpose else rows


class CheckpointGetter(TensorGetter):
    """Our tensors from a float `train_lm` checkpoint, one whole leaf in host memory at a time.

    `order` is the order to ask for them in: the checkpoint's own leaf order, in which
    `checkpoint.iter_arrays` reads them.
    """

    def __init__(self, path: str):
        resolved = ckpt.resolve_checkpoint(path)
        index = ckpt._read_index(resolved)
        params = {"/".join(ckpt.leaf_keys(n)[1:]): e for n, e in index.items() if ckpt.leaf_keys(n)[:1] == ("params",)}
        self.shapes = {name: tuple(e["shape"]) for name, e in params.items()}
        self.dtypes = {name: e.get("dtype") for name, e in params.items()}
        self.order = list(self.shapes)
        self._arrays = ckpt.iter_arrays(resolved)
        self._current: dict[str, np.ndarray] = {}

    def _leaf(self, full: str) -> np.ndarray:
        while full not in self._current:
            self._current.clear()
            keys, value = next(self._arrays)
            self._current["/".join(keys)] = value
        return self._current[full]

    def __call__(self, name: str, layer: int | None) -> np.ndarray:
        return self._leaf(name) if layer is None else self._leaf(f"layers/{name}")[layer]

    def shape(self, name: str) -> tuple[int, ...]:
        return self.shapes[name]

    def stored_dtype(self, name: str) -> np.dtype | None:
        try:
            return np.dtype(jnp.dtype(self.dtypes[name]))
        except (KeyError, TypeError):
            return None


@dataclasses.dataclass
class BaseSource:
    """A base located and checked, its weights not yet read (`open_base`)."""

    path: str
    model: LlamaConfig
    kind: str
    """'hf' (safetensors), 'checkpoint' (float train_lm output) or 'quantized' (quantize_base output)."""
    quantization: dict[str, Any] | None = None
    hf_index: SafetensorsIndex | None = None
    checkpoint: str | None = None


def open_base(path: str, model: LlamaConfig | None = None) -> BaseSource:
    """Locate and check the base at `path` (config, headers, metadata; no weight is read)."""
    if is_hf_checkpoint(path):
        found, index = open_hf(path, model)
        return BaseSource(path, found, "hf", hf_index=index)
    resolved, found, quant = base_checkpoint(path, model)
    return BaseSource(path, found, "quantized" if quant else "checkpoint", quantization=quant, checkpoint=resolved)


def _getter(source: BaseSource) -> TensorGetter:
    if source.kind == "hf":
        assert source.hf_index is not None
        return HfGetter(source.hf_index)
    return CheckpointGetter(source.checkpoint or source.path)


def keep_stored_dtypes(source: BaseSource, target: Params) -> Params:
    """`target` (abstract) with each floating leaf that is not NF4 in the dtype the base stores it in
    (bf16 for most published checkpoints), when that dtype is at most 32 bits: copied without a
    widening that would add nothing but bytes (an fp32 embedding of a bf16 base holds the same values)."""
    if source.kind not in ("hf", "checkpoint"):
        return target
    get = _getter(source)
    out = {}
    for name, leaf in flatten_params(target).items():
        stored = None if isinstance(leaf, NF4Tensor) else get.stored_dtype(name)
        if (
            stored is not None
            and jnp.issubdtype(stored, jnp.floating)
            and stored.itemsize <= 4
            and jnp.issubdtype(leaf.dtype, jnp.floating)
        ):
            leaf = jax.ShapeDtypeStruct(leaf.shape, stored, sharding=getattr(leaf, "sharding", None))
        out[name] = leaf
    return unflatten_params(out)


def _restore_quantized(source: BaseSource, frozen_abs: Params, frozen_sh: Params) -> Params:
    """A quantize_base checkpoint restored into the frozen shardings (each process reads its shards)."""
    q = source.quantization or {}
    qc = QuantConfig(block_size=q["block_size"], double_quant=q["double_quant"])
    stored = jax.eval_shape(lambda: quantize_params(init_params(source.model, jax.random.key(0)), qc))
    flat_stored, flat_abs, flat_sh = flatten_params(stored), flatten_params(frozen_abs), flatten_params(frozen_sh)
    try:  # the dtype each leaf was written in (fp32, or the float base's own: bf16)
        written = CheckpointGetter(source.checkpoint or source.path)
    except ckpt.CheckpointError as err:
        raise TrainingError(f"base: {err}") from err
    target = {}
    for name, leaf in flat_stored.items():
        sharding, _ = _unwrap(flat_sh[name])
        if isinstance(leaf, NF4Tensor):
            target[name] = jax.tree_util.tree_map(
                lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), leaf, sharding
            )
        else:  # restored as written, split as the frozen leaf, then cast in place to the frozen dtype
            dtype = written.stored_dtype(name) or leaf.dtype
            target[name] = jax.ShapeDtypeStruct(leaf.shape, dtype, sharding=sharding)
    try:
        restored = flatten_params(ckpt.load_params(source.checkpoint or source.path, unflatten_params(target)))
    except ckpt.CheckpointError as err:
        raise TrainingError(f"base: {err}") from err
    out = {}
    for name, value in restored.items():
        want, on_host = _unwrap(flat_abs[name])
        if not isinstance(value, NF4Tensor) and value.dtype != want.dtype:
            sharding, _ = _unwrap(flat_sh[name])
            value = jax.jit(lambda x, _d=want.dtype: x.astype(_d), out_shardings=sharding, donate_argnums=0)(value)
        out[name] = OnHost(value) if on_host else value
    return unflatten_params(out)


def load_frozen(source: BaseSource, frozen_abs: Params, frozen_sh: Params, quant: QuantConfig | None) -> Params:
    """The frozen tree of a lora/qlora fine-tune, read from `source` straight into `frozen_sh`."""
    if source.kind == "quantized":
        return _restore_quantized(source, frozen_abs, frozen_sh)
    return place_source(source, frozen_abs, frozen_sh, quant)


def place_source(source: BaseSource, target: Params, shardings: Params, quant: QuantConfig | None) -> Params:
    """`target` (abstract) filled from a float base (HF or train_lm checkpoint), placed per `shardings`."""
    frozen_abs, frozen_sh = target, shardings
    getter = _getter(source)
    if isinstance(getter, CheckpointGetter):
        return place_base(getter, source.model, frozen_abs, frozen_sh, quant, names=iter(getter.order))
    return place_base(getter, source.model, frozen_abs, frozen_sh, quant)


def load_saved(source: BaseSource, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The base's top-level parameters `names` (lora.modules_to_save), fp32 in host memory."""
    if not names:
        return {}
    if source.kind == "hf":
        assert source.hf_index is not None
        get = HfGetter(source.hf_index)
        return {n: np.asarray(get(n, None), np.float32) for n in names}
    # Only those leaves are read: the rest of the base (NF4 fields of a quantize_base output included)
    # is the frozen tree's, placed by `load_frozen`.
    return {
        "/".join(keys): value.astype(np.float32)
        for keys, value in ckpt.iter_arrays(source.checkpoint or source.path, names=names)
    }
