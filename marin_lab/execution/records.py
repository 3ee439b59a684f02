"""The step record (`.executor_info`): its types and its one parser live in `marin_lab.store.step_record`;
re-exported here for the executor's modules."""

from marin_lab.store.errors import RecordError
from marin_lab.store.step_record import (
    SCHEMA,
    Attempt,
    StatusEvent,
    StepRecord,
    Timings,
    parse_step_record,
    read_step_record,
)

__all__ = [
    "SCHEMA",
    "Attempt",
    "RecordError",
    "StatusEvent",
    "StepRecord",
    "Timings",
    "parse_step_record",
    "read_step_record",
]
