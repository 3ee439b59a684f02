"""AdamW with a warmup-stable-decay or cosine learning-rate schedule (optax).

The config builds the runtime object (`OptimizerConfig.build(num_steps)`), so the config stays a
plain serialisable value and the optax transformation stays testable on its own.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from marin_lab.precision.adam import scale_by_stored_adam
from marin_lab.versioning import added_field, field_hints

SCHEDULES = ("wsd", "cosine", "linear", "constant")


@field_hints
@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """AdamW hyperparameters and the learning-rate schedule."""

    learning_rate: float = 3e-4
    """Peak learning rate."""
    schedule: str = "wsd"
    """'wsd' (warmup-stable-decay), 'cosine', 'linear' or 'constant' (after warmup)."""
    warmup: float = 0.01
    """Warmup length: a fraction of the run if < 1, else a number of steps."""
    decay: float = 0.2
    """WSD only: the final decay length, a fraction of the run if < 1, else steps."""
    min_lr_ratio: float = 0.1
    """Learning rate at the end of the decay, as a fraction of the peak."""
    weight_decay: float = 0.1
    """Decoupled weight decay; never applied to norm gains."""
    decay_embeddings: bool = added_field(True)
    """Also decay the input embedding (`embed`, and the tied output projection). False follows
    Levanter/Marin's mask: a token row is updated only when the token occurs, so decay would shrink
    rare tokens' rows every step for nothing."""
    beta1: float = 0.9
    """Adam beta1."""
    beta2: float = 0.95
    """Adam beta2."""
    epsilon: float = 1e-8
    """Adam epsilon."""
    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm to this; None disables clipping."""
    schedule_offset: int = 0
    """Step at which this schedule starts (a phase continuing an earlier run sets it)."""

    def validate(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"optimizer.schedule={self.schedule!r} is not one of {SCHEDULES}")
        if self.learning_rate <= 0:
            raise ValueError(f"optimizer.learning_rate={self.learning_rate} must be positive")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"optimizer.min_lr_ratio={self.min_lr_ratio} must be in [0, 1]")

    def lr_schedule(self, num_steps: int) -> Callable[[jax.Array], jax.Array]:
        """step -> learning rate for a run whose schedule spans [offset, num_steps)."""
        self.validate()
        total = max(num_steps - self.schedule_offset, 1)
        warmup = _steps(self.warmup, total)
        decay = _steps(self.decay, total) if self.schedule == "wsd" else total - warmup
        decay = max(min(decay, total - warmup), 1)
        peak, low = self.learning_rate, self.learning_rate * self.min_lr_ratio
        kind, offset = self.schedule, self.schedule_offset

        def schedule(step: jax.Array) -> jax.Array:
            s = jnp.asarray(step, jnp.float32) - offset
            warm = peak * jnp.minimum((s + 1.0) / max(warmup, 1), 1.0)
            if kind == "constant":
                return warm
            decay_start = total - decay
            # +1: the last step of the run (total - 1) lands exactly on the minimum.
            frac = jnp.clip((s - decay_start + 1.0) / decay, 0.0, 1.0)
            if kind == "cosine":
                after = low + (peak - low) * 0.5 * (1.0 + jnp.cos(jnp.pi * frac))
            else:  # wsd and linear both decay linearly; wsd holds the peak first
                after = peak + (low - peak) * frac
            return jnp.where(s < warmup, warm, after)

        return schedule

    def build(self, moments: str = "float32") -> optax.GradientTransformation:
        """Clipping, Adam moments and decoupled weight decay, without the learning rate.

        The train step multiplies the result by `-lr(step)` itself, with the global step from
        the train state, so the schedule never depends on optax's internal counter (which a
        phase that resets the optimizer state would restart). `moments` is the storage format
        of Adam's moments (the precision policy's `optimizer_state`): 'float32' is optax's own
        Adam; 'bfloat16' and 'float16_scaled' store them narrow (marin_lab.precision.adam).
        """
        self.validate()
        parts = []
        if self.max_grad_norm is not None:
            parts.append(optax.clip_by_global_norm(self.max_grad_norm))
        if moments == "float32":
            parts.append(optax.scale_by_adam(b1=self.beta1, b2=self.beta2, eps=self.epsilon))
        else:
            parts.append(scale_by_stored_adam(self.beta1, self.beta2, self.epsilon, moments))
        if self.weight_decay:
            mask = decay_mask if self.decay_embeddings else functools.partial(decay_mask, decay_embeddings=False)
            parts.append(optax.add_decayed_weights(self.weight_decay, mask=mask))
        return optax.chain(*parts)


def decay_mask(params: object, decay_embeddings: bool = True) -> object:
    """True for the parameters that get weight decay: never norm gains (named '*norm'); the
    embedding (named 'embed') only with `decay_embeddings`."""

    def keep(path: tuple, _leaf: object) -> bool:
        last = path[-1]
        name = str(getattr(last, "key", getattr(last, "name", str(last))))
        return not name.endswith("norm") and (decay_embeddings or name != "embed")

    return jax.tree_util.tree_map_with_path(keep, params)


def _steps(value: float, total: int) -> int:
    return int(round(value * total)) if value < 1 else int(value)
