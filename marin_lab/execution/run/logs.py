"""A step's output, kept: stdout, stderr and log records saved under `{output}/logs/` and echoed.

Workers are not terminals, and on Ray their output lands in files on whichever node ran them.
So the worker that runs a step's function captures its own file descriptors 1 and 2 for the
duration of the call (C libraries, subprocesses and Python alike), and a reader thread

  - appends every line to `{output}/logs/attempt-{n}.log` (local paths: written as it comes;
    object stores: the whole file re-uploaded every few seconds and once at the end, since they
    cannot append),
  - echoes it to the worker's own stdout/stderr prefixed by `[step]`; a local worker shares the
    driver's terminal, and Ray forwards a worker's output to its driver,
  - turns progress bars (lines redrawn with carriage returns, as tqdm draws them) into one line
    every `progress_every_s` instead of hundreds of redraws, and remembers the latest for the
    status heartbeat.

Libraries' own progress bars (datasets' `Map:`, huggingface_hub's downloads) are off for the call
unless verbose (`quiet_progress_bars`); marin_lab's own bars stay.

Secrets never reach the log or the terminal: each line goes through `execution.secrets` (the values
of secret-named environment variables and of secret-named config fields, credential shapes, URL
passwords) before it is written or echoed.

Capture costs time linear in the bytes printed, whatever their shape: one 128 MiB line is written
in 1 MiB pieces as it arrives (`MAX_PIECE`), never gathered whole; see `_Reader`.

Log records are part of stderr: the root logger gets a handler at INFO for the call, so a data
step's summary line ("dedup_fuzzy: kept 584, removed 413") reaches the file and the terminal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
import selectors
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import IO, Any

from marin_lab.io.fs import atomic_write_bytes, fs_and_path, is_local
from marin_lab.io.secrets import Scrubber, text_scrubber
from marin_lab.store.layout import step_log_url

logger = logging.getLogger(__name__)

TAIL_BYTES = 8192
READ_BYTES = 65536
MAX_PIECE = 1 << 20
"""A line longer than this is scrubbed, written and echoed in pieces as it arrives."""
QUIET_S = 0.2
"""After the step returns, its output is complete at the first quiet moment this long."""
_LINE_END = re.compile(rb"\r|\n")
# Libraries that say something harmless on every CPU step (JAX probing for TPUs, absl), kept quiet.
_NOISY_LOGGERS = ("jax._src.xla_bridge", "absl")

VERBOSE_ENV = "MARIN_LAB_VERBOSE"
"""Set (`--verbose`): a step's own log handler passes every library's INFO lines too."""


QUIET_LIBRARIES = frozenset(
    {
        "absl",
        "datasets",
        "filelock",
        "fsspec",
        "gcsfs",
        "httpx",
        "huggingface_hub",
        "jax",
        "jaxlib",
        "lm_eval",
        "lm-eval",
        "numba",
        "orbax",
        "ray",
        "tensorstore",
        "torch",
        "transformers",
        "urllib3",
        "wandb",
    }
)
"""Libraries whose INFO lines ("datasets: JAX version ... available", lm-eval's seeds) a person
watching a run does not need; their warnings and errors always show."""


# Libraries' own progress bars ("Map: 100%|██████| 36/36"), off in a step unless verbose. Each library
# reads its variable when it is imported (the step's worker imports them later, if at all); one
# already imported is told directly, so nothing is imported here.
PROGRESS_BAR_ENV = {
    "datasets": "HF_DATASETS_DISABLE_PROGRESS_BARS",
    "huggingface_hub": "HF_HUB_DISABLE_PROGRESS_BARS",
}


def quiet_progress_bars() -> Callable[[], None]:
    """Turn `PROGRESS_BAR_ENV`'s bars off for a step unless verbose or the variable is already set
    (the person's choice wins); returns what undoes it."""
    undo: list[Callable[[], Any]] = []
    if os.environ.get(VERBOSE_ENV):
        return lambda: None
    for module, variable in PROGRESS_BAR_ENV.items():
        if variable in os.environ:
            continue
        os.environ[variable] = "1"
        undo.append(functools.partial(os.environ.pop, variable, None))
        if module == "datasets" and "datasets" in sys.modules:
            datasets = sys.modules["datasets"]
            if datasets.is_progress_bar_enabled():
                datasets.disable_progress_bars()
                undo.append(datasets.enable_progress_bars)
        elif module == "huggingface_hub" and "huggingface_hub.utils" in sys.modules:
            hub = sys.modules["huggingface_hub.utils"]
            if not hub.are_progress_bars_disabled():
                hub.disable_progress_bars()
                undo.append(hub.enable_progress_bars)

    def restore() -> None:
        for step in reversed(undo):
            step()

    return restore


def quiet_libraries(record: logging.LogRecord) -> bool:
    """The step's handler filter: every record but the INFO and DEBUG lines of `QUIET_LIBRARIES`
    (the step's own loggers, marin_lab's and the user's, always pass); `--verbose` keeps those too."""
    if record.levelno >= logging.WARNING:
        return True
    return record.name.split(".", 1)[0] not in QUIET_LIBRARIES


log_url = step_log_url
"""Where attempt `attempt` of the step at `output_path` keeps its output (the store names it)."""


@dataclasses.dataclass(frozen=True)
class LogSpec:
    """Where one attempt of one step keeps its output, and how it is shown."""

    url: str
    label: str
    """Printed before each echoed line: the step's identity."""
    echo: bool = True
    upload_every_s: float = 5.0
    """Object stores only: how often the growing file is uploaded."""
    progress_every_s: float = 10.0
    """A progress bar redrawn in place is logged and echoed at most this often."""


def call_with_logs(spec: LogSpec, fn: Callable[[Any], Any], config: Any) -> Any:
    """`fn(config)` with its output captured as the module docstring says; runs in the worker."""
    with capture(spec):
        try:
            return fn(config)
        except KeyboardInterrupt:  # cancelled (the run was interrupted): not the step's own failure
            print("cancelled: the run was interrupted", file=sys.stderr, flush=True)
            raise
        except BaseException:
            # The traceback belongs in the step's log, where the record points to.
            traceback.print_exc()
            raise


class _Sink:
    """The log file: lines appended locally, uploaded whole to object stores now and then."""

    def __init__(self, spec: LogSpec):
        self.spec = spec
        self.lock = threading.Lock()
        self.local = is_local(spec.url)
        self.file: IO[bytes]
        if self.local:
            path = spec.url.removeprefix("file://")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.file = open(path, "ab", buffering=0)  # noqa: SIM115 - closed in close()
        else:
            self.file = tempfile.NamedTemporaryFile(prefix="marin-lab-log-", suffix=".log")  # noqa: SIM115
        self.dirty = False
        self.last_upload = 0.0
        if not self.local:  # the log's existence says the step's work has started (the driver watches it)
            self._upload()

    def write(self, data: bytes) -> None:
        with self.lock:
            self.file.write(data)
            self.dirty = True
            if not self.local and time.monotonic() - self.last_upload >= self.spec.upload_every_s:
                self._upload()

    def _upload(self) -> None:
        self.file.flush()
        self.last_upload = time.monotonic()
        self.dirty = False
        try:
            with open(self.file.name, "rb") as f:
                atomic_write_bytes(self.spec.url, f.read())
        except Exception as err:  # a log upload never fails the step; say it on the real stderr
            if sys.__stderr__ is not None:  # None in a process started without a stderr
                sys.__stderr__.write(f"[{self.spec.label}] could not upload its log to {self.spec.url}: {err}\n")

    def close(self) -> None:
        with self.lock:
            if not self.local and (self.dirty or self.last_upload == 0.0):
                self._upload()
            self.file.close()


class _Reader:
    """One captured descriptor: lines to the sink and echoed; progress redraws throttled. Read by
    the process's `_Pump`.

    Work is linear in the bytes read: each chunk is scanned once for line ends, and a line longer
    than `MAX_PIECE` is scrubbed and written in pieces as it arrives (`Scrubber.split` keeps the
    few characters a secret could straddle), so no line is ever held, searched or copied whole.
    """

    def __init__(self, fd: int, echo_fd: int, sink: Any, spec: LogSpec, state: dict[str, Any]):
        self.fd, self.echo_fd, self.sink, self.spec, self.state = fd, echo_fd, sink, spec, state
        self.prefix = f"[{spec.label}] ".encode()
        self.pending_progress: bytes | None = None
        self.last_progress = 0.0
        self.partial = bytearray()  # the current line's bytes since its last written piece
        self.carry = ""  # a long line's text held back by Scrubber.split
        self.in_pieces = False  # some of the current line is already written
        self.scrub: Scrubber = text_scrubber()
        self.counts = {"scrubbed_chars": 0, "largest_scrub": 0, "pieces": 0}
        self.closing = threading.Event()
        """Set when the step has returned: the end of its output is the first quiet moment."""
        self.done = threading.Event()
        """Set when the step's output is all written and echoed."""
        self.last = time.monotonic()
        """When output last came (or reading began)."""

    def read(self) -> bool:
        """Take what the pipe holds; False at its end (every holder of the write end is gone).
        After `done`, what comes is dropped: a process the step left running (W&B's service) may
        hold the pipe for as long as it lives, and must never block on a full pipe or die of SIGPIPE."""
        try:
            chunk = os.read(self.fd, READ_BYTES)
        except OSError:
            chunk = b""
        if not chunk:
            return False
        if not self.done.is_set():
            self.last = time.monotonic()
            self.feed(chunk)
        return True

    def quiet(self, now: float) -> bool:
        """The step has returned and nothing came for `QUIET_S`: what the step itself wrote is
        already in the pipe, so its output is over, whoever still holds the pipe."""
        return self.closing.is_set() and now - self.last >= QUIET_S

    def end(self) -> None:
        if not self.done.is_set():
            self.finish()
            self.done.set()

    def feed(self, chunk: bytes) -> None:
        """One chunk of output: every line it ends is handled, the rest kept (or written in pieces)."""
        # Asked once per chunk, not per line: a secret set in the environment is known from the
        # next chunk on, and a chunk of short lines pays for one look at the environment.
        self.scrub = text_scrubber()
        start = 0
        for m in _LINE_END.finditer(chunk):
            segment = chunk[start : m.start()]
            if self.partial:
                self.partial += segment
                segment = bytes(self.partial)
                self.partial.clear()
            start = m.end()
            self._end_of_line(segment, chunk[m.start() : m.end()])
        if start < len(chunk):
            self.partial += chunk[start:]
            if len(self.partial) >= MAX_PIECE:
                self._write_piece()

    def finish(self) -> None:
        """The end of the output: what is left is a last line without its newline."""
        if self.partial or self.in_pieces or self.carry:
            segment = bytes(self.partial)
            self.partial.clear()
            self._end_of_line(segment, b"\n")
        if self.pending_progress:
            self._line(self.pending_progress)

    def _end_of_line(self, segment: bytes, ending: bytes) -> None:
        if self.in_pieces or self.carry:  # the end of a long line (a newline or a carriage return)
            self._emit(self.carry + segment.decode("utf-8", "surrogateescape"), last=True)
            return
        if ending == b"\r":
            if segment.strip():
                self._progress(segment)
        else:
            self.pending_progress = None  # a bar's final state ends with a newline
            self._line(segment)

    def _write_piece(self) -> None:
        """Write the start of a long line that is still going on (never splitting a character)."""
        cut = _utf8_boundary(self.partial)
        text = self.carry + self.partial[:cut].decode("utf-8", "surrogateescape")
        del self.partial[:cut]
        self._emit(text, last=False)

    def _emit(self, text: str, *, last: bool) -> None:
        if last:
            clean, self.carry = self._scrubbed(text), ""
        else:
            self._count(text)
            clean, self.carry = self.scrub.split(text)
        data = clean.encode("utf-8", "surrogateescape")
        if not data and not last:
            return
        first = not self.in_pieces
        self.in_pieces = not last
        self.counts["pieces"] += 1
        self.state["last_line"] = data[:TAIL_BYTES] if first else self.state.get("last_line", b"")
        self._out(data + (b"\n" if last else b""), first)

    def _progress(self, segment: bytes) -> None:
        segment = self._scrubbed_bytes(segment)
        self.state["last_line"] = segment
        now = time.monotonic()
        if now - self.last_progress >= self.spec.progress_every_s:
            self.last_progress = now
            self.pending_progress = None
            self._out(segment + b"\n", True)
        else:
            self.pending_progress = segment

    def _line(self, line: bytes) -> None:
        line = self._scrubbed_bytes(line)
        if line.strip():
            self.state["last_line"] = line
        self._out(line + b"\n", True)

    def _out(self, data: bytes, first: bool) -> None:
        self.sink.write(data)
        if self.spec.echo:
            with contextlib.suppress(OSError):
                os.write(self.echo_fd, self.prefix + data if first else data)

    def _count(self, text: str) -> None:
        self.counts["scrubbed_chars"] += len(text)
        self.counts["largest_scrub"] = max(self.counts["largest_scrub"], len(text))

    def _scrubbed(self, text: str) -> str:
        self._count(text)
        return self.scrub(text)

    def _scrubbed_bytes(self, line: bytes) -> bytes:
        text = line.decode("utf-8", errors="surrogateescape")
        cleaned = self._scrubbed(text)
        return line if cleaned == text else cleaned.encode("utf-8", errors="surrogateescape")


def _utf8_boundary(data: bytearray) -> int:
    """The largest cut <= len(data) that does not split a UTF-8 character (at most 3 bytes back)."""
    cut = len(data)
    for back in range(1, min(4, len(data)) + 1):
        byte = data[len(data) - back]
        if byte & 0xC0 != 0x80:  # the first byte (or an ASCII byte) of the last character
            needed = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
            return cut - back if needed > back else cut
    return cut


class _Pump:
    """Reads every captured descriptor of this process from one thread: a worker runs step after
    step, and two reader threads started for each cost two thread starts on each step's path
    (round trips through the scheduler, milliseconds on a busy machine)."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # threads and their locks do not cross a fork

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._new: list[_Reader] = []
        self._wake: int | None = None

    def add(self, readers: list[_Reader]) -> None:
        with self._lock:
            self._new.extend(readers)
            if self._wake is None:
                wake_read, self._wake = os.pipe()
                os.set_blocking(self._wake, False)  # a full wake pipe already wakes the pump
                threading.Thread(target=self._run, args=(wake_read,), name="step-logs", daemon=True).start()
        self.poke()

    def poke(self) -> None:
        """Look again now (readers were added, or a step returned)."""
        wake = self._wake
        if wake is not None:
            with contextlib.suppress(OSError):  # full: the pump is woken already
                os.write(wake, b".")

    def _run(self, wake: int) -> None:
        selector = selectors.DefaultSelector()
        selector.register(wake, selectors.EVENT_READ)
        readers: set[_Reader] = set()
        while True:
            with self._lock:
                new, self._new = self._new, []
            for reader in new:
                selector.register(reader.fd, selectors.EVENT_READ, reader)
                readers.add(reader)
            waiting = any(not r.done.is_set() for r in readers)
            for key, _ in selector.select(QUIET_S if waiting else None):
                if key.data is None:
                    os.read(wake, 4096)
                elif not self._step(key.data):
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    readers.discard(key.data)
            now = time.monotonic()
            for reader in readers:
                if not reader.done.is_set() and reader.quiet(now):
                    self._step(reader, end=True)

    def _step(self, reader: _Reader, *, end: bool = False) -> bool:
        """Read (or end) one descriptor; False at the end of its pipe. A failure ends that
        descriptor's capture, said on the real stderr, never the pump."""
        try:
            if not end and reader.read():
                return True
            reader.end()
            return end
        except Exception as err:  # noqa: BLE001 - one step's log must not stop every other's
            if sys.__stderr__ is not None:
                sys.__stderr__.write(f"[{reader.spec.label}] its log stopped: {type(err).__name__}: {err}\n")
            reader.done.set()
            return end


_PUMP = _Pump()


class capture:  # noqa: N801 - used as a context manager, like contextlib's
    """Capture fds 1 and 2 into the step's log for the `with` block (see the module docstring)."""

    def __init__(self, spec: LogSpec):
        self.spec = spec
        self.state: dict[str, Any] = {}

    def __enter__(self) -> capture:
        for stream in (sys.stdout, sys.stderr):
            _flush(stream)
        self.sink = _Sink(self.spec)
        self.saved = {fd: os.dup(fd) for fd in (1, 2)}
        self.readers = []
        for fd in (1, 2):
            read_end, write_end = os.pipe()
            os.dup2(write_end, fd)
            os.close(write_end)
            self.readers.append(_Reader(read_end, self.saved[fd], self.sink, self.spec, self.state))
        _PUMP.add(self.readers)
        self._setup_logging()
        self.restore_progress_bars = quiet_progress_bars()
        return self

    def _setup_logging(self) -> None:
        root = logging.getLogger()
        self.saved_level = root.level
        if root.level > logging.INFO or root.level == logging.NOTSET:
            root.setLevel(logging.INFO)
        # A handler of our own unless one already writes to the (now captured) standard streams.
        streams = {getattr(h, "stream", None) for h in root.handlers}
        self.handler: logging.Handler | None = None
        if not streams & {sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__}:
            self.handler = logging.StreamHandler(sys.stderr)
            self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            if not os.environ.get(VERBOSE_ENV):
                self.handler.addFilter(quiet_libraries)
            root.addHandler(self.handler)
        self.saved_noisy = {name: logging.getLogger(name).level for name in _NOISY_LOGGERS}
        for name in _NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)

    def __exit__(self, *exc: object) -> None:
        self.restore_progress_bars()
        root = logging.getLogger()
        if self.handler is not None:
            self.handler.flush()
            root.removeHandler(self.handler)
        root.setLevel(self.saved_level)
        for name, level in self.saved_noisy.items():
            logging.getLogger(name).setLevel(level)
        for stream in (sys.stdout, sys.stderr):
            _flush(stream)
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)  # closes our pipe's write end: the reader sees the end of its input
        for reader in self.readers:
            reader.closing.set()
        _PUMP.poke()
        for reader in self.readers:
            # Done at the end of the pipe or once it is quiet (a process the step left running, such
            # as W&B's service, may hold the write end open for as long as it lives); the wait is
            # bounded in case output never pauses.
            reader.done.wait(timeout=10)
        for saved in self.saved.values():
            os.close(saved)
        self.sink.close()


def _flush(stream: Any) -> None:
    with contextlib.suppress(Exception):  # a closed or replaced stream
        stream.flush()


def log_exists(url: str) -> bool:
    """Whether a step's log is there: its worker opens it as the step's work starts."""
    if is_local(url):
        return os.path.exists(url.removeprefix("file://"))
    try:
        fs, path = fs_and_path(url)
        return bool(fs.exists(path))
    except Exception:  # storage trouble: asked again on the next poll
        return False


def read_tail(url: str, max_bytes: int = TAIL_BYTES) -> str:
    """The end of a log (at most `max_bytes`), or '' if there is none yet."""
    try:
        if is_local(url):
            path = url.removeprefix("file://")
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                data = f.read()
        else:
            fs, path = fs_and_path(url)
            size = fs.size(path)
            data = fs.cat_file(path, start=max(0, size - max_bytes))
    except (FileNotFoundError, NotADirectoryError):
        return ""
    return data.decode("utf-8", errors="replace")


def last_line(text: str, max_chars: int = 200) -> str | None:
    """The last non-blank line of `text` (its latest progress redraw if it ends in one), cut short."""
    for line in reversed(text.replace("\r", "\n").splitlines()):
        if line.strip():
            line = line.strip()
            return line if len(line) <= max_chars else line[: max_chars - 1] + "…"
    return None
