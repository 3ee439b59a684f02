"""The one preemption table: which Ray errors mean "the hardware went away".

A lost node, actor, worker or object is a preemption (the same code on healthy hardware would
have gone on) and is retried from the preemption budget; an exception raised by the step itself,
an out-of-memory kill, a runtime-env failure or a timeout is a failure. The executor's backends
and the cluster's runners (`marin_lab.cluster.classify`) both read this table.
"""

from __future__ import annotations

from typing import Literal

ErrorKind = Literal["preemption", "failure"]
PREEMPTION: ErrorKind = "preemption"
FAILURE: ErrorKind = "failure"

# Ray error class name -> kind. Names rather than classes so this module imports without Ray and
# so that a class missing from an older Ray simply never matches.
RAY_ERROR_KINDS: dict[str, ErrorKind] = {
    # the process or machine running the work disappeared
    "ActorDiedError": PREEMPTION,
    "ActorUnavailableError": PREEMPTION,
    "RayActorError": PREEMPTION,
    "WorkerCrashedError": PREEMPTION,
    "NodeDiedError": PREEMPTION,
    "LocalRayletDiedError": PREEMPTION,
    "ObjectLostError": PREEMPTION,
    "OwnerDiedError": PREEMPTION,
    "ObjectReconstructionFailedError": PREEMPTION,
    "ObjectFetchTimedOutError": PREEMPTION,
    "ActorPlacementGroupRemoved": PREEMPTION,
    "TaskPlacementGroupRemoved": PREEMPTION,
    "ActorUnschedulableError": PREEMPTION,
    "TaskUnschedulableError": PREEMPTION,
    "RpcError": PREEMPTION,
    # the work itself is at fault, or retrying cannot help
    "RayTaskError": FAILURE,
    "OutOfMemoryError": FAILURE,
    "ObjectStoreFullError": FAILURE,
    "OutOfDiskError": FAILURE,
    "RuntimeEnvSetupError": FAILURE,
    "TaskCancelledError": FAILURE,
    "GetTimeoutError": FAILURE,
    "RaySystemError": FAILURE,
    "CrossLanguageError": FAILURE,
    "UnserializableException": FAILURE,
}


def ray_error_kind(exc: BaseException) -> ErrorKind | None:
    """The table's answer for a Ray error (by class name along the MRO), None for anything else."""
    for cls in type(exc).__mro__:
        kind = RAY_ERROR_KINDS.get(cls.__name__)
        if kind is not None and cls.__module__.startswith("ray"):
            return kind
    return None
