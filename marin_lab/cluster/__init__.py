"""Preemptible TPU clusters: slice-aware running on Ray, preemption handling, provisioning.

Users write `ExecutorStep(..., resources=TpuResources(tpu="v5e-256", slices=2))`, or
`TpuAlternatives(["v5p-64", "2 x v5e-256"])` for any of several shapes (`alternatives.py`). The executor
calls the resource object's `validate()` while planning and its `run(fn, config, step_name=...)`
on the Ray backend; a lost slice surfaces as `PreemptedError`, retried from the preemption budget,
anything else as a failure. Provisioning (queued resources through the Cloud TPU API) and the
`marin-lab cluster up|status|down` commands live in `provision.py` and `cli.py`.
"""

from marin_lab.cluster.alternatives import TpuAlternatives
from marin_lab.cluster.classify import (
    FAILURE,
    PREEMPTION,
    FilePreemptionProbe,
    MetadataPreemptionProbe,
    classify_error,
)
from marin_lab.cluster.errors import (
    ClusterConfigError,
    ClusterError,
    PreemptedError,
    ProvisioningError,
    SliceCapacityTimeout,
    StepCancelled,
    TpuRequestError,
)
from marin_lab.cluster.requests import resources_from_dict
from marin_lab.cluster.resources import CpuResources, GpuResources, TpuResources
from marin_lab.cluster.tpu_types import TpuType, known_types, parse_tpu_type

__all__ = [
    "FAILURE",
    "PREEMPTION",
    "ClusterConfigError",
    "ClusterError",
    "CpuResources",
    "FilePreemptionProbe",
    "GpuResources",
    "MetadataPreemptionProbe",
    "PreemptedError",
    "ProvisioningError",
    "SliceCapacityTimeout",
    "StepCancelled",
    "TpuAlternatives",
    "TpuRequestError",
    "TpuResources",
    "TpuType",
    "classify_error",
    "known_types",
    "parse_tpu_type",
    "resources_from_dict",
]
