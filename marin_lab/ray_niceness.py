"""Ray workers at the driver's priority, for every Ray that marin_lab starts itself.

Ray starts its worker processes at nice 15 (its `worker_niceness` setting) so that a worker can never
starve the raylet and GCS beside it. For marin_lab those workers *are* the experiment: every step of
the ray backend, the simulated hosts of a slice and Levanter's cache builders run in them. At nice 15
a step gets ~3% of a core next to one ordinary busy process (the kernel's weights for nice 15 and
nice 0 are 36 and 1024), so on a shared workstation or CI machine a 46-second step was still running
after 10 minutes. At nice 0 they compete like the driver that started them.

Dependency-free: the Levanter backend imports it inside its own environment.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

WORKER_NICENESS_VAR = "RAY_worker_niceness"
"""Ray reads every `RAY_<setting>` variable when a raylet starts; the raylet sets its workers' nice."""


def run_workers_at_normal_priority(env: MutableMapping[str, str] | None = None) -> None:
    """Before starting a Ray (in this process or a child given `env`): its workers run at nice 0.

    A value the user set (`RAY_worker_niceness=15`, to keep Ray in the background) wins. A Ray that
    is already running, or a cluster joined by address, keeps its own setting."""
    (os.environ if env is None else env).setdefault(WORKER_NICENESS_VAR, "0")
