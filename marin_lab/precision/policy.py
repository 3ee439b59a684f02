"""The precision policy of a training run: how weight matmuls multiply, how Adam stores its moments.

`PrecisionConfig` is a plain frozen value on the trainer's config (and part of the train step's
identity). With its defaults nothing changes: matmuls run in the run's compute dtype and Adam keeps
fp32 moments. The parameter and compute dtypes stay where they were (`TrainLmConfig.param_dtype`,
`compute_dtype`); this adds the matmul format, the optimizer-state format, and the float8 knobs.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import jax

from marin_lab.precision.adam import MOMENT_FORMATS
from marin_lab.precision.errors import PrecisionError
from marin_lab.precision.fp8 import backend_error as fp8_backend_error
from marin_lab.precision.fp8 import gpu_flags_warning
from marin_lab.precision.masters import EXPORT_DTYPES
from marin_lab.precision.mx import BLOCK, backend_error
from marin_lab.precision.scalify_train import MASTER_FORMATS
from marin_lab.versioning import added_field, field_hints

MATMULS = ("compute", "fp32", "bf16", "fp8", "fp8_delayed", "mxfp8", "scalify")
FP8_MATMULS = ("fp8", "fp8_delayed")

logger = logging.getLogger(__name__)


@field_hints
@dataclasses.dataclass(frozen=True)
class PrecisionConfig:
    """Number formats of a training run beyond its parameter and compute dtypes."""

    matmul: str = "compute"
    """Weight matmuls (q, k, v, o, gate, up, down): 'compute' (in compute_dtype), 'fp32', 'bf16',
    'fp8' (float8 e4m3 operands, e5m2 gradients, per-tensor scales from the current amax),
    'fp8_delayed' (scales from an amax history kept in the train state and checkpointed) or
    'mxfp8' (block-scaled, jax.nn.scaled_dot_general; only where the backend lowers it), or
    'scalify' (every activation, weight and gradient a scaled tensor whose power-of-two scale is
    propagated op by op, rescaled per layer; float8 matmuls as casts of scaled data, no amax)."""
    amax_history_len: int = 16
    """fp8_delayed: steps of amax history a scale is taken from (the largest of them)."""
    fp8_lm_head: bool = False
    """Also run the output projection in float8 (off: it stays in compute_dtype, as the logits
    are the most sensitive matmul; needs untied embeddings)."""
    master_weights: str = added_field("float32")
    """'float32', or with matmul 'scalify' 'float16_scaled': parameters stored as float16 data with
    a power-of-two fp32 scale (per layer for the stacked weights), half the bytes of float32."""
    export_dtype: str = added_field("float32")
    """The Hugging Face export's weights: 'float32' or 'bfloat16' (float16 masters are decoded,
    data x scale in fp32, then cast)."""
    optimizer_state: str = "float32"
    """Adam's moments: 'float32', 'bfloat16', or 'float16_scaled' (float16 data with a
    power-of-two fp32 scale per tensor: half the bytes of float32)."""
    rescale_logits_grad: bool = False
    """A dynamic-rescale point on the logits' gradient (normalised to amax ~1 by a power of two,
    undone exactly on the parameter gradients): lets float16 compute train without loss scaling."""

    @property
    def fp8(self) -> bool:
        return self.matmul in FP8_MATMULS

    @property
    def scalify(self) -> bool:
        return self.matmul == "scalify"

    @property
    def stateful(self) -> bool:
        """True when the train state carries amax histories."""
        return self.matmul == "fp8_delayed"

    @property
    def changes_step(self) -> bool:
        """False for the defaults: the train step is then exactly the plain one."""
        return self.matmul != "compute" or self.rescale_logits_grad

    def validate(self, param_shapes: dict[str, tuple[int, ...]] | None = None) -> None:
        """Raise PrecisionError naming the field; with the model's shapes, check they fit too."""
        if self.matmul not in MATMULS:
            raise PrecisionError(f"precision.matmul={self.matmul!r} is not one of {MATMULS}")
        if self.optimizer_state not in MOMENT_FORMATS:
            raise PrecisionError(f"precision.optimizer_state={self.optimizer_state!r} is not one of {MOMENT_FORMATS}")
        if self.amax_history_len < 1:
            raise PrecisionError(
                f"precision.amax_history_len={self.amax_history_len} must be at least 1: delayed "
                "scaling takes each scale from the amaxes of that many earlier steps (16 is common)"
            )
        if self.fp8_lm_head and not (self.fp8 or self.scalify):
            raise PrecisionError(
                f"precision.fp8_lm_head=True needs precision.matmul 'fp8', 'fp8_delayed' or "
                f"'scalify', not {self.matmul!r}"
            )
        if self.scalify and self.rescale_logits_grad:
            raise PrecisionError(
                "precision.rescale_logits_grad=True does not combine with matmul='scalify', which "
                "rescales every layer's gradient itself; leave rescale_logits_grad False"
            )
        if self.master_weights not in MASTER_FORMATS:
            raise PrecisionError(f"precision.master_weights={self.master_weights!r} is not one of {MASTER_FORMATS}")
        if self.master_weights != "float32" and not self.scalify:
            raise PrecisionError(
                f"precision.master_weights={self.master_weights!r} needs precision.matmul='scalify' (the weights "
                f"enter the step as scaled tensors only there), not {self.matmul!r}"
            )
        if self.export_dtype not in EXPORT_DTYPES:
            raise PrecisionError(f"precision.export_dtype={self.export_dtype!r} is not one of {tuple(EXPORT_DTYPES)}")
        if param_shapes is None:
            return
        if self.fp8_lm_head and "lm_head" not in param_shapes:
            raise PrecisionError(
                "precision.fp8_lm_head=True needs an output projection of its own; this "
                "model ties it to the embedding (model.tie_embeddings=True)"
            )
        if self.matmul == "mxfp8":
            for name, shape in sorted(param_shapes.items()):
                if name.startswith("layers/") and len(shape) == 3 and shape[1] % BLOCK:
                    raise PrecisionError(
                        f"precision.matmul='mxfp8' scales blocks of {BLOCK} values along each matmul's "
                        f"input dimension, but {name} has {shape[1]} inputs; use widths divisible by {BLOCK}"
                    )

    def check_backend(self) -> None:
        """Raise PrecisionError when this process's JAX backend cannot run the matmul format."""
        if self.matmul == "mxfp8":
            reason = backend_error()
            if reason:
                raise PrecisionError(
                    f"precision.matmul='mxfp8' cannot run on this backend ({jax.default_backend()}: "
                    f"{reason}); jax.nn.scaled_dot_general lowers block-scaled float8 only on NVIDIA GPUs "
                    "with cuDNN's MX matmuls. Use 'fp8' or 'fp8_delayed' (per-tensor scales, any backend)"
                )
        elif self.fp8 or self.scalify:
            reason = fp8_backend_error()
            if reason:
                raise PrecisionError(
                    f"precision.matmul={self.matmul!r} cannot run on this backend ({jax.default_backend()}: "
                    f"{reason}); use 'bf16' or 'compute'"
                )

            warning = gpu_flags_warning(jax.default_backend(), os.environ.get("XLA_FLAGS", ""))
            if warning:
                logger.warning("precision.matmul=%r: %s", self.matmul, warning)
