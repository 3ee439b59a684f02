"""Quantized frozen weights: NF4 with double quantization (QLoRA), its matmul and sharding."""

from marin_lab.quant.errors import QuantizationError
from marin_lab.quant.matmul import nf4_matmul
from marin_lab.quant.nf4 import NF4_CODE, NF4Tensor, dequantize_nf4, normal_float_code, quantize_nf4

__all__ = [
    "NF4_CODE",
    "NF4Tensor",
    "QuantizationError",
    "dequantize_nf4",
    "nf4_matmul",
    "normal_float_code",
    "quantize_nf4",
]
