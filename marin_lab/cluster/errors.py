"""Errors raised by the cluster package.

    MarinLabError                      (marin_lab.execution.errors)
    ├── PreemptedError                 the step lost its hardware; retried within the preemption budget
    │   └── SliceCapacityTimeout       no whole slices came back within the wait
    └── ClusterError
        ├── TpuRequestError            a bad TPU request (unknown type, impossible slice count, ...)
        ├── ClusterConfigError         a cluster config file that cannot be used (missing zone, ...)
        ├── ProvisioningError          the TPU API reported FAILED or refused a request
        └── StepCancelled              the driver cancelled a running step (every host was stopped)

`PreemptedError` and `MarinLabError` are the executor's own (`marin_lab.execution.errors`), so its
`except PreemptedError` catches a slice's preemption.
"""

from __future__ import annotations

from marin_lab.execution.errors import MarinLabError, PreemptedError


class SliceCapacityTimeout(PreemptedError):
    """Whole TPU slices did not become free in time; counted as a preemption (capacity was lost)."""


class ClusterError(MarinLabError):
    """Base of the cluster package's own errors."""


class TpuRequestError(ClusterError, ValueError):
    """A TPU request that can never be satisfied; raised before anything runs."""


class ClusterConfigError(ClusterError, ValueError):
    """A cluster config file that is incomplete or inconsistent."""


class ProvisioningError(ClusterError):
    """The TPU API refused a request or a queued resource ended FAILED."""


class StepCancelled(ClusterError):
    """The run was cancelled from the driver (e.g. the executor lost the step's lease)."""


__all__ = [
    "ClusterConfigError",
    "ClusterError",
    "MarinLabError",
    "PreemptedError",
    "ProvisioningError",
    "SliceCapacityTimeout",
    "StepCancelled",
    "TpuRequestError",
]
