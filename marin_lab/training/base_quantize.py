"""The `quantize_base` step: a float base (HF safetensors or a train_lm output) quantized to NF4
once and written as an ordinary checkpoint, which QLoRA runs restore directly into their shardings."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
from typing import Any

import jax

from marin_lab.io import fs as mfs
from marin_lab.models.llama import init_params
from marin_lab.training import checkpoint as ckpt
from marin_lab.training.base_model import QUANTIZED_NAMES, QuantizeBaseConfig, quantize_params
from marin_lab.training.base_stream import keep_stored_dtypes, open_base, place_source
from marin_lab.training.errors import TrainingError
from marin_lab.training.finetune_state import frozen_shardings
from marin_lab.training.mesh import MeshConfig

logger = logging.getLogger(__name__)


def _release_freed_memory() -> None:
    """Hand memory glibc keeps after frees back to the OS (a no-op without glibc)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def quantize_base(config: QuantizeBaseConfig) -> dict[str, Any]:
    """Quantize `config.base`'s projections and write them as a checkpoint; returns byte counts.

    The base streams tensor by tensor (`base_stream`) into an FSDP split over this process's
    devices, so no device or host ever holds the whole float model: a 70B base (~35 GB in NF4)
    quantizes on two 24 GB cards. Leaves that are not quantized keep the base's stored dtype, and
    the checkpoint is written one leaf in flight at a time, so the step's host memory is the
    quantized model plus one leaf (benchmarks/qlora_load.py --step).
    """
    source = open_base(config.base, config.model)
    if source.quantization is not None:
        raise TrainingError(
            f"quantize_base: base {config.base} is already quantized ({source.quantization}); use it directly"
        )
    model = source.model
    config.quant.validate(model)
    target = jax.eval_shape(lambda: quantize_params(init_params(model, jax.random.key(0)), config.quant))
    # The embedding, head and norms are written as the base stores them (bf16 for most): widened to
    # fp32 they would double the largest leaves in memory and on disk for the same values.
    target = keep_stored_dtypes(source, target)
    mesh = MeshConfig(data=1, fsdp=-1).build()
    quantized = place_source(source, target, frozen_shardings(target, mesh, "fsdp"), config.quant)
    linear_weights = sum(
        model.param_shapes()[f"layers/{n}"][0]
        * model.param_shapes()[f"layers/{n}"][1]
        * model.param_shapes()[f"layers/{n}"][2]
        for n in QUANTIZED_NAMES
    )
    linear_bytes = sum(
        sum(int(x.size) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(quantized["layers"][n]))
        for n in QUANTIZED_NAMES
    )
    meta = {
        "model": dataclasses.asdict(model),
        "base": config.base,
        "quantization": {
            "format": "nf4",
            "block_size": config.quant.block_size,
            "double_quant": config.quant.double_quant,
            "weights": list(QUANTIZED_NAMES),
        },
    }
    path = ckpt.step_dir(mfs.join(config.output_path, "checkpoints"), 0)
    # One leaf copied for writing at a time: on a CPU host the placed tree is host memory already.
    # What placing left behind (compiled programs, freed buffers glibc still holds) goes first.
    jax.clear_caches()
    _release_freed_memory()
    largest = max(int(x.size) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(quantized))
    # Uncompressed: NF4 codes and bf16 weights hardly compress (measured: +14% on disk for random
    # weights), and zstd's buffers would cost about another leaf of memory.
    ckpt.save_checkpoint(path, {"params": quantized}, {**meta, "step": 0}, max_bytes_in_flight=largest, compress=False)
    summary = {
        "checkpoint": path,
        "linear_weights": linear_weights,
        "linear_bytes": linear_bytes,
        "bytes_per_linear_weight": linear_bytes / linear_weights,
    }
    logger.info(
        "quantize_base %s: %d linear weights -> %.3f bytes/weight",
        config.base,
        linear_weights,
        summary["bytes_per_linear_weight"],
    )
    return summary
