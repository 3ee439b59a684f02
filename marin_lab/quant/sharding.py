"""Where the pieces of an NF4 weight live on a device mesh.

FSDP splits a quantized weight by whole blocks: the packed bytes `[*lead, blocks, block/2]` and
the absmax codes `[*lead, blocks]` are cut along the block axis over the `fsdp` mesh axis, so the
all-gather before a matmul moves packed 4-bit bytes (about 4x less traffic than bf16), and no
block is ever split between devices. The second-level scales (one per 256 blocks) are split the
same way when their count divides, else replicated (they are tiny); offsets are replicated.
"""

from __future__ import annotations

from typing import Any

from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from marin_lab.quant.errors import QuantizationError
from marin_lab.quant.nf4 import NF4Tensor


def nf4_shardings(
    q: NF4Tensor, mesh: Mesh, *, axis: str | None = "fsdp", name: str = "weight", memory_kind: str | None = None
) -> NF4Tensor:
    """An NF4Tensor of NamedShardings (a pytree prefix for jit) splitting `q` by blocks over `axis`."""
    lead = (None,) * len(q.lead_shape)

    def sharding(*spec: str | None) -> NamedSharding:
        return NamedSharding(mesh, P(*spec), memory_kind=memory_kind)

    size = mesh.shape[axis] if axis else 1
    if size > 1 and q.num_blocks % size:
        raise QuantizationError(
            f"{name}: its {q.num_blocks} NF4 blocks per matrix do not split evenly over mesh.{axis}={size}; "
            f"FSDP gives each device whole blocks. Use a mesh.{axis} that divides {q.num_blocks}, or a "
            "quant.block_size that makes the block count divisible"
        )
    split = axis if size > 1 else None
    groups = q.absmax_scale.shape[-1] if q.absmax_scale is not None else 0
    # The same pytree as `q` with a NamedSharding where `q` holds an array (NF4Tensor declares arrays).
    leaves: dict[str, Any] = {
        "packed": sharding(*lead, split, None),
        "absmax": sharding(*lead, split),
        "absmax_scale": sharding(*lead, split if groups and groups % size == 0 else None) if q.double_quant else None,
        "absmax_offset": sharding(*lead) if q.double_quant else None,
    }
    return NF4Tensor(**leaves, shape=q.shape, block_size=q.block_size)
