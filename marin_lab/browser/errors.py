"""Errors the browser turns into HTTP answers.

MarinLabError
└── BrowserError            (500; never raised for a corrupt record, which is shown as corrupt)
    ├── BadRequestError     (400) a malformed query: a bad cursor, a non-integer limit
    ├── ForbiddenPathError  (403) a path outside the configured roots (also an
    │   │                   io.confined.RefusedPathError: the shared reader's refusal)
    │   └── NotRegularFileError     a named pipe, socket or device (never opened)
    ├── NotFoundError       (404) an experiment, step or file that does not exist
    └── TimeoutAnswerError  (504) storage did not answer in time
"""

from __future__ import annotations

from marin_lab.execution.errors import MarinLabError
from marin_lab.io.confined import RefusedPathError


class BrowserError(MarinLabError):
    """Root of the browser's errors; `status` is the HTTP status the server answers with."""

    status = 500


class BadRequestError(BrowserError):
    status = 400


class ForbiddenPathError(BrowserError, RefusedPathError):
    """Also the shared reader's refusal (`marin_lab.io.confined`), so its callers below the browser
    (the evaluation readers) know it without knowing the browser."""

    status = 403


class NotRegularFileError(ForbiddenPathError):
    """A named pipe, socket or device: never opened (reading a FIFO blocks until a writer comes)."""


class NotFoundError(BrowserError):
    status = 404


class TimeoutAnswerError(BrowserError):
    status = 504
