"""The steps a `StepRunner` is given, in batches, pulled as they are needed (Marin's runner consumes
its iterable lazily: a generator of steps may never end on its own).

A list or tuple is one batch: it is in memory already, and its whole graph is planned at once. Any
other iterable is read by one thread into a queue of at most `size` steps; each batch is what the
queue holds (at least one step, at most `size`), so a batch runs while the iterable is read on, and
a generator that waits for an earlier step's output before yielding the next one is served. At most
about `2 * size` steps are held at once, whatever the iterable's length.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["batches"]

S = TypeVar("S")

_END = "end"
_STEP = "step"
_ERROR = "error"


def batches(steps: Iterable[S], size: int) -> Iterator[list[S]]:
    """`steps` in batches of at most `size` (a list or tuple: one batch). An error the iterable
    raises is raised here, after the batches it yielded before it."""
    if size < 1:
        raise ValueError(f"batch_size must be at least 1, got {size}")
    if isinstance(steps, (list, tuple)):
        if steps:
            yield list(steps)
        return
    reader = _Reader(iter(steps), size)
    try:
        yield from reader.batches()
    finally:
        reader.close()


class _Reader:
    """Reads an iterator in a daemon thread (in a copy of the caller's context) into a bounded queue."""

    def __init__(self, steps: Iterator[Any], size: int):
        self.size = size
        self.queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=size)
        self.closed = threading.Event()
        context = contextvars.copy_context()
        self.thread = threading.Thread(
            target=context.run, args=(self._read, steps), name="marin-step-iterable", daemon=True
        )
        self.thread.start()

    def _read(self, steps: Iterator[Any]) -> None:
        try:
            for step in steps:
                if not self._put((_STEP, step)):
                    return
        except BaseException as err:  # handed to the runner's thread, which raises it
            self._put((_ERROR, err))
            return
        self._put((_END, None))

    def _put(self, entry: tuple[str, Any]) -> bool:
        while not self.closed.is_set():
            try:
                self.queue.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def batches(self) -> Iterator[list[Any]]:
        while True:
            entries = [self.queue.get()]  # waits for the iterable's next step (or its end)
            while len(entries) < self.size:
                try:
                    entries.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            batch = [value for kind, value in entries if kind == _STEP]
            if batch:
                yield batch
            for kind, value in entries:
                if kind == _ERROR:
                    raise value
                if kind == _END:
                    return

    def close(self) -> None:
        """Stop reading: the thread ends at its next step (a step the iterable is computing is
        left to finish in its daemon thread)."""
        self.closed.set()
