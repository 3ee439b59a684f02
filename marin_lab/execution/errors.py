"""The error tree of marin_lab's executor.

    MarinLabError
    ├── StepDefinitionError        a step or the DAG is malformed (raised before anything runs)
    │   ├── EncodingError          a versioned value is not JSON-like
    │   ├── CycleError             the dependency graph has a cycle
    │   └── MissingDependencyError a step depends on a step that is not in the DAG
    ├── ExecutorConfigError        a bad flag: an invalid --run_only regex, an unknown backend
    │   └── PriceTableError        a --prices table that cannot be used (names the file and entry)
    ├── StorageError               the prefix cannot be read or written
    ├── RecordError                a step record is damaged (names the file and the field)
    ├── LeaseLostError             another driver took over this step's lease; the step stopped
    ├── PreemptedError             the step's worker, node or slice went away (retried separately)
    ├── StepFailedError            a step's fn raised (carries the traceback)
    ├── StepCancelledError         an interrupt (Ctrl-C, SIGTERM) stopped the step: not a failure
    ├── UnschedulableError         no node of the cluster can ever hold a step's resources
    ├── RunInterruptedError        a run stopped by an interrupt (its steps CANCELLED; exit 130)
    └── ExperimentFailedError      a run ended with failed steps (lists them)

Every message names the step (and field or file) and says what to do.
"""

from __future__ import annotations

from marin_lab.errors import MarinLabError  # noqa: E402  (the root lives outside the executor)
from marin_lab.store.errors import RecordError  # the store owns the records it reads

__all__ = ["MarinLabError", "RecordError"]


class StepDefinitionError(MarinLabError):
    """A step or the DAG is malformed; found while planning, before anything runs."""


class EncodingError(StepDefinitionError):
    """A versioned value cannot be encoded canonically."""


class CycleError(StepDefinitionError):
    """The dependency graph has a cycle."""


class MissingDependencyError(StepDefinitionError):
    """A step refers to a step that is not part of the experiment."""


class ExecutorConfigError(MarinLabError):
    """A bad executor flag or option."""


class PriceTableError(ExecutorConfigError):
    """A price table (--prices) names an unknown accelerator, a negative price, or is unreadable."""


class StorageError(MarinLabError):
    """The prefix (or a step's output path) cannot be read or written."""


class LeaseLostError(MarinLabError):
    """This driver lost the lease on a step's output path; the step was stopped."""


class PreemptedError(MarinLabError):
    """The step's worker, node or slice was lost. Retried within the preemption budget."""

    hardware: dict | None = None
    """What the lost attempt ran on, when it got as far as holding hardware (a HardwareRunner sets it)."""


class StepFailedError(MarinLabError):
    """A step's function raised an exception."""

    hardware: dict | None = None
    """What the failed attempt ran on, when a HardwareRunner knows it."""

    def __init__(
        self, message: str, traceback_text: str | None = None, hardware: dict | None = None, final: bool = False
    ):
        super().__init__(message)
        self.traceback_text = traceback_text
        self.final = final
        """Not retried: running it again cannot help (no node of the cluster can hold it)."""
        if hardware is not None:
            self.hardware = hardware


class StepCancelledError(MarinLabError):
    """An interrupt (Ctrl-C, SIGTERM) stopped the step; it runs again on the next run."""


class UnschedulableError(MarinLabError):
    """A step asks for resources no node of the cluster can ever hold (GPUs on a CPU machine, a
    TPU type the cluster lacks, more memory than any node has)."""


class RunInterruptedError(MarinLabError):
    """A run stopped by an interrupt: its running steps were cancelled and recorded CANCELLED.
    `executor_main` exits with `exit_code`: 128 + the signal, as a shell reports it (130 for
    Ctrl-C, 143 for SIGTERM)."""

    exit_code = 130


class ExperimentFailedError(MarinLabError, RuntimeError):
    """A run ended with one or more steps FAILED (or blocked by a failed dependency)."""
