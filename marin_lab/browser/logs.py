"""A step's logs (`{output}/logs/attempt-N.log`) for the browser: the tail, then what was added.

A page asks once without an offset (the last `MAX_BYTES`), then again and again with the
`next_offset` it was given, receiving only new bytes: a live tail that costs one small read each
time, whatever the log's size. Only whole lines are handed out while more is to come, so a line
(or a UTF-8 character) is never cut between two answers.

The text is redacted as the file view redacts the same file (`execution.secrets.redact_text`):
logs written before their capture scrubbed every secret, or by other tools, are masked when served.
"""

from __future__ import annotations

from typing import Any

from marin_lab.browser.errors import BadRequestError, NotFoundError
from marin_lab.browser.paths import Roots
from marin_lab.browser.storage import child, file_info, list_dir, open_file
from marin_lab.io.secrets import redact_text
from marin_lab.io.text import strip_ansi
from marin_lab.store.layout import ATTEMPT_LOG, LOGS_DIR, attempt_log_name

MAX_BYTES = 64 * 1024


def read_log(
    roots: Roots, step_dir: str, attempt: int | None = None, offset: int | None = None, max_bytes: int = MAX_BYTES
) -> dict[str, Any]:
    """Part of one attempt's log (the latest attempt by default): see the module docstring."""
    logs = child(step_dir, LOGS_DIR)
    attempts = sorted(
        int(m.group(1))
        for e in list_dir(roots, logs)
        if e["type"] == "file" and (m := ATTEMPT_LOG.fullmatch(e["name"]))
    )
    if not attempts:
        return {
            "state": "missing",
            "attempts": [],
            "text": "",
            "next_offset": 0,
            "message": f"no logs under {logs} (the step has not started, or ran before logs were kept)",
        }
    chosen = attempts[-1] if attempt is None else attempt
    if chosen not in attempts:
        raise NotFoundError(f"no log for attempt {chosen} under {logs}; attempts with logs: {attempts}")
    if offset is not None and offset < 0:
        raise BadRequestError(f"offset {offset} is negative")
    url = child(logs, attempt_log_name(chosen))
    size = file_info(roots, url)["size"]
    start = max(0, size - max_bytes) if offset is None else min(offset, size)
    with open_file(roots, url) as f:
        f.seek(start)
        data = f.read(min(max_bytes, size - start))
    end = start + len(data)
    if end < size and b"\n" in data:  # more to come: stop at the last whole line
        data = data[: data.rindex(b"\n") + 1]
        end = start + len(data)
    if offset is None and start > 0 and b"\n" in data:  # a tail starts at a line's beginning
        cut = data.index(b"\n") + 1
        data, start = data[cut:], start + cut
    return {
        "state": "ok",
        "attempts": attempts,
        "attempt": chosen,
        "url": url,
        "size": size,
        "start": start,
        "next_offset": end,
        "text": strip_ansi(redact_text(data.decode("utf-8", errors="replace"))),
    }
