"""Document shards: JSON lines (`.jsonl`, `.jsonl.gz`, `.jsonl.zst`), one object per line.

Steps that only read documents (tokenize, train a tokenizer) also accept what downloads bring
(`SOURCE_PATTERNS`): Parquet tables, one document per row from the `text` column (the `id` column
if there is one, else `{file name}:{row}`), and plain `.txt` files, one document per file (its
name is the id).

Every data step reads and writes documents through this module, so the bad-input policy lives in
one place. A document is an object with at least `id` (str) and `text` (str); `source` and
`metadata` are optional. Reading streams (a shard is never loaded whole) and checks each line;
a bad line -- malformed JSON, a missing or non-string `id`/`text`, bytes that are not UTF-8, a
gzip/zstd stream that ends early, and also JSON that parses but would break a later stage (nested
deeper than `MAX_NESTING`, or a `"\ud800"` escape: a lone surrogate, which no UTF-8 encoder
accepts) -- raises `BadRecordError` naming the file and line, or with `on_bad_record="skip"` is
counted in a `ReadStats` by reason, so that a step can account for every input document in its
return value. So every document a step receives can be encoded, hashed and written again.

Memory: a line is held as bytes, as text and as parsed JSON at once, so reading a document costs
about four times its size; `text_chunks` cuts a long text into pieces so that what follows
(tokenizing, training a tokenizer) works on bounded pieces, not on the whole document.

Decompression is `marin_lab.io.compression`'s: streamed in bounded pieces, so a small shard that
expands enormously costs the memory of the lines read, not of its expansion.

Writing is deterministic (same documents -> same bytes: sorted keys, gzip without a timestamp,
single-threaded zstd at level 3) and atomic (see `marin_lab.io.fs.atomic_write_bytes`).
"""

from __future__ import annotations

import fnmatch
import io
import json
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from marin_lab.errors import MarinLabError
from marin_lab.io import fs as mfs
from marin_lab.io.compression import DECODE_ERRORS, READ_CHUNK, compress, compression_of, open_decompressed

logger = logging.getLogger(__name__)

__all__ = [
    "BadRecordError",
    "DocumentLine",
    "NoShardsError",
    "ReadStats",
    "DOCUMENT_PATTERNS",
    "canonical_line",
    "compress_for",
    "SOURCE_PATTERNS",
    "encode_documents",
    "list_shards",
    "read_document_lines",
    "read_documents",
    "read_lines",
    "text_chunks",
    "write_documents",
]

DOCUMENT_PATTERNS = ("*.jsonl", "*.jsonl.gz", "*.jsonl.zst")
SOURCE_PATTERNS = DOCUMENT_PATTERNS + ("*.parquet", "*.txt")
"""What steps that only read documents accept (see the module docstring)."""
ON_BAD_RECORD = ("raise", "skip")
# A handful of examples is enough to diagnose a bad shard without bloating step records.
MAX_EXAMPLES = 5
MAX_NESTING = 100
"""Deepest nesting of arrays/objects accepted in a line; deeper ones would exhaust Python's
recursion limit in a later stage (encoding, hashing) instead of failing here with file:line."""
# A `\uD800`-`\uDFFF` escape: the only way valid JSON can carry a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class BadRecordError(MarinLabError, ValueError):
    """A line of a document shard could not be read as a document."""

    def __init__(self, path: str, line: int, reason: str, detail: str):
        self.path = path
        self.line = line
        self.reason = reason
        what_to_do = (
            "re-create or re-download the file"
            if reason in ("truncated_stream", "bad_parquet")
            else "fix or remove the line"
        )
        super().__init__(
            f"{path}:{line}: bad record ({reason}): {detail}. To continue, {what_to_do}, or set "
            f"on_bad_record='skip' to count and skip bad records."
        )


class NoShardsError(MarinLabError, FileNotFoundError):
    """An input folder holds no document shards."""


@dataclass
class ReadStats:
    """Counts kept while reading documents; shared across shards by passing the same object."""

    read: int = 0
    """Documents returned."""
    skipped: int = 0
    """Bad records skipped (on_bad_record='skip')."""
    skip_reasons: dict[str, int] = field(default_factory=dict)
    """Skipped records by reason: bad_json, too_deep, bad_unicode, not_an_object, missing_text,
    missing_id, bad_utf8, truncated_stream, bad_parquet."""
    examples: list[str] = field(default_factory=list)
    """The first few skip messages (file:line: reason), for the step record."""

    def add_skip(self, err: BadRecordError, count: int = 1) -> None:
        """`count` records lost to one error (a damaged Parquet row group loses all its rows)."""
        self.skipped += count
        self.skip_reasons[err.reason] = self.skip_reasons.get(err.reason, 0) + count
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"{err.path}:{err.line}: {err.reason}")

    def merge(self, other: ReadStats) -> None:
        self.read += other.read
        self.skipped += other.skipped
        for reason, n in other.skip_reasons.items():
            self.skip_reasons[reason] = self.skip_reasons.get(reason, 0) + n
        self.examples.extend(other.examples[: max(0, MAX_EXAMPLES - len(self.examples))])

    def to_dict(self) -> dict:
        return {
            "read": self.read,
            "skipped": self.skipped,
            "skip_reasons": dict(sorted(self.skip_reasons.items())),
            "examples": list(self.examples),
        }


_TOO_DEEP = object()


def _depth_exceeds(obj: object, limit: int) -> bool:
    """Whether arrays/objects nest deeper than `limit` (iterative: no recursion to exhaust)."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        children: Iterable[object]
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _check_hostile(line: str, obj: object) -> tuple[str, str] | None:
    """(reason, detail) for valid JSON that a later stage could not handle, else None.

    Both checks look at the raw line first (two counts, one search), so ordinary documents
    pay almost nothing.
    """
    if obj is _TOO_DEEP or (line.count("[") + line.count("{") > MAX_NESTING and _depth_exceeds(obj, MAX_NESTING)):
        return "too_deep", f"JSON nested more than {MAX_NESTING} levels deep"
    if _SURROGATE_ESCAPE.search(line):
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as err:
            return "bad_unicode", (
                f"a \\u escape encodes a lone surrogate ({err.object[err.start]!a}), which is not a character"
            )
    return None


def _check_document(obj: object) -> tuple[str, str] | None:
    """(reason, detail) when `obj` is not a document, else None."""
    if not isinstance(obj, dict):
        return "not_an_object", f"expected a JSON object, got {type(obj).__name__}"
    if "text" not in obj:
        return "missing_text", "no 'text' field"
    if not isinstance(obj["text"], str):
        return "missing_text", f"'text' is {type(obj['text']).__name__}, expected str"
    if "id" not in obj:
        return "missing_id", "no 'id' field"
    if not isinstance(obj["id"], str):
        return "missing_id", f"'id' is {type(obj['id']).__name__}, expected str"
    return None


def read_documents(path: str, *, on_bad_record: str = "raise", stats: ReadStats | None = None) -> Iterator[dict]:
    """Stream the documents of one shard, checking each line (see the module docstring)."""
    if on_bad_record not in ON_BAD_RECORD:
        raise ValueError(f"on_bad_record={on_bad_record!r}: expected one of {ON_BAD_RECORD}")
    stats = stats if stats is not None else ReadStats()
    fs, fpath = mfs.fs_and_path(path)
    bad = _bad_record(path, on_bad_record, stats)
    if path.endswith(".parquet"):
        yield from _read_parquet(path, fs, fpath, bad, stats)
        return
    if path.endswith(".txt"):
        yield from _read_text_file(path, fs, fpath, bad, stats)
        return
    for line in _json_lines(path, fs, fpath, bad, stats):
        yield line.doc


class DocumentLine(NamedTuple):
    """A document of a JSON-lines shard with where it came from (`read_document_lines`)."""

    number: int  # 1-based line number in the decompressed file
    raw: bytes  # the line as stored, without its newline
    text: str  # `raw` decoded
    doc: dict  # the checked document


def read_document_lines(
    path: str, *, on_bad_record: str = "raise", stats: ReadStats | None = None
) -> Iterator[DocumentLine]:
    """`read_documents` for a JSON-lines shard, each document with its line number and bytes, so
    that a later pass can pick lines by number (`read_lines`) instead of parsing them again."""
    if on_bad_record not in ON_BAD_RECORD:
        raise ValueError(f"on_bad_record={on_bad_record!r}: expected one of {ON_BAD_RECORD}")
    if path.endswith((".parquet", ".txt")):
        raise ValueError(f"{path}: not a JSON-lines shard")
    stats = stats if stats is not None else ReadStats()
    fs, fpath = mfs.fs_and_path(path)
    yield from _json_lines(path, fs, fpath, _bad_record(path, on_bad_record, stats), stats)


def read_lines(path: str) -> Iterator[bytes]:
    """Every line of a (compressed) JSON-lines file, without its newline and unchecked, read in
    `READ_CHUNK` pieces. A damaged stream raises one of `DECODE_ERRORS` after the lines before it."""
    fs, fpath = mfs.fs_and_path(path)
    with open_decompressed(fs.open(fpath, "rb"), compression_of(path)) as reader:
        read = getattr(reader, "read1", reader.read)
        pending: list[bytes] = []  # the start of a line that goes on in the next piece
        while chunk := read(READ_CHUNK):
            lines = chunk.split(b"\n")
            if len(lines) == 1:
                pending.append(chunk)
                continue
            if pending:
                pending.append(lines[0])
                lines[0] = b"".join(pending)
                pending = []
            last = lines.pop()
            if last:
                pending.append(last)
            yield from lines
        if pending:
            yield b"".join(pending)


def _bad_record(path: str, on_bad_record: str, stats: ReadStats):
    """What to do with a bad line: raise BadRecordError, or count it in `stats`."""

    def bad(line: int, reason: str, detail: str, count: int = 1) -> None:
        err = BadRecordError(path, line, reason, detail)
        if on_bad_record == "raise":
            raise err
        stats.add_skip(err, count)
        logger.debug("skipping %s", err)

    return bad


def _json_lines(path: str, fs, fpath: str, bad, stats: ReadStats) -> Iterator[DocumentLine]:
    with open_decompressed(fs.open(fpath, "rb"), compression_of(path)) as reader:
        lineno = 0
        while True:
            try:
                line = reader.readline()
            except (*DECODE_ERRORS, OSError) as err:
                bad(lineno + 1, "truncated_stream", f"compressed stream is corrupt or ends early ({err})")
                return
            if not line:
                return
            lineno += 1
            if not line.strip():
                continue  # blank lines are not documents
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as err:
                bad(lineno, "bad_utf8", f"not UTF-8 at byte {err.start}")
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as err:
                bad(lineno, "bad_json", f"malformed JSON ({err.msg} at column {err.colno})")
                continue
            except RecursionError:
                obj = _TOO_DEEP
            problem = _check_hostile(text, obj) or _check_document(obj)
            if problem is not None:
                bad(lineno, *problem)
                continue
            stats.read += 1
            if line.endswith(b"\n"):
                line, text = line[:-1], text[:-1]
            yield DocumentLine(lineno, line, text, obj)


def _read_parquet(path: str, fs, fpath: str, bad, stats: ReadStats) -> Iterator[dict]:
    """One document per row: `text` (a string), `id` if the table has one (else file name:row).

    Read one row group at a time: a damaged page (pages stored uncompressed carry no checksum
    that pyarrow verifies, so damage shows up as an unreadable value or bytes that are not UTF-8)
    costs the rows of its group, which are named and, with on_bad_record='skip', counted; the
    groups after it are still read.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = path.rsplit("/", 1)[-1]
    with fs.open(fpath, "rb") as raw:
        try:
            table = pq.ParquetFile(raw)
        except Exception as err:  # pyarrow raises several types for a damaged file
            bad(1, "bad_parquet", f"not a readable Parquet file ({type(err).__name__}: {err})")
            return
        columns = table.schema_arrow.names
        if "text" not in columns:
            raise BadRecordError(
                path,
                1,
                "missing_text",
                f"no 'text' column (columns: {', '.join(columns)}); "
                "tokenize reads documents from a column named 'text'",
            )
        wanted = ["text"] + (["id"] if "id" in columns else [])
        first = 0  # rows before this row group
        for group in range(table.num_row_groups):
            rows = table.metadata.row_group(group).num_rows
            row = first
            try:
                for batch in table.iter_batches(columns=wanted, batch_size=4096, row_groups=[group]):
                    for record in _batch_rows(batch, row, bad):
                        row += 1
                        if record is None:
                            continue
                        text, doc_id = record["text"], record.get("id")
                        if not isinstance(text, str):
                            bad(row, "missing_text", f"'text' is {type(text).__name__} in row {row}, expected str")
                            continue
                        stats.read += 1
                        yield {"id": f"{name}:{row}" if doc_id is None else str(doc_id), "text": text}
            except BadRecordError:
                raise
            except (OSError, pa.ArrowException, ValueError) as err:
                lost = first + rows - row
                bad(
                    row + 1,
                    "bad_parquet",
                    f"row group {group} (rows {first + 1}-{first + rows}) is damaged from "
                    f"row {row + 1} on, {lost} rows not read ({type(err).__name__}: {_first_line(err)})",
                    lost,
                )
            first += rows


def _batch_rows(batch, first_row: int, bad) -> Iterator[dict | None]:
    """The rows of a record batch as dicts; a row whose strings are not UTF-8 is reported (and None)."""
    try:
        yield from batch.to_pylist()
        return
    except UnicodeDecodeError:
        pass  # find the rows: only a damaged batch pays for row-by-row conversion
    for i in range(batch.num_rows):
        try:
            yield batch.slice(i, 1).to_pylist()[0]
        except UnicodeDecodeError as err:
            bad(
                first_row + i + 1,
                "bad_parquet",
                f"row {first_row + i + 1} holds a string that is not UTF-8 "
                f"(byte {err.start} of a value): the page is damaged",
            )
            yield None


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0][:300] if lines else ""


def _read_text_file(path: str, fs, fpath: str, bad, stats: ReadStats) -> Iterator[dict]:
    """The whole file as one document, named by its file name."""
    with fs.open(fpath, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        bad(1, "bad_utf8", f"not UTF-8 at byte {err.start}")
        return
    if text.strip():
        stats.read += 1
        yield {"id": path.rsplit("/", 1)[-1], "text": text}


def text_chunks(text: str, max_chars: int) -> Iterator[str]:
    """`text` in consecutive pieces of at most `max_chars` characters that join back to `text`.

    A piece ends just before a single space between two non-space characters (searched in the
    last half of the window), where word-level and byte-level pre-tokenizers split anyway, so a
    tokenizer sees the same words in the pieces as in the whole text. Only a window with no such
    space (a very long run without spaces) is cut at `max_chars`, possibly inside a word.
    """
    if max_chars < 2:
        raise ValueError(f"max_chars={max_chars}: a piece needs at least 2 characters")
    start, end_of_text = 0, len(text)
    while end_of_text - start > max_chars:
        end = start + max_chars
        cut = end
        low = start + max_chars // 2
        space = text.rfind(" ", low, end)
        while space > low:
            if not text[space - 1].isspace() and not text[space + 1].isspace():
                cut = space
                break
            space = text.rfind(" ", low, space)
        yield text[start:cut]
        start = cut
    yield text[start:]


def canonical_line(doc: dict) -> str:
    """How a document is written: JSON with sorted keys and UTF-8 as is (no newline)."""
    return json.dumps(doc, ensure_ascii=False, sort_keys=True)


def encode_documents(docs: Iterable[dict]) -> tuple[bytes, int]:
    """Uncompressed JSON-lines bytes of `docs` (`canonical_line`) and their count."""
    buf = io.StringIO()
    n = 0
    for doc in docs:
        buf.write(canonical_line(doc))
        buf.write("\n")
        n += 1
    return buf.getvalue().encode("utf-8"), n


def compress_for(path: str, data: bytes) -> bytes:
    """`data` compressed as `path`'s extension says, deterministically (`io.compression`)."""
    return compress(data, compression_of(path))


def write_documents(path: str, docs: Iterable[dict]) -> int:
    """Write `docs` to `path` atomically (compression from the extension); returns the count."""
    data, n = encode_documents(docs)
    mfs.atomic_write_bytes(path, compress_for(path, data))
    return n


def _protocol_of(url: str) -> str:
    return url.split("://", 1)[0] + "://" if "://" in url else ""


def list_shards(input_path: str, patterns: Iterable[str] = DOCUMENT_PATTERNS) -> list[str]:
    """Every document shard under `input_path` (recursively), sorted; hidden files are ignored."""
    patterns = tuple(patterns)
    fs, root = mfs.fs_and_path(input_path)
    protocol = _protocol_of(input_path)
    keep_protocol = protocol not in ("", "file://")

    def as_url(p: str) -> str:
        if not keep_protocol or "://" in p:
            return p
        return protocol + p.lstrip("/") if protocol != "memory://" else protocol + "/" + p.lstrip("/")

    def matches(name: str) -> bool:
        return not name.startswith(".") and any(fnmatch.fnmatch(name, pat) for pat in patterns)

    if fs.isfile(root):
        found = [root] if matches(root.rsplit("/", 1)[-1]) else []
    else:
        try:
            candidates = fs.find(root)
        except FileNotFoundError:
            candidates = []
        root_s = root.rstrip("/")
        found = []
        for p in candidates:
            rel = p[len(root_s) :].lstrip("/") if p.startswith(root_s) else p
            # Skip anything in a hidden folder too (temporary files, executor metadata).
            if any(part.startswith(".") for part in rel.split("/")[:-1]):
                continue
            if matches(p.rsplit("/", 1)[-1]):
                found.append(p)
    if not found:
        raise NoShardsError(
            f"no document shards matching {list(patterns)} under {input_path!r}: check the path "
            f"(does the upstream step write there?) and the file extensions."
        )
    return sorted(as_url(p) for p in found)
