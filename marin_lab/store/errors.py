"""The store's error: a record under a prefix that cannot be read.

`marin_lab.execution.errors` draws it in the executor's error tree (it is the same class).
"""

from __future__ import annotations

from marin_lab.errors import MarinLabError


class RecordError(MarinLabError):
    """A step record that cannot be read: not UTF-8, not JSON, not an object, or a field of the
    wrong type. The message names the file (and the field) and says what to do."""

    def __init__(self, url: str, why: str, field: str | None = None):
        self.url, self.why, self.field = url, why, field
        where = f"field '{field}' " if field else ""
        super().__init__(f"{url}: {where}{why}")
