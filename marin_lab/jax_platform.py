"""On a host with no accelerator, JAX is told to use its CPU backend and nothing else.

JAX looks for every backend it has a plugin for when it first makes a device; with libtpu installed
(the `tpu` extra) that probe loads libtpu on a plain CPU machine, which then prints errors about
the missing TPU metadata server (`unexpected worker hostname`, `could not determine TPU accelerator
type`), or not, depending on timing. So `import marin_lab` itself, on a host where no TPU or GPU
device is found, sets `JAX_PLATFORMS=cpu` (and libtpu's `TPU_SKIP_MDS_QUERY`) for this process and
everything it starts; when JAX was imported first and has made no device yet, its setting is changed
too. A value the user set is kept. `marin-lab compile` still loads libtpu on purpose to describe a
TPU topology: that needs no TPU backend. Standard library only: it runs at `import marin_lab`.
"""

from __future__ import annotations

import glob
import os
import sys

_ACCELERATOR_DEVICES = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*", "/dev/kfd")
_ACCELERATOR_VARIABLES = ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "CUDA_VISIBLE_DEVICES")


def has_accelerator() -> bool:
    """Whether this host looks like it has a TPU or a GPU (device files or the usual variables)."""
    if any(os.environ.get(name) for name in _ACCELERATOR_VARIABLES):
        return True
    return any(glob.glob(pattern) for pattern in _ACCELERATOR_DEVICES)


def default_to_cpu() -> None:
    """Pin JAX to its CPU backend for this process and its children, unless JAX_PLATFORMS is set or
    an accelerator is here."""
    if "JAX_PLATFORMS" in os.environ or has_accelerator():
        return
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    jax = sys.modules.get("jax")
    if jax is None:
        return
    # JAX read the variable when it was imported; until it makes its first device, its setting decides.
    try:
        from jax._src import xla_bridge

        if not xla_bridge.backends_are_initialized():
            jax.config.update("jax_platforms", "cpu")
    except (ImportError, AttributeError):  # another JAX than the one this was written against
        pass


CACHE_ENV = "MARIN_JAX_CACHE"
"""A folder for JAX's persistent compilation cache, or `off`; unset: `~/.cache/marin_lab/jax`."""


def default_compilation_cache() -> None:
    """Give JAX a persistent compilation cache unless the user set one (`JAX_COMPILATION_CACHE_DIR`)
    or turned it off (`MARIN_JAX_CACHE=off`): a program compiled once (a training step, the scorer's
    padded lengths, a sampler) is read back by the next process that compiles it, on this host or, with
    a shared folder, any host. Every program is kept however fast it compiled (most are 0.05-0.5 s),
    unless the user set `JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`."""
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    folder = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "marin_lab", "jax"
    )
    if folder.lower() in ("off", "0", "false", "none"):
        return
    os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
    min_time_set = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" in os.environ
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    jax = sys.modules.get("jax")
    if jax is None:
        return
    # JAX read the variables when it was imported; its cache opens at the first compile.
    try:
        jax.config.update("jax_compilation_cache_dir", folder)
        if not min_time_set:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    except AttributeError:  # another JAX than the one this was written against
        pass
