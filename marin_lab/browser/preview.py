"""The file viewer: picks a reader by file name and returns one page of the file.

Every page carries `cursor` and `next_cursor` (None on the last page); the page hands the cursor
back to get the next one. Readers fetch only what a page needs.
"""

from __future__ import annotations

import posixpath
from typing import Any

from marin_lab.browser.errors import BadRequestError
from marin_lab.browser.paths import Roots
from marin_lab.browser.preview_arrays import npy_page, parquet_page, token_page
from marin_lab.browser.preview_jsonl import DECODE_ERRORS, compression_of, jsonl_page, open_stream, skip_to
from marin_lab.browser.storage import child, file_info, list_dir, load_json, parent
from marin_lab.io.secrets import redact, redact_text
from marin_lab.store.layout import INFO_FILE, RECORD_FILES

TEXT_PAGE_BYTES = 64 * 1024
MAX_JSON_BYTES = 8 * 1024 * 1024
DIR_PAGE = 500
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".ndjson.gz", ".ndjson.zst")
_JSON_NAMES = set(RECORD_FILES)


def kind_of(name: str) -> str:
    if name.endswith(_JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".tokens.npy"):
        return "tokens"
    if name.endswith(".npy"):
        return "npy"
    if name.endswith(".json") or name in _JSON_NAMES:
        return "json"
    return "text"


def preview(roots: Roots, url: str, cursor: str | None = None, limit: int = 25) -> dict[str, Any]:
    """One page of the file or folder at `url`; anything outside `roots` is refused."""
    url = roots.resolve(url)
    info = file_info(roots, url)
    name = posixpath.basename(url.rstrip("/"))
    base = {"path": url, "name": name, "parent": parent(url), "size": info["size"]}
    if info["type"] == "directory":
        return {**base, **_directory_page(roots, url, cursor)}
    kind = kind_of(name)
    if kind == "jsonl":
        page = jsonl_page(roots, url, cursor, limit, size=base["size"])
    elif kind == "parquet":
        page = parquet_page(roots, url, cursor, limit)
    elif kind == "tokens":
        page = token_page(roots, url, cursor, min(limit, 50))
    elif kind == "npy":
        page = npy_page(roots, url, cursor, limit)
    elif kind == "json" and base["size"] <= MAX_JSON_BYTES and not cursor:
        page = _json_page(roots, url)
    else:
        page = _text_page(roots, url, cursor)
    return {**base, **page}


def _directory_page(roots: Roots, url: str, cursor: str | None) -> dict:
    start = _int(cursor, "an entry index")
    entries = list_dir(roots, url)
    page = entries[start : start + DIR_PAGE]
    for entry in page:
        entry["path"] = child(url, entry["name"])
    end = start + len(page)
    # A step's output folder links back to its step page.
    is_step = any(e["name"] == INFO_FILE for e in entries)
    return {
        "kind": "directory",
        "cursor": str(start),
        "items": page,
        "total": len(entries),
        "is_step": is_step,
        "next_cursor": str(end) if end < len(entries) else None,
    }


def _json_page(roots: Roots, url: str) -> dict:
    loaded = load_json(roots, url, expect=None)
    if loaded.state != "ok":
        page = _text_page(roots, url, None)
        page["error"] = f"{url} is {loaded.state}: {loaded.error}"
        return page
    return {"kind": "json", "value": redact(loaded.value), "cursor": None, "next_cursor": None}


def _int(cursor: str | None, what: str) -> int:
    if not cursor:
        return 0
    try:
        value = int(cursor)
    except ValueError as err:
        raise BadRequestError(f"cursor {cursor!r} is not {what}") from err
    if value < 0:
        raise BadRequestError(f"cursor {cursor!r} is negative")
    return value


def _text_page(roots: Roots, url: str, cursor: str | None) -> dict:
    """64 KiB of (decompressed) text from the byte offset `cursor`, cut at a line boundary."""
    offset = _int(cursor, "a byte offset")
    compression = compression_of(url)
    try:
        with open_stream(roots, url) as stream:
            skip_to(stream, offset, url)
            data = stream.read(TEXT_PAGE_BYTES + 1)
    except DECODE_ERRORS as err:
        return {
            "kind": "text",
            "compression": compression,
            "cursor": str(offset),
            "text": "",
            "next_cursor": None,
            "error": f"{url} cannot be decompressed: {err}",
        }
    more = len(data) > TEXT_PAGE_BYTES
    data = data[:TEXT_PAGE_BYTES]
    if b"\x00" in data[:8192]:
        return {
            "kind": "binary",
            "cursor": str(offset),
            "next_cursor": None,
            "hex": _hexdump(data[:512]),
            "message": "binary file: the first 512 bytes in hex",
        }
    cut = len(data)
    if more:
        newline = data.rfind(b"\n")
        if newline > 0:
            cut = newline + 1
        else:
            # No line break in the page: do not split a UTF-8 character.
            while cut > 0 and (data[cut - 1] & 0xC0) == 0x80:
                cut -= 1
            if cut > 0 and data[cut - 1] >= 0xC0:
                cut -= 1
    text = data[:cut].decode("utf-8", errors="replace")
    return {
        "kind": "text",
        "compression": compression,
        "cursor": str(offset),
        "text": redact_text(text),
        "next_cursor": str(offset + cut) if more else None,
    }


def _hexdump(data: bytes) -> str:
    return "\n".join(f"{i:08x}  {data[i : i + 16].hex(' ')}" for i in range(0, len(data), 16))
