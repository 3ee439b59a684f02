"""Errors the browser turns into HTTP answers.

    MarinLabError
    └── BrowserError            (500; never raised for a corrupt record, which is shown as corrupt)
        ├── BadRequestError     (400) a malformed query: a bad cursor, a non-integer limit
        ├── ForbiddenPathError  (403) a path outside the configured roots
        └── NotFoundError       (404) an experiment, step or file that does not exist
"""

from __future__ import annotations

from marin_lab.execution.errors import MarinLabError


class BrowserError(MarinLabError):
    """Root of the browser's errors; `status` is the HTTP status the server answers with."""

    status = 500


class BadRequestError(BrowserError):
    status = 400


class ForbiddenPathError(BrowserError):
    status = 403


class NotFoundError(BrowserError):
    status = 404
