"""Frozen weights kept in host memory and brought to the device one layer at a time.

`OnHost(w)` marks a weight (a plain array or a wrapper such as `NF4Tensor`) whose leaves live in
the `pinned_host` memory kind. Its `linear(x)` copies the weight to device memory right where it
is used; inside the model's `scan` over layers that is one layer at a time, so device memory holds
one layer of the frozen base instead of all of them (the transfers overlap compute on GPUs/TPUs).
CPU devices expose the same memory kinds, so the code path runs in tests.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from marin_lab.training.model import linear

HOST = "pinned_host"


@dataclasses.dataclass(frozen=True)
class OnHost:
    """A frozen weight stored in host memory; `.linear(x)` fetches it to the device first."""

    inner: Any

    def linear(self, x: jax.Array) -> jax.Array:
        on_device = jax.device_put(self.inner, jax.memory.Space.Device)
        if not hasattr(on_device, "linear"):
            on_device = on_device.astype(x.dtype)
        return linear(x, on_device)

    def dequantize(self, dtype: Any = None) -> jax.Array:
        inner = self.inner
        if hasattr(inner, "dequantize"):
            return inner.dequantize(dtype) if dtype is not None else inner.dequantize()
        return inner if dtype is None else inner.astype(dtype)


jax.tree_util.register_dataclass(OnHost, data_fields=["inner"], meta_fields=[])
