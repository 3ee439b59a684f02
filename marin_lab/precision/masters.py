"""float16 master weights outside the train step: evaluation, checkpoints and Hugging Face export.

With `master_weights="float16_scaled"` every parameter of the train state is a `ScaledArray`:
float16 data and an fp32 power-of-two scale (one per layer for the stacked `[L, ...]` weights).
The trainer needs three things from that representation, and they live here so that any trainer
calls the same functions:

- `plain_params(params)`: the fp32 parameters for evaluation (perplexity, tasks) during training.
  float32 masters are returned as they are.
- Checkpoints need no conversion: the state is saved and restored leaf by leaf (`.data` and
  `.scale` of each parameter are two arrays of the checkpoint, like the scaled Adam moments), so
  a resumed run continues bit for bit.
- `export_leaves(read, params, dtype)`: each parameter of a checkpoint, decoded (data x scale in
  fp32, exact: the scale is a power of two) and cast to the export dtype ('float32' or
  'bfloat16'), one parameter at a time, for `hf_export`. `read(target)` reads the checkpoint's
  `params` subtree shaped as `target`; one parameter is in memory at a time, as with float32
  masters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax
import ml_dtypes
import numpy as np

from marin_lab.precision.errors import PrecisionError
from marin_lab.precision.scaled import ScaledArray
from marin_lab.precision.scalify import to_values
from marin_lab.precision.scalify_rules import is_scaled

EXPORT_DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def export_dtype(name: str) -> np.dtype:
    """The numpy dtype of an export dtype name; PrecisionError naming the field otherwise."""
    if name not in EXPORT_DTYPES:
        raise PrecisionError(f"precision.export_dtype={name!r} is not one of {tuple(EXPORT_DTYPES)}")
    return EXPORT_DTYPES[name]


def has_scaled_masters(params: Any) -> bool:
    """True when the parameters are float16 masters (ScaledArray leaves)."""
    return any(is_scaled(x) for x in jax.tree_util.tree_leaves(params, is_leaf=is_scaled))


def plain_params(params: Any) -> Any:
    """fp32 parameters: float16 masters decoded (data x scale); float32 masters unchanged."""
    if not has_scaled_masters(params):
        return params
    return to_values(params, np.float32)


def decode(value: Any, dtype: str = "float32") -> np.ndarray:
    """One parameter as a numpy array of `dtype`: a ScaledArray's data times its (per-layer) scale
    in fp32, then cast (round to nearest even for bfloat16); a plain array cast."""
    target = export_dtype(dtype)
    if not is_scaled(value):
        return np.asarray(value).astype(np.float32).astype(target)
    data, scale = np.asarray(value.data, np.float32), np.asarray(value.scale, np.float32)
    scale = scale.reshape(scale.shape + (1,) * (data.ndim - scale.ndim))
    return (data * scale).astype(target)


def _abstract(leaf: Any) -> Any:
    def one(x: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(np.shape(x), x.dtype)

    if is_scaled(leaf):
        # A pytree of shapes in ScaledArray's form (what a checkpoint restore is asked for).
        return ScaledArray(one(leaf.data), one(leaf.scale))  # type: ignore[arg-type]
    return one(leaf)


def export_leaves(
    read: Callable[[Any], Any], params: Any, dtype: str = "float32"
) -> Iterator[tuple[tuple[str, ...], np.ndarray]]:
    """(parameter keys, array of `dtype`) for every parameter of a checkpoint, one at a time.

    `params` gives the structure (arrays or ShapeDtypeStructs, float32 or float16 masters);
    `read(target)` returns the checkpoint's params subtree shaped as `target` (nested dicts down
    to one parameter, a ShapeDtypeStruct or a ScaledArray of two).
    """
    export_dtype(dtype)
    for path, leaf in jax.tree_util.tree_flatten_with_path(params, is_leaf=is_scaled)[0]:
        keys = tuple(str(k.key) for k in path)
        target: Any = _abstract(leaf)
        for k in reversed(keys):
            target = {k: target}
        value = read(target)
        for k in keys:
            value = value[k]
        yield keys, decode(value, dtype)
