"""Secrets out of every text we write: records, logs, error messages, the browser's pages.

A secret is recognised three ways, and `scrub_text` applies all three to any string:
- by its shape: API tokens with a known prefix (`hf_`, `sk-`, `ghp_`, `AKIA`, `ya29.`), the
  password of a URL (`https://user:PASSWORD@host`), a URL query parameter named like a secret
  (`?token=...`, `&api_key=...`, `&sig=...`), an `Authorization: Bearer ...` value;
- by the value of an environment variable named like a secret (`*KEY*`, `*TOKEN*`, `*SECRET*`,
  `*PASSWORD*`, `*CREDENTIAL*`), wherever that value shows up later (an exception that echoes a
  request, a log line);
- by a value once seen under a secret-named field (`remember_secret`, called by the record
  redaction), for the same reason.

Field-name rules (which keys are secrets) live in `marin_lab.execution.provenance`; this module
only scrubs text, so a record, a log line and a browser page share one definition of a secret value.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import traceback
from collections.abc import Callable

REDACTED = "<redacted>"
# Shorter values would scrub ordinary words (a variable KEY=1 must not erase every "1").
MIN_SECRET_CHARS = 8

_ENV_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_TOKEN_SHAPES = re.compile(r"(sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
                           r"|AKIA[0-9A-Z]{16}|ya29\.[A-Za-z0-9_\-]{20,})")
# scheme://user:password@host -> the password goes; the user name stays (it says whose it was).
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)([^/\s@]+)(@)")
_QUERY_SECRET = re.compile(
    r"([?&;](?:[A-Za-z0-9_\-]*(?:token|key|secret|password|passwd|credential|signature)[A-Za-z0-9_\-]*"
    r"|sig|auth)=)([^&#\s\"']+)", re.IGNORECASE)
_BEARER = re.compile(r"(\bBearer\s+|\bAuthorization:\s*(?:Basic\s+)?)([A-Za-z0-9._~+/\-]{12,}=*)", re.IGNORECASE)

_remembered: set[str] = set()
_lock = threading.Lock()


def remember_secret(value: object) -> None:
    """Scrub `value` from every text from now on (it was found under a secret-named field)."""
    if isinstance(value, str) and _looks_like_a_secret(value):
        with _lock:
            _remembered.add(value)


def _looks_like_a_secret(value: str) -> bool:
    # Secret-named variables also hold paths, booleans and numbers (KEYTAB=/etc/krb5.keytab,
    # TOKENIZERS_PARALLELISM=false); scrubbing those would blank ordinary text, so they are left.
    return (len(value) >= MIN_SECRET_CHARS and not value.startswith(("/", ".", "~"))
            and not value.isdigit() and not any(c.isspace() for c in value))


def _known_values() -> list[str]:
    env = [v for k, v in os.environ.items() if _ENV_SECRET_NAME.search(k) and _looks_like_a_secret(v)]
    with _lock:
        values = set(env) | _remembered
    # Longest first, so a secret that contains another is removed whole.
    return sorted(values, key=len, reverse=True)


# Anything any rule below could act on; text without it (nearly all of a record) is left at once.
_MAYBE = re.compile(r"sk-|hf_|gh[pousr]_|AKIA|ya29\.|://|[?&;][^=\s]*=|Bearer|Authorization", re.IGNORECASE)


def text_scrubber() -> Callable[[str], str]:
    """`scrub_text` for many strings at once: the known secret values are gathered once."""
    known = _known_values()
    known_re = re.compile("|".join(map(re.escape, known))) if known else None

    def scrub(text: str) -> str:
        if known_re is not None:
            text = known_re.sub(REDACTED, text)
        if not _MAYBE.search(text):
            return text
        text = _TOKEN_SHAPES.sub(REDACTED, text)
        text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}{m.group(3)}", text)
        text = _QUERY_SECRET.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
        return _BEARER.sub(lambda m: f"{m.group(1)}{REDACTED}", text)

    return scrub


def scrub_text(text: str) -> str:
    """`text` with every recognisable secret replaced by '<redacted>'."""
    return text_scrubber()(text)


class SecretFilter(logging.Filter):
    """Rewrites each log record's message (and traceback) with `scrub_text` before it is written."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed log call: leave it to logging's own error report
            return True
        clean = scrub_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub_text("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        elif record.exc_text:
            record.exc_text = scrub_text(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub_text(record.stack_info)
        return True


def redact_logs() -> None:
    """Put a `SecretFilter` on every handler of the root logger (once each): all log output then
    passes through it, whichever module logged."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, SecretFilter) for f in handler.filters):
            handler.addFilter(SecretFilter())
