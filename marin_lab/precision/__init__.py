"""Number formats for training: scaled tensors, float8 matmuls, Scalify, narrow optimizer state, the policy.

scaled.py    ScaledArray (data x power-of-two scale) and Scalify's scale-propagating ops
scalify.py   the interpreter that runs a function (the loss and its gradient) on scaled tensors
scalify_rules.py  its propagation rule per JAX primitive
scalify_train.py  the 'scalify' policy in the train step: float8 casts, fp16 masters, statistics
audit.py     which float8 casts of a program depend on an amax reduction
fp8.py       fp8_matmul: e4m3 forward, e5m2 gradients, current or delayed per-tensor scales
mx.py        MXFP8 through jax.nn.scaled_dot_general, where the backend lowers it
rescale.py   the dynamic-rescale point on a gradient (the logits')
adam.py      Adam with float16 moments scaled per tensor
masters.py   float16 master weights for evaluation, checkpoints and Hugging Face export
policy.py    PrecisionConfig, the policy on the trainer's config
apply.py     what the policy does to one train step (wrapping, state, statistics)
"""

from marin_lab.precision.adam import MOMENT_FORMATS, moment_bytes, scale_by_stored_adam
from marin_lab.precision.errors import PrecisionError
from marin_lab.precision.fp8 import Fp8Meta, Fp8Weight, fp8_matmul
from marin_lab.precision.policy import MATMULS, PrecisionConfig
from marin_lab.precision.rescale import rescale_grad
from marin_lab.precision.scaled import (
    ScaledArray,
    as_scaled,
    dequantize,
    dynamic_rescale_l2,
    dynamic_rescale_max,
    quantize,
    scaled_add,
    scaled_dot,
    scaled_sum,
)

__all__ = [
    "MATMULS",
    "MOMENT_FORMATS",
    "Fp8Meta",
    "Fp8Weight",
    "PrecisionConfig",
    "PrecisionError",
    "ScaledArray",
    "as_scaled",
    "dequantize",
    "dynamic_rescale_l2",
    "dynamic_rescale_max",
    "fp8_matmul",
    "moment_bytes",
    "quantize",
    "rescale_grad",
    "scale_by_stored_adam",
    "scaled_add",
    "scaled_dot",
    "scaled_sum",
]
