"""Resource requests spelled as dicts (configs in YAML): `resources_from_dict`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from marin_lab.cluster.alternatives import TpuAlternatives, with_slice_count
from marin_lab.cluster.errors import ClusterError, TpuRequestError
from marin_lab.cluster.resources import CpuResources, GpuResources, TpuResources

_TPU_KEYS = {f.name for f in dataclasses.fields(TpuResources)}


def resources_from_dict(spec: Mapping[str, Any]) -> Any:
    """Build a resource request from a dict: {"tpu": "v5e-256", "slices": 2}, {"gpus": 1}, {"cpus": 4};
    {"tpu": ["v5p-64", "2 x v5e-256"], "wait_s": 600} is a TpuAlternatives."""
    spec = dict(spec)
    if isinstance(spec.get("tpu"), (list, tuple)):
        fields = {f.name for f in dataclasses.fields(TpuAlternatives)} - {"options"}
        unknown = set(spec) - fields - {"tpu", "slices"}
        if unknown:
            raise TpuRequestError(
                f"unknown TPU alternatives field(s) {sorted(unknown)}; known: tpu, slices, {', '.join(sorted(fields))}"
            )
        options = with_slice_count(spec.pop("tpu"), spec.pop("slices", 1))
        alternatives = TpuAlternatives(options, **spec)
        alternatives.validate()
        return alternatives
    if "tpu" in spec:
        unknown = set(spec) - _TPU_KEYS
        if unknown:
            raise TpuRequestError(f"unknown TPU resource field(s) {sorted(unknown)}; known: {sorted(_TPU_KEYS)}")
        resources: TpuResources | GpuResources | CpuResources = TpuResources(**spec)
    else:
        aliases = {"num_gpus": "gpus", "gpu": "gpus", "num_cpus": "cpus", "cpu": "cpus"}
        spec = {aliases.get(k, k): v for k, v in spec.items()}
        if "memory" in spec:  # Ray's option is in bytes
            spec["memory_gb"] = spec.pop("memory") / 2**30
        cls = GpuResources if "gpus" in spec else CpuResources
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(spec) - known
        if unknown:
            raise ClusterError(f"unknown {cls.__name__} field(s) {sorted(unknown)}; known: {sorted(known)}")
        resources = cls(**spec)
    resources.validate()
    return resources


__all__ = ["resources_from_dict"]
