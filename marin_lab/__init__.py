"""marin_lab: an open-lab experiment orchestrator for language-model research."""

__version__ = "0.1.0"

from marin_lab.jax_platform import default_compilation_cache as _default_compilation_cache
from marin_lab.jax_platform import default_to_cpu as _default_to_cpu

# Before anything imports JAX's backends: no libtpu probe (and its errors) on a host without a TPU.
_default_to_cpu()
# Before anything compiles: programs are kept on disk and read back by the next process.
_default_compilation_cache()
