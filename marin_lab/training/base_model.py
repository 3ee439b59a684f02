"""The frozen base of a fine-tune: loaded from any checkpoint form, quantized once, reused.

A base is one of:
- a `train_lm` output (or one of its `step-NNNNNN` checkpoints): our parameters, fp32;
- a Hugging Face Llama folder (config.json + safetensors), imported by `hf_import`;
- a `quantize_base` output: the same model with its seven projections already in NF4, so that
  many QLoRA fine-tunes of one base pay for quantization (and read 4-bit bytes) once.

`quantize_base` is a step of its own for that reason: its output is an ordinary checkpoint
(`checkpoints/step-000000`) whose metadata records the model shape, the quantization and the
source.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from marin_lab.models.llama import LlamaConfig, Params, init_params
from marin_lab.peft.lora import PROJECTIONS
from marin_lab.quant import QuantizationError, quantize_nf4
from marin_lab.quant.nf4 import NF4Tensor, check_block_size
from marin_lab.training import checkpoint as ckpt
from marin_lab.training.errors import TrainingError
from marin_lab.training.hf_import import import_hf, is_hf_checkpoint
from marin_lab.versioning import field_hints

logger = logging.getLogger(__name__)

QUANTIZED_NAMES = tuple(sorted(PROJECTIONS.values()))
"""The layer weights that QLoRA quantizes: every linear layer of the decoder blocks (embedding
and output head stay in floating point, as in QLoRA and fsdp_qlora)."""


@field_hints
@dataclasses.dataclass(frozen=True)
class QuantConfig:
    """How the frozen base is quantized for QLoRA."""

    block_size: int = 64
    """Weights per NF4 block (QLoRA: 64)."""
    double_quant: bool = True
    """Quantize the absmax constants too (8-bit, groups of 256): ~0.127 instead of 0.5 bit/weight."""

    def validate(self, model: LlamaConfig) -> None:
        shapes = model.param_shapes()
        try:
            for name in QUANTIZED_NAMES:
                check_block_size(shapes[f"layers/{name}"], self.block_size, f"layers/{name}")
        except QuantizationError as err:
            raise TrainingError(str(err)) from err


@functools.cache
def quantize_one(block_size: int, double_quant: bool) -> Callable[[jax.Array], NF4Tensor]:
    """The compiled quantization of one `[in, out]` matrix (any float dtype in, fp32 inside).

    Every path that quantizes a base (whole model here, tensor by tensor in `base_stream`) uses
    this one function per matrix, so they produce the same bytes: compiled over a stacked
    `[layers, in, out]` array instead, XLA reduces the double-quantization mean in another order
    and the last bits of the absmax constants differ. One function for every weight name: same
    shapes share one compiled program. Callers check block sizes first (`QuantConfig.validate`).
    """
    return jax.jit(lambda w: quantize_nf4(w.astype(jnp.float32), block_size, double_quant))


def _stack(parts: list[NF4Tensor]) -> NF4Tensor:
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *parts)


def quantize_params(params: Params, quant: QuantConfig) -> Params:
    """`params` with every decoder projection replaced by its NF4Tensor (quantized matrix by matrix)."""
    layers = dict(params["layers"])
    for name in QUANTIZED_NAMES:
        stack = layers[name]
        check_block_size(stack.shape, quant.block_size, f"layers/{name}")
        fn = quantize_one(quant.block_size, quant.double_quant)
        layers[name] = _stack([fn(stack[i]) for i in range(stack.shape[0])])
    return {**params, "layers": layers}


def _check_model(expected: LlamaConfig | None, found: LlamaConfig, where: str) -> LlamaConfig:
    if expected is not None and expected != found:
        diff = [
            f"{k}: {v!r} (config) vs {getattr(found, k)!r} (base)"
            for k, v in dataclasses.asdict(expected).items()
            if getattr(found, k) != v
        ]
        raise TrainingError(
            f"base {where} has another model shape than `model`: {', '.join(diff)}; fix those "
            "`model` fields or leave `model` unset to take the base's shape"
        )
    return found


def base_checkpoint(path: str, model: LlamaConfig | None = None) -> tuple[str, LlamaConfig, dict[str, Any] | None]:
    """(resolved checkpoint, model shape, quantization metadata or None) of a checkpoint base; reads metadata only."""
    try:
        resolved = ckpt.resolve_checkpoint(path)
    except ckpt.CheckpointError as err:
        raise TrainingError(
            f"base: {err}; a base is a train_lm or quantize_base output, a checkpoint folder, or a "
            "Hugging Face folder with config.json and safetensors"
        ) from err
    meta = ckpt.read_metadata(resolved)
    if "model" not in meta:
        raise TrainingError(f"base {resolved}: metadata.json records no model shape ('model')")
    found = _check_model(model, LlamaConfig(**meta["model"]), resolved)
    return resolved, found, meta.get("quantization")


def load_base(path: str, model: LlamaConfig | None = None) -> tuple[LlamaConfig, Params, dict[str, Any] | None]:
    """(model shape, params, quantization metadata or None) of the base at `path`, whole on the
    default device. A fine-tune streams its base into place instead (`base_stream`)."""
    if is_hf_checkpoint(path):
        found, params = import_hf(path, model)
        return found, jax.tree_util.tree_map(jnp.asarray, params), None
    resolved, found, quant = base_checkpoint(path, model)
    if quant is None:
        template = jax.eval_shape(lambda: init_params(found, jax.random.key(0)))
    else:
        qc = QuantConfig(block_size=quant["block_size"], double_quant=quant["double_quant"])
        template = jax.eval_shape(lambda: quantize_params(init_params(found, jax.random.key(0)), qc))
    try:
        params = ckpt.load_params(resolved, template)
    except ckpt.CheckpointError as err:
        raise TrainingError(f"base: {err}") from err
    return found, params, quant


@field_hints
@dataclasses.dataclass(frozen=True)
class QuantizeBaseConfig:
    """Quantize a base model's projections to NF4 once, for many QLoRA fine-tunes."""

    base: str
    """A train_lm output, a checkpoint folder or a Hugging Face Llama folder."""
    output_path: str
    """Where checkpoints/step-000000 (the quantized parameters) goes."""
    quant: QuantConfig = QuantConfig()
    """Block size and double quantization."""
    model: LlamaConfig | None = None
    """Expected model shape (checked against the base); None takes the base's."""
