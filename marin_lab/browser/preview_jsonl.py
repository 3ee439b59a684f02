"""Pages of JSON lines (plain, gzip or zstd) read as a stream: a page never reads the whole file.

The cursor is the uncompressed byte offset where the page starts plus the number of the line
there (`"offset:line"`). A plain file seeks straight to the offset. gzip and zstd streams cannot
seek, so a compressed file is decoded from the start up to the offset; to keep paging forward
cheap, the open stream that served a page is kept for a short while, keyed by the cursor of the
next page, and that page continues from it instead of decoding the file again.

Each request's work is bounded whatever the file holds: a page stops after `PAGE_WORK_BYTES` of
content or `PAGE_WORK_LINES` lines (blank ones count), and hands back a cursor to go on from; a
single line is kept up to `MAX_LINE_BYTES`; reaching a cursor in a compressed file decodes at most
`MAX_SKIP_BYTES`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from typing import IO

from marin_lab.browser.errors import BadRequestError
from marin_lab.browser.paths import Roots
from marin_lab.browser.storage import open_file
from marin_lab.io.compression import DECODE_ERRORS, compression_of, open_decompressed

CHUNK = 256 * 1024
# A single enormous line is shown cut, so one bad document cannot exhaust the server's memory.
MAX_LINE_BYTES = 2 * 1024 * 1024
MAX_TEXT_CHARS = 20_000
# Work one page may do before it answers with what it found and a cursor to go on from.
PAGE_WORK_BYTES = 32 * 1024 * 1024
PAGE_WORK_LINES = 100_000
# Decoding a compressed file up to a cursor (after its parked stream expired) costs time in
# proportion to the offset; past this the cursor is refused rather than decoded.
MAX_SKIP_BYTES = 1024 * 1024 * 1024
# Open compressed streams kept for the next page: few (each holds a file handle and a
# decompressor) and short-lived.
KEEP_STREAMS = 8
KEEP_STREAM_S = 300.0
__all__ = ["DECODE_ERRORS", "compression_of", "jsonl_page", "open_stream", "skip_to"]


def open_stream(roots: Roots, url: str) -> IO[bytes]:
    """A binary stream of the decompressed bytes of `url` (confined to `roots`), decoded in
    bounded pieces by `marin_lab.io.compression`, the same reader the data steps use."""
    raw = open_file(roots, url)
    try:
        return open_decompressed(raw, compression_of(url))
    except BaseException:
        raw.close()
        raise


def parse_cursor(cursor: str | None) -> tuple[int, int]:
    if not cursor:
        return 0, 0
    try:
        offset, line = (int(part) for part in cursor.split(":", 1))
    except ValueError as err:
        raise BadRequestError(f"cursor {cursor!r} is not 'offset:line' (two integers)") from err
    if offset < 0 or line < 0:
        raise BadRequestError(f"cursor {cursor!r} has a negative offset or line")
    return offset, line


class LineReader:
    """Lines of a binary stream, tracking the uncompressed offset where the next line starts."""

    def __init__(self, stream: IO[bytes], position: int):
        self.stream = stream
        self.position = position
        self._buffer = b""
        self._at = 0
        self._eof = False

    def _fill(self) -> bool:
        """Read another chunk into the buffer; False at the end of the stream."""
        if self._eof:
            return False
        chunk = self.stream.read(CHUNK)
        if not chunk:
            self._eof = True
            return False
        self._buffer = self._buffer[self._at :] + chunk
        self._at = 0
        return True

    def at_end(self) -> bool:
        return self._at >= len(self._buffer) and not self._fill()

    def next_line(self) -> tuple[bytes, bool] | None:
        """(line without its newline, whether it was cut at MAX_LINE_BYTES), or None at the end."""
        kept: list[bytes] = []
        kept_len = 0
        consumed = 0
        cut = False
        while True:
            newline = self._buffer.find(b"\n", self._at)
            end = newline if newline >= 0 else len(self._buffer)
            piece_len = end - self._at
            room = MAX_LINE_BYTES - kept_len
            if room > 0:
                kept.append(self._buffer[self._at : self._at + min(piece_len, room)])
                kept_len += min(piece_len, room)
            cut = cut or piece_len > room
            consumed += piece_len
            if newline >= 0:
                self._at = newline + 1
                self.position += consumed + 1
                return b"".join(kept), cut
            self._at = len(self._buffer)
            if not self._fill():
                if consumed == 0:
                    return None
                self.position += consumed
                return b"".join(kept), cut

    def close(self) -> None:
        self.stream.close()


class _StreamCache:
    """Readers parked at the cursor of the next page: {(url, size, offset): (reader, time)}."""

    def __init__(self) -> None:
        self._items: OrderedDict[tuple, tuple[LineReader, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: tuple) -> LineReader | None:
        with self._lock:
            self._expire()
            item = self._items.pop(key, None)
        return item[0] if item else None

    def park(self, key: tuple, reader: LineReader) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            self._items[key] = (reader, time.monotonic())
            evicted = [old[0]] if old else []
            while len(self._items) > KEEP_STREAMS:
                evicted.append(self._items.popitem(last=False)[1][0])
            self._expire()
        for stale in evicted:
            stale.close()

    def _expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, (_, t) in self._items.items() if now - t > KEEP_STREAM_S]:
            self._items.pop(key)[0].close()


_STREAMS = _StreamCache()


def skip_to(stream: IO[bytes], offset: int, url: str) -> None:
    """Move a fresh stream of `url` to the uncompressed `offset` (seek, or decode up to it)."""
    if compression_of(url) is None:
        stream.seek(offset)
        return
    if offset > MAX_SKIP_BYTES:
        raise BadRequestError(
            f"cursor offset {offset} is more than the {MAX_SKIP_BYTES} bytes the browser decodes "
            f"to reach a page of the compressed file {url}; page forward from an earlier cursor"
        )
    remaining = offset
    while remaining > 0:
        got = stream.read(min(CHUNK * 16, remaining))
        if not got:
            raise BadRequestError(f"cursor offset {offset} is past the end of {url}")
        remaining -= len(got)


def _open_at(roots: Roots, url: str, offset: int) -> LineReader:
    stream = open_stream(roots, url)
    try:
        skip_to(stream, offset, url)
    except BaseException:
        stream.close()
        raise
    return LineReader(stream, offset)


def _document(raw: bytes, line_no: int, cut: bool) -> dict:
    item: dict = {"line": line_no}
    if cut:
        item["error"] = f"line longer than {MAX_LINE_BYTES} bytes; shown cut, not parsed"
        item["raw"] = raw[:MAX_TEXT_CHARS].decode("utf-8", errors="replace")
        return item
    try:
        value = json.loads(raw)
    except RecursionError:
        item["error"] = "JSON nested too deeply to parse; shown raw"
        item["raw"] = raw[:MAX_TEXT_CHARS].decode("utf-8", errors="replace")
        return item
    except (UnicodeDecodeError, ValueError) as err:
        item["error"] = f"not valid JSON: {err}"
        item["raw"] = raw[:MAX_TEXT_CHARS].decode("utf-8", errors="replace")
        return item
    if isinstance(value, dict) and isinstance(value.get("text"), str) and len(value["text"]) > MAX_TEXT_CHARS:
        item["text_length"] = len(value["text"])
        value = {**value, "text": value["text"][:MAX_TEXT_CHARS]}
        item["truncated"] = True
    item["value"] = value
    return item


def jsonl_page(roots: Roots, url: str, cursor: str | None, limit: int, size: int | None = None) -> dict:
    """Up to `limit` documents from the cursor on, and the cursor of the next page (or None).

    `size` (the file's size) tells a parked stream of an older version of the file from this one.
    A page that reaches its work budget first holds fewer documents and says so in `notice`.
    """
    offset, first_line = parse_cursor(cursor)
    compression = compression_of(url)
    reuse = compression is not None
    reader = _STREAMS.take((url, size, offset)) if reuse else None
    reused = reader is not None
    if reader is None:
        reader = _open_at(roots, url, offset)
    items: list[dict] = []
    line_no = first_line
    error = None
    notice = None
    at_end = False
    try:
        while len(items) < limit:
            if line_no - first_line >= PAGE_WORK_LINES or reader.position - offset >= PAGE_WORK_BYTES:
                notice = (
                    f"this page stopped after reading {line_no - first_line} lines "
                    f"({reader.position - offset} bytes) with {len(items)} documents; "
                    "the next page goes on from there"
                )
                break
            line = reader.next_line()
            if line is None:
                at_end = True
                break
            raw, cut = line
            if raw.strip() or cut:
                items.append(_document(raw, line_no, cut))
            line_no += 1
        at_end = at_end or reader.at_end()
    except DECODE_ERRORS as err:
        # A damaged or truncated shard: show what could be read, and where it broke.
        error = f"{url} cannot be decompressed past byte {reader.position} of its content: {err}"
        at_end = True
    if reuse and not at_end:
        _STREAMS.park((url, size, reader.position), reader)
    else:
        reader.close()
    page = {
        "kind": "jsonl",
        "compression": compression,
        "cursor": f"{offset}:{first_line}",
        "items": items,
        "next_cursor": None if at_end else f"{reader.position}:{line_no}",
        "first_line": first_line,
        "resumed": reused,
    }
    if error:
        page["error"] = error
    if notice:
        page["notice"] = notice
    return page
