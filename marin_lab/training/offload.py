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

from marin_lab.models.llama import linear
from marin_lab.quant.matmul import frozen_matmul

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


@dataclasses.dataclass(frozen=True)
class Gathered:
    """A frozen weight (array, NF4Tensor or OnHost of either) that FSDP gathers where it is used.

    Inside the compiled step only: `linear(x)` fetches it from host memory if it lives there,
    gathers its stored form onto every device (`gather`, a replicated sharding; None on one
    device), then dequantizes — so NF4 moves as packed bytes — and multiplies (quant.matmul).
    """

    inner: Any
    gather: Any = None

    def linear(self, x: jax.Array) -> jax.Array:
        fetch = isinstance(self.inner, OnHost)
        return frozen_matmul(x, self.inner.inner if fetch else self.inner, self.gather, fetch)

    def dequantize(self, dtype: Any = None) -> jax.Array:
        inner = self.inner.inner if isinstance(self.inner, OnHost) else self.inner
        if hasattr(inner, "dequantize"):
            return inner.dequantize(dtype) if dtype is not None else inner.dequantize()
        return inner if dtype is None else inner.astype(dtype)


jax.tree_util.register_dataclass(Gathered, data_fields=["inner"], meta_fields=["gather"])
