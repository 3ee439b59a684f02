"""The root of marin_lab's error tree, importable from anywhere (standard library only).

Each package adds its own branch: `marin_lab.execution.errors` (the executor's tree, drawn there),
`marin_lab.processing.errors`, `marin_lab.training.errors`, `marin_lab.evaluation`,
`marin_lab.browser.errors`, `marin_lab.cluster.errors`. Step functions subclass this root without
importing the executor.

Every error here survives pickling, whatever its `__init__` takes: step functions run in worker
processes (a process pool, Ray tasks), and an error that cannot cross back arrives as an
unrelated `BrokenProcessPool` or a Ray wrapper without its message, file or line.
"""

from __future__ import annotations

from typing import Any


def _rebuild(cls: type[BaseException], args: tuple, state: dict[str, Any]) -> BaseException:
    """An exception of `cls` with these `args` and attributes, without calling its `__init__`."""
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class MarinLabError(Exception):
    """Root of every error marin_lab raises on purpose."""

    def __reduce__(self) -> tuple:
        # The default, `cls(*self.args)`, breaks for any subclass whose __init__ takes other
        # arguments than the message it passes up (BadRecordError(path, line, reason, detail)).
        return _rebuild, (type(self), self.args, dict(self.__dict__))
