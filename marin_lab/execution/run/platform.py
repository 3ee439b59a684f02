"""On a host with no accelerator, JAX is told to use its CPU backend and nothing else.

JAX looks for every backend it has a plugin for when it first makes a device; with libtpu installed
(the `tpu` extra) that probe loads libtpu on a plain CPU machine, which then prints errors about
the missing TPU metadata server in every step process. A driver that finds no TPU or GPU device
sets `JAX_PLATFORMS=cpu` before it starts anything, so its steps inherit it. A value the user set
is kept, and `marin-lab compile` (which loads libtpu on purpose to describe a TPU topology) does
not go through here.
"""

from __future__ import annotations

import glob
import os

_ACCELERATOR_DEVICES = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*", "/dev/kfd")
_ACCELERATOR_VARIABLES = ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "CUDA_VISIBLE_DEVICES")


def has_accelerator() -> bool:
    """Whether this host looks like it has a TPU or a GPU (device files or the usual variables)."""
    if any(os.environ.get(name) for name in _ACCELERATOR_VARIABLES):
        return True
    return any(glob.glob(pattern) for pattern in _ACCELERATOR_DEVICES)


def default_to_cpu() -> None:
    """Set JAX_PLATFORMS=cpu for this process and its children, unless set or an accelerator is here."""
    if "JAX_PLATFORMS" not in os.environ and not has_accelerator():
        os.environ["JAX_PLATFORMS"] = "cpu"
