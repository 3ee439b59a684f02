"""Pages of columnar and array files: parquet by row group, `.npy` by slice, token-cache shards
decoded into text with the cache's own `tokenizer.json`.

`.npy` files are read by parsing the header and fetching only the byte range of the page, so a
shard on GCS is never downloaded whole. Parquet is read page by page within a row group
(`iter_batches` on a buffered stream), never a whole row group at once: the row group's metadata
gives the bytes per row, which sets how many rows one answer decodes (`PAGE_DECODE_BYTES`) and how
far into a row group a cursor may point (`MAX_SKIP_BYTES`).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import posixpath
from typing import Any

import numpy as np

from marin_lab.browser.errors import BadRequestError, NotFoundError
from marin_lab.browser.paths import Roots
from marin_lab.browser.storage import load_json, open_file, parent, read_bounded
from marin_lab.processing.errors import TokenizeError
from marin_lab.processing.tokenizers import tokenizer_at
from marin_lab.store.token_cache import FORMAT, LEDGER_FILE, TOKENIZER_FILE, read_npy_header

MAX_TOKENS_DECODED = 4096
MAX_PIECES = 200
MAX_CELL_CHARS = 20_000
PAGE_DECODE_BYTES = 32 * 1024 * 1024
MAX_SKIP_BYTES = 1024 * 1024 * 1024
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024
_PARQUET_BUFFER = 1024 * 1024


def _json_safe(value: Any) -> Any:
    """Parquet values (bytes, dates, decimals, numpy scalars) as something JSON can carry."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, str):
        return value if len(value) <= MAX_CELL_CHARS else value[:MAX_CELL_CHARS] + f"… ({len(value)} chars)"
    if isinstance(value, bytes):
        try:
            return _json_safe(value.decode("utf-8"))
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(value[:4096]).decode("ascii")
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time, datetime.timedelta, decimal.Decimal)):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    return value


def _int_cursor(cursor: str | None, what: str) -> list[int]:
    if not cursor:
        return []
    try:
        return [int(part) for part in cursor.split(":")]
    except ValueError as err:
        raise BadRequestError(f"cursor {cursor!r} is not {what}") from err


# ---- parquet -------------------------------------------------------------------------------------
def parquet_page(roots: Roots, url: str, cursor: str | None, limit: int) -> dict:
    """Rows from one row group at a time; the cursor is 'row_group:row'."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = _int_cursor(cursor, "'row_group:row' (two integers)") or [0, 0]
    if len(parts) != 2 or min(parts) < 0:
        raise BadRequestError(f"cursor {cursor!r} is not 'row_group:row' (two non-negative integers)")
    group, row = parts
    page: dict[str, Any] = {
        "kind": "parquet",
        "row_group": group,
        "first_row": row,
        "cursor": f"{group}:{row}",
        "items": [],
        "next_cursor": None,
    }
    with open_file(roots, url) as f:
        try:
            parquet = pq.ParquetFile(f, buffer_size=_PARQUET_BUFFER, pre_buffer=False)
            meta = parquet.metadata
            page.update(
                schema=[{"name": fld.name, "type": str(fld.type)} for fld in parquet.schema_arrow],
                num_rows=meta.num_rows,
                num_row_groups=meta.num_row_groups,
            )
            if meta.num_row_groups == 0:
                return page
            if group >= meta.num_row_groups:
                raise BadRequestError(f"row group {group} does not exist; {url} has {meta.num_row_groups}")
            page.update(_parquet_rows(parquet, url, group, row, limit))
        except (pa.ArrowException, OSError) as err:
            page["error"] = f"{url} cannot be read as parquet: {err}"
    return page


def _parquet_rows(parquet, url: str, group: int, row: int, limit: int) -> dict:
    """Up to `limit` rows of row group `group` from `row` on, decoding no more than a page needs."""
    group_meta = parquet.metadata.row_group(group)
    group_rows = group_meta.num_rows
    if row >= max(group_rows, 1):
        raise BadRequestError(f"row {row} does not exist; row group {group} of {url} has {group_rows} rows")
    row_bytes = max(group_meta.total_byte_size / max(group_rows, 1), 1.0)
    if row_bytes > PAGE_DECODE_BYTES:
        return {
            "error": f"rows of row group {group} hold about {int(row_bytes)} bytes each, more than the "
            f"{PAGE_DECODE_BYTES} bytes a page decodes; read {url} with pyarrow instead"
        }
    if row * row_bytes > MAX_SKIP_BYTES:
        raise BadRequestError(
            f"row {row} lies about {int(row * row_bytes)} bytes into row group {group}; the browser decodes "
            f"at most {MAX_SKIP_BYTES} bytes to reach a page; read {url} with pyarrow instead"
        )
    # Rows of a batch are decoded together, so the batch is sized to the page's byte budget.
    batch_rows = max(1, min(limit, int(PAGE_DECODE_BYTES // row_bytes)))
    seen = 0
    rows: list = []
    for batch in parquet.iter_batches(batch_size=batch_rows, row_groups=[group]):
        if seen + batch.num_rows <= row:
            seen += batch.num_rows
            continue
        start = max(row - seen, 0)
        rows.extend(batch.slice(start, batch_rows - len(rows)).to_pylist())
        seen += batch.num_rows
        if len(rows) >= batch_rows:
            break
    end = row + len(rows)
    if end < group_rows:
        next_cursor = f"{group}:{end}"
    elif group + 1 < parquet.metadata.num_row_groups:
        next_cursor = f"{group + 1}:0"
    else:
        next_cursor = None
    out: dict[str, Any] = {"items": [_json_safe(r) for r in rows], "next_cursor": next_cursor}
    if batch_rows < limit:
        out["notice"] = f"{batch_rows} rows per page: each row holds about {int(row_bytes)} bytes"
    return out


# ---- npy -----------------------------------------------------------------------------------------
def npy_header(f) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, offset of the data) of an open .npy file, reading only its header."""
    shape, dtype, fortran, offset = read_npy_header(f)
    if fortran and len(shape) > 1:
        raise ValueError("Fortran-ordered arrays are not paged; open them with numpy")
    if dtype.hasobject:
        raise ValueError("object arrays are not read (they would need pickle)")
    return shape, dtype, offset


def read_npy_slice(f, start: int, stop: int) -> np.ndarray:
    """Items [start, stop) of a flat view of an .npy file, fetching just those bytes."""
    f.seek(0)
    shape, dtype, data_offset = npy_header(f)
    total = int(np.prod(shape)) if shape else 1
    start, stop = max(0, min(start, total)), max(0, min(stop, total))
    f.seek(data_offset + start * dtype.itemsize)
    data = f.read((stop - start) * dtype.itemsize)
    return np.frombuffer(data, dtype=dtype)


def npy_page(roots: Roots, url: str, cursor: str | None, limit: int) -> dict:
    parts = _int_cursor(cursor, "an item index") or [0]
    start = parts[0]
    if start < 0:
        raise BadRequestError(f"cursor {cursor!r} is negative")
    with open_file(roots, url) as f:
        try:
            shape, dtype, _ = npy_header(f)
        except ValueError as err:
            return {"kind": "npy", "error": f"cannot read {url} as .npy: {err}", "items": [], "next_cursor": None}
        total = int(np.prod(shape)) if shape else 1
        values = read_npy_slice(f, start, start + limit * 16)
    end = start + len(values)
    return {
        "kind": "npy",
        "shape": list(shape),
        "dtype": str(dtype),
        "first_index": start,
        "cursor": str(start),
        "items": [_json_safe(v) for v in values.tolist()],
        "next_cursor": str(end) if end < total else None,
    }


# ---- token cache ---------------------------------------------------------------------------------
def token_cache_of(roots: Roots, url: str) -> tuple[str, dict] | None:
    """(cache folder, ledger) when `url` is `{cache}/{split}/shard-N.tokens.npy` with a ledger."""
    if not url.endswith(".tokens.npy"):
        return None
    cache = parent(parent(url))
    ledger = load_json(roots, f"{cache}/{LEDGER_FILE}")
    if ledger.state != "ok" or ledger.value.get("format") != FORMAT:
        return None
    return cache, ledger.value


def _tokenizer(roots: Roots, url: str, fingerprint: str | None):
    """The cache's tokenizer, read through the confined reader; kept for the next pages by the
    tokenizer owner (by the recorded checksum, so a page after the first reads nothing)."""
    try:
        return tokenizer_at(url, sha256=fingerprint, read=lambda u: read_bounded(roots, u, MAX_TOKENIZER_BYTES))
    except TokenizeError as err:
        raise ValueError(str(err.__cause__ or err)) from None  # the page names the file itself


def token_page(roots: Roots, url: str, cursor: str | None, limit: int) -> dict:
    """Documents of a token shard (cursor = document index), decoded with the cache's tokenizer."""
    found = token_cache_of(roots, url)
    if found is None:
        return npy_page(roots, url, cursor, limit)
    cache, ledger = found
    parts = _int_cursor(cursor, "a document index") or [0]
    first = parts[0]
    if first < 0:
        raise BadRequestError(f"cursor {cursor!r} is negative")
    tok_info = info if isinstance(info := ledger.get("tokenizer"), dict) else {}
    tok_name = name if isinstance(name := tok_info.get("file"), str) else TOKENIZER_FILE
    tokenizer_url = f"{cache}/{posixpath.basename(tok_name)}"
    tokenizer, tokenizer_error = None, None
    try:
        sha256 = tok_info.get("sha256")
        tokenizer = _tokenizer(roots, tokenizer_url, sha256 if isinstance(sha256, str) else None)
    except (FileNotFoundError, NotFoundError):
        tokenizer_error = f"{tokenizer_url} is missing; showing token ids only"
    except Exception as err:  # a corrupt tokenizer file must not fail the page
        tokenizer_error = f"{tokenizer_url} cannot be loaded ({err}); showing token ids only"
    offsets_url = url[: -len(".tokens.npy")] + ".offsets.npy"
    with open_file(roots, offsets_url) as f_off:
        shape, _, _ = npy_header(f_off)
        documents = max(int(shape[0]) - 1, 0) if shape else 0
        offsets = read_npy_slice(f_off, first, first + limit + 1).astype(np.int64)
    items = []
    with open_file(roots, url) as f_tok:
        for i in range(len(offsets) - 1):
            lo, hi = int(offsets[i]), int(offsets[i + 1])
            ids = read_npy_slice(f_tok, lo, min(hi, lo + MAX_TOKENS_DECODED)).tolist()
            item: dict[str, Any] = {"document": first + i, "tokens": hi - lo, "ids": ids[:MAX_PIECES]}
            if hi - lo > MAX_TOKENS_DECODED:
                item["truncated"] = True
            if tokenizer is not None:
                item["text"] = tokenizer.decode(ids, skip_special_tokens=False)
                item["pieces"] = [tokenizer.id_to_token(t) for t in ids[:MAX_PIECES]]
            items.append(item)
    end = first + len(items)
    return {
        "kind": "tokens",
        "dtype": ledger.get("dtype"),
        "vocab_size": ledger.get("vocab_size"),
        "eos_id": ledger.get("eos_id"),
        "documents": documents,
        "tokenizer": tokenizer_url,
        "tokenizer_error": tokenizer_error,
        "first_document": first,
        "cursor": str(first),
        "items": items,
        "next_cursor": str(end) if end < documents else None,
    }
