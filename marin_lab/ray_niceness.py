"""Ray workers at the driver's priority, for every Ray that marin_lab starts itself, and a local Ray
started again when it timed out during startup (`init_local_ray`).

Ray starts its worker processes at nice 15 (its `worker_niceness` setting) so that a worker can never
starve the raylet and GCS beside it. For marin_lab those workers *are* the experiment: every step of
the ray backend, the simulated hosts of a slice and Levanter's cache builders run in them. At nice 15
a step gets ~3% of a core next to one ordinary busy process (the kernel's weights for nice 15 and
nice 0 are 36 and 1024), so on a shared workstation or CI machine a 46-second step was still running
after 10 minutes. At nice 0 they compete like the driver that started them.

Dependency-free: the Levanter backend imports it inside its own environment.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from typing import Any

logger = logging.getLogger(__name__)

WORKER_NICENESS_VAR = "RAY_worker_niceness"
"""Ray reads every `RAY_<setting>` variable when a raylet starts; the raylet sets its workers' nice."""


def run_workers_at_normal_priority(env: MutableMapping[str, str] | None = None) -> None:
    """Before starting a Ray (in this process or a child given `env`): its workers run at nice 0.

    A value the user set (`RAY_worker_niceness=15`, to keep Ray in the background) wins. A Ray that
    is already running, or a cluster joined by address, keeps its own setting."""
    (os.environ if env is None else env).setdefault(WORKER_NICENESS_VAR, "0")


NODE_START_TIMEOUT = "timed out during startup"
"""What Ray's exception says when the raylet did not register with the GCS within Ray's own 30 s
(`ray._private.node`, not configurable): on a 2-core machine under load this happens now and then."""


def init_local_ray(attempts: int = 3, **kwargs: Any) -> Any:
    """`ray.init(address="local", **kwargs)`, started again (after `ray.shutdown()`) when the node
    timed out during startup, up to `attempts` times; any other error, or the last timeout, is raised."""
    import ray

    for attempt in range(1, attempts):
        try:
            return ray.init(address="local", **kwargs)
        except Exception as err:  # noqa: BLE001 - Ray raises a bare Exception for this
            if NODE_START_TIMEOUT not in str(err):
                raise
            ray.shutdown()
            logger.warning("local Ray %s (attempt %d of %d); starting it again", NODE_START_TIMEOUT, attempt, attempts)
    return ray.init(address="local", **kwargs)
