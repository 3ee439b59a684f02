"""Safetensors files read by byte range, every header checked against the file before any weight.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON (name ->
{dtype, shape, data_offsets}), then the raw little-endian tensor bytes. We parse it ourselves
rather than with `safetensors.numpy`, which has no bfloat16 (the dtype most published checkpoints
use), reads only local files, and loads whole files; here one tensor is one ranged read
(`fs.cat_file(path, start, end)`) on any fsspec filesystem, `gs://` included.

`SafetensorsIndex.open(folder)` reads only headers and checks, for every file:
- it is not a Git LFS pointer (a clone without `git lfs pull` holds ~130-byte text stubs);
- the header length fits the file, the header is a JSON object of well-formed entries;
- each tensor's `data_offsets` lie inside the data region and span exactly shape x dtype bytes
  (a truncated download fails here, naming the first tensor that lies past the end);
- for a sharded checkpoint, every file the index names exists and holds the tensors it claims.
Each failure is one `HfImportError` line naming the file and tensor, raised before any device
memory is allocated. `check_float` refuses integer or boolean tensors where a float weight is
expected (a quantized export, e.g. GPTQ's int32 `qweight`, must not be cast silently).
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
from typing import Any

import jax.numpy as jnp
import numpy as np

from marin_lab.io import fs as mfs
from marin_lab.training.errors import TrainingError

DTYPES: dict[str, Any] = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": jnp.bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
"""What a floating-point weight may be stored as."""

MAX_HEADER_BYTES = 100 * 2**20
"""safetensors' own limit on the JSON header; a larger length is a damaged or foreign file."""

LFS_MAGIC = b"version https://git-lfs.github.com/spec/"


class HfImportError(TrainingError, ValueError):
    """A Hugging Face checkpoint that cannot become our parameters; the message names the tensor or field."""


@dataclasses.dataclass(frozen=True)
class TensorEntry:
    """Where one tensor's bytes are: file, absolute byte range, dtype and shape."""

    url: str
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def _check_entry(url: str, name: str, info: Any, data_start: int, file_size: int) -> TensorEntry:
    where = f"{url}: tensor {name}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise HfImportError(
            f"{where}: header entry lacks dtype, shape or data_offsets; the file is not valid safetensors"
        )
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype not in DTYPES:
        raise HfImportError(f"{where} has dtype {dtype!r}, which we do not read (known: {', '.join(DTYPES)})")
    if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
        raise HfImportError(f"{where}: shape {shape!r} is not a list of non-negative integers")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        raise HfImportError(f"{where}: data_offsets {offsets!r} are not two increasing byte offsets")
    expected = math.prod(shape) * np.dtype(DTYPES[dtype]).itemsize
    if offsets[1] - offsets[0] != expected:
        raise HfImportError(
            f"{where}: data_offsets span {offsets[1] - offsets[0]} bytes but shape {tuple(shape)} "
            f"x {dtype} needs {expected}; the header is damaged"
        )
    start, end = data_start + offsets[0], data_start + offsets[1]
    if end > file_size:
        raise HfImportError(
            f"{where}: its data ends at byte {end} but the file has {file_size} bytes; the file is "
            "truncated (an interrupted download?): fetch it again"
        )
    return TensorEntry(url, name, dtype, tuple(shape), start, end)


def read_header(url: str) -> dict[str, TensorEntry]:
    """The checked entries of one safetensors file (reads its first bytes only)."""
    fs, path = mfs.fs_and_path(url)
    try:
        size = int(fs.size(path))
    except FileNotFoundError as err:
        raise HfImportError(f"{url}: file not found") from err
    head = fs.cat_file(path, 0, min(size, 8 + 64))
    if head.startswith(LFS_MAGIC):
        raise HfImportError(
            f"{url} is a Git LFS pointer ({size} bytes of text), not the weights; run "
            "`git lfs pull` in the clone (or download the file itself)"
        )
    if size < 8:
        raise HfImportError(f"{url}: {size} bytes, too short for a safetensors header; the file is truncated")
    (length,) = struct.unpack("<Q", head[:8])
    if length > MAX_HEADER_BYTES or 8 + length > size:
        raise HfImportError(
            f"{url}: header length {length} does not fit the file's {size} bytes; the file is "
            "truncated or not safetensors"
        )
    try:
        header = json.loads(fs.cat_file(path, 8, 8 + length))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise HfImportError(f"{url}: the safetensors header is not valid JSON ({err}); the file is damaged") from err
    except RecursionError:  # e.g. 100,000 unclosed `[`: no safetensors header nests
        raise HfImportError(
            f"{url}: the safetensors header is nested too deeply to be one; the file is damaged or not safetensors"
        ) from None
    if not isinstance(header, dict):
        raise HfImportError(f"{url}: the safetensors header is not a JSON object; the file is damaged")
    return {
        name: _check_entry(url, name, info, 8 + length, size) for name, info in header.items() if name != "__metadata__"
    }


def tensor_files(folder: str) -> list[str]:
    """The safetensors files of a checkpoint folder (sharded via its index, or one file)."""
    index = mfs.join(folder, "model.safetensors.index.json")
    if mfs.exists(index):
        try:
            weight_map = mfs.read_json(index)["weight_map"]
            files = sorted({str(f) for f in weight_map.values()})
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
            raise HfImportError(
                f"{index}: not a safetensors index (expected a JSON object with 'weight_map'): {err}"
            ) from err
        return [mfs.join(folder, f) for f in files]
    return [mfs.join(folder, "model.safetensors")]


@dataclasses.dataclass
class SafetensorsIndex:
    """Every tensor of a checkpoint folder by name, located but not read."""

    folder: str
    entries: dict[str, TensorEntry]

    @classmethod
    def open(cls, folder: str) -> SafetensorsIndex:
        entries: dict[str, TensorEntry] = {}
        for url in tensor_files(folder):
            for name, entry in read_header(url).items():
                if name in entries:
                    raise HfImportError(
                        f"{url}: tensor {name} is also in {entries[name].url}; the checkpoint is inconsistent"
                    )
                entries[name] = entry
        return cls(folder, entries)

    def check_float(self, names: list[str] | set[str]) -> None:
        """Refuse a tensor of `names` that is not floating point (never cast integer weights)."""
        for name in sorted(names):
            entry = self.entries.get(name)
            if entry is not None and entry.dtype not in FLOAT_DTYPES:
                raise HfImportError(
                    f"{entry.url}: tensor {name} has dtype {entry.dtype}, but a Llama weight is floating point "
                    f"({'/'.join(FLOAT_DTYPES)}); a quantized or integer export cannot be read as a base — "
                    "use the float checkpoint"
                )

    def read(self, name: str, rows: tuple[int, int] | None = None) -> np.ndarray:
        """One tensor (its stored dtype, little-endian), or its leading-axis `rows` [start, stop),
        read as one byte range."""
        entry = self.entries[name]
        dtype = np.dtype(DTYPES[entry.dtype]).newbyteorder("<")
        shape, start, end = entry.shape, entry.start, entry.end
        if rows is not None:
            row_bytes = math.prod(shape[1:]) * dtype.itemsize
            shape = (rows[1] - rows[0], *shape[1:])
            start, end = entry.start + rows[0] * row_bytes, entry.start + rows[1] * row_bytes
        fs, path = mfs.fs_and_path(entry.url)
        raw = fs.cat_file(path, start, end)
        if len(raw) != end - start:  # the file shrank after its header was checked
            raise HfImportError(
                f"{entry.url}: tensor {name}: read {len(raw)} of {end - start} bytes; the file "
                "is truncated: fetch it again"
            )
        return np.frombuffer(raw, dtype=dtype).reshape(shape)
