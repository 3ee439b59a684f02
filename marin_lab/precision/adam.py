"""Adam whose moments are stored narrow: float16 data with a power-of-two fp32 scale per tensor.

The update itself is optax's `scale_by_adam` arithmetic, in fp32: decode the stored moments,
update them with the gradient, take the bias-corrected step, encode them again. Only storage is
narrow, so the optimizer's memory is half of fp32 Adam's (plus 4 bytes of scale per tensor and
moment) while the step stays fp32-accurate up to float16 rounding of the moments (2^-11).

Why scales: Adam's moments of a tensor span many octaves, and their typical size (~1e-3 for m,
~1e-6 for v in a small model, far lower late in a large one) sits near or below float16's normal
range (6e-5). Scaling each tensor by a power of two chosen from its own amax puts its largest
value near 2^15 and gives the rest 2^40 of headroom before anything flushes to zero; a power of
two keeps the scaling exact. The second moment is stored as its square root (the gradient's RMS),
so both moments span the gradients' range rather than its square.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from marin_lab.precision.scaled import F32, ScaledArray, quantize

MOMENT_FORMATS = ("float32", "bfloat16", "float16_scaled")


class StoredAdamState(NamedTuple):
    """Adam's state with moments in a storage format (`nu` holds sqrt of the second moment)."""

    count: jax.Array  # type: ignore[assignment]  # optax's field name; it shadows tuple.count
    mu: Any
    nu: Any


def _is_scaled(x: Any) -> bool:
    return isinstance(x, ScaledArray)


def _encode(x: jax.Array, fmt: str) -> Any:
    if fmt == "float16_scaled":
        return quantize(x, jnp.float16)
    return x.astype(jnp.bfloat16 if fmt == "bfloat16" else F32)


def _decode(stored: Any) -> jax.Array:
    return stored.to_array(F32) if _is_scaled(stored) else stored.astype(F32)


def scale_by_stored_adam(b1: float, b2: float, eps: float, moments: str) -> optax.GradientTransformation:
    """optax.scale_by_adam (eps_root 0, no Nesterov) with moments stored in `moments`."""
    if moments not in MOMENT_FORMATS:
        raise ValueError(f"moments={moments!r} is not one of {MOMENT_FORMATS}")

    def init(params: Any) -> StoredAdamState:
        zeros = jax.tree_util.tree_map(lambda p: _encode(jnp.zeros(p.shape, F32), moments), params)
        return StoredAdamState(jnp.zeros([], jnp.int32), zeros, zeros)

    def update(updates: Any, state: StoredAdamState, params: Any = None) -> tuple[Any, StoredAdamState]:
        del params
        count = optax.safe_increment(state.count)
        c1 = 1 - jnp.asarray(b1, F32) ** count
        c2 = 1 - jnp.asarray(b2, F32) ** count

        def one(g: jax.Array, m_stored: Any, r_stored: Any) -> tuple[jax.Array, Any, Any]:
            g = g.astype(F32)
            m = (1 - b1) * g + b1 * _decode(m_stored)
            r = _decode(r_stored)
            v = (1 - b2) * (g * g) + b2 * (r * r)
            step = (m / c1) / (jnp.sqrt(v / c2) + eps)
            return step, _encode(m, moments), _encode(jnp.sqrt(v), moments)

        flat_g, treedef = jax.tree_util.tree_flatten(updates)
        flat_m = treedef.flatten_up_to(state.mu)  # type: ignore[attr-defined]  # missing from jaxlib's stub
        flat_r = treedef.flatten_up_to(state.nu)  # type: ignore[attr-defined]  # missing from jaxlib's stub
        out = [one(g, m, r) for g, m, r in zip(flat_g, flat_m, flat_r, strict=True)]
        steps, mus, nus = (
            treedef.unflatten([o[i] for o in out])  # type: ignore[attr-defined]  # as above
            for i in range(3)
        )
        return steps, StoredAdamState(count, mus, nus)

    return optax.GradientTransformation(init, update)


def moment_bytes(state: Any) -> dict[str, int]:
    """Bytes of the moments' data and of their scales in an optimizer state (any optax chain)."""
    data = scales = 0
    for leaf_path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        names = [str(getattr(k, "name", getattr(k, "key", ""))) for k in leaf_path]
        if not ({"mu", "nu"} & set(names)):
            continue
        if names[-1] == "scale":
            scales += leaf.nbytes
        else:
            data += leaf.nbytes
    return {"data": data, "scales": scales}
