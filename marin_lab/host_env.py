"""The environment contract between the slice runner (writer) and the trainer (reader) for one
JAX process per host. Dependency-free so the driver can import it without JAX."""

from __future__ import annotations

import threading

COORDINATOR = "MARIN_COORDINATOR_ADDRESS"
"""`ip:port` of host 0 of slice 0, where JAX's coordination service runs."""
NUM_PROCESSES = "MARIN_NUM_PROCESSES"
"""Hosts in the whole step (all slices)."""
PROCESS_ID = "MARIN_PROCESS_ID"
"""This host's index: `slice_id * hosts_per_slice + worker_id`."""
NUM_SLICES = "MARIN_NUM_SLICES"
"""Slices the step runs on (its mesh's `replica` axis should have as many entries)."""
MESH_FOLLOWS_HARDWARE = "MARIN_MESH_FOLLOWS_HARDWARE"
"""Set to "1" when the step accepted several slice shapes (`TpuAlternatives`): the trainer lays its
mesh's `replica` axis over the slices it was given (`distributed.mesh_for_hardware`)."""

PREEMPTION_NOTICE = threading.Event()
"""Set in a host's process when its VM got a preemption notice (the slice runner polls the
instance metadata): a training loop that sees it saves a checkpoint and stops; the attempt then
counts as a preemption."""


def process_env(coordinator: str, num_processes: int, process_id: int) -> dict[str, str]:
    """The variables one host needs to join the step's JAX cluster."""
    return {COORDINATOR: coordinator, NUM_PROCESSES: str(num_processes), PROCESS_ID: str(process_id)}
