"""Secrets out of every text we write: records, logs, error messages, the browser's pages.

This module is the one owner of what a secret is and how it is removed; records (`redact`), step
logs (`execution.logs`), the terminal echo, log records (`SecretFilter`) and every answer of the
browser go through it.

Names. An environment variable is secret-named when its name contains KEY, TOKEN, SECRET,
PASSWORD, PASSWD or CREDENTIAL (`is_secret_name`); a config or result field is judged word by word
(`is_secret_field`), so `api_key`, `hf_token`, `db_password` are secrets and a tokenizer's
`eos_token`, a count of `max_tokens` or the `tokenizer` itself are not.

Values. `scrub_text` replaces with '<redacted>':
- the value of every secret-named environment variable, and every value once seen under a
  secret-named field (`remember_secret`, called by `redact`), wherever it shows up later (an
  exception that echoes a request, a log line). The only condition is length: at least
  `MIN_SECRET_CHARS` characters besides surrounding blanks, whatever the characters are (a value
  starting with `/`, holding spaces, base64 with `+/=`), since shorter values would scrub ordinary
  words (a variable KEY=1 must not erase every "1");
- strings shaped like credentials: API tokens with a known prefix (`hf_`, `sk-`, `ghp_`, `AKIA`,
  `ya29.`), the password of a URL (`https://user:PASSWORD@host`), a URL query parameter named like
  a secret (`?token=...`, `&api_key=...`, `&sig=...`), an `Authorization: Bearer ...` value.

Text that arrives in pieces (a log line of any length, read as it is written) is scrubbed by
`Scrubber.split`, which cuts it only where no secret can straddle the cut.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import traceback
from collections.abc import Callable, Iterable
from typing import Any

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 8
"""Shortest value scrubbed as a known secret (see the module docstring)."""
SPLIT_KEEP = 4096
"""`Scrubber.split` keeps at least this many characters uncut: a credential shape longer than this
that arrives across two pieces is only scrubbed as far as the first piece holds it."""

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_SECRET_WORDS = {"key", "apikey", "secret", "password", "passwd", "credential", "credentials", "token"}
_NOT_SECRET_BEFORE_TOKEN = {
    "eos",
    "bos",
    "pad",
    "unk",
    "sep",
    "cls",
    "mask",
    "special",
    "start",
    "end",
    "max",
    "min",
    "num",
    "n",
    "total",
    "first",
    "last",
    "image",
    "audio",
}

_TOKEN_SHAPES = re.compile(
    r"(sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|AKIA[0-9A-Z]{16}|ya29\.[A-Za-z0-9_\-]{20,})"
)
# scheme://user:password@host -> the password goes; the user name stays (it says whose it was).
# Repeats before a fixed part are bounded (a user or parameter name of 64 characters) and the URL
# pattern starts at its "://" (the scheme before it stays as it is anyway): unbounded, a long run
# of letters made each search quadratic (20,000 characters took 14 s).
_URL_PASSWORD = re.compile(r"(://[^/\s:@]{0,64}:)([^/\s@]+)(@)")
_QUERY_SECRET = re.compile(
    r"([?&;](?:[A-Za-z0-9_\-]{0,64}(?:token|key|secret|password|passwd|credential|signature)[A-Za-z0-9_\-]{0,64}"
    r"|sig|auth)=)([^&#\s\"']+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(\bBearer\s+|\bAuthorization:\s*(?:Basic\s+)?)([A-Za-z0-9._~+/\-]{12,}=*)", re.IGNORECASE)
_TOKEN_MARKS = ("sk-", "hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "AKIA", "ya29.")


def _has_token_mark(text: str) -> bool:
    return any(mark in text for mark in _TOKEN_MARKS)


def _has_query(text: str) -> bool:
    return "=" in text and ("?" in text or "&" in text or ";" in text)


def _has_bearer(text: str) -> bool:
    if not any(c in text for c in "bBaA"):
        return False
    lowered = text.lower()
    return "bearer" in lowered or "authorization" in lowered


# Each shape, how it is replaced (whole, or only the group after the kept prefix), and what must be
# in the text for it to match: plain substring tests, which on a megabyte of text cost
# milliseconds where running a pattern costs a good part of a second, so text without the mark
# (nearly all text) never runs the pattern.
_SHAPES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str], Callable[[str], bool]], ...] = (
    (_TOKEN_SHAPES, lambda m: REDACTED, _has_token_mark),
    (_URL_PASSWORD, lambda m: f"{m.group(1)}{REDACTED}{m.group(3)}", lambda text: "://" in text),
    (_QUERY_SECRET, lambda m: f"{m.group(1)}{REDACTED}", _has_query),
    (_BEARER, lambda m: f"{m.group(1)}{REDACTED}", _has_bearer),
)

_remembered: set[str] = set()
_lock = threading.Lock()


@functools.lru_cache(maxsize=4096)  # the environment's names, read again for every text scrubbed
def is_secret_name(name: str) -> bool:
    """For environment variables: any name containing KEY, TOKEN, SECRET, PASSWORD (DESIGN.md)."""
    return bool(SECRET_NAME.search(name))


@functools.lru_cache(maxsize=4096)  # records repeat a few keys thousands of times (manifests)
def is_secret_field(name: str) -> bool:
    """For config and result fields: judged by words, so tokenizer settings survive."""
    words = [w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()) if w]
    if not words:
        return False
    if any(w in _SECRET_WORDS - {"token"} for w in words):
        return True
    if words[-1] == "token":
        return len(words) == 1 or words[-2] not in _NOT_SECRET_BEFORE_TOKEN
    return False


def _forms(value: str) -> list[str]:
    """The texts under which a secret value is scrubbed: itself, and without surrounding blanks
    (a token read from a file often keeps its newline in the variable but not when printed)."""
    stripped = value.strip()
    if len(stripped) < MIN_SECRET_CHARS:
        return []
    return [value, stripped] if stripped != value else [value]


def remember_secret(value: object) -> None:
    """Scrub `value` from every text from now on (it was found under a secret-named field)."""
    if isinstance(value, str) and _forms(value):
        with _lock:
            _remembered.add(value)


def _known_values() -> frozenset[str]:
    for _ in range(3):  # another thread may set a variable while this one reads them
        try:
            env = [v for k, v in list(os.environ.items()) if is_secret_name(k)]
            break
        except RuntimeError:
            continue
    else:
        env = []
    with _lock:
        values = set(env) | _remembered
    return frozenset(form for v in values for form in _forms(v))


MEMO_CHARS = 256
"""`Scrubber` keeps the answer for texts up to this long: a record's strings (package versions,
paths, config values) come back at every write of every step, a log line seldom does."""
MEMO_ENTRIES = 8192


class Scrubber:
    """Removes the secrets of the module docstring from text; built for one set of known values."""

    def __init__(self, known: Iterable[str] = ()):
        # Longest first, so a secret that contains another is removed whole.
        self.known = sorted(set(known), key=lambda v: (-len(v), v))
        self._known_re = re.compile("|".join(map(re.escape, self.known))) if self.known else None
        self.longest = len(self.known[0]) if self.known else 0
        # Short texts already scrubbed by this scrubber: its known values never change (a new
        # secret makes a new scrubber), so an answer stays right for as long as the scrubber lives.
        self._memo: dict[str, str] = {}

    def _known_in(self, text: str) -> re.Pattern[str] | None:
        """The pattern of the known values when `text` holds one of them, else None."""
        # A substring test per value (C's memmem) is far faster than the regex on text that holds
        # none of them, which is nearly all text.
        if self._known_re is not None and any(v in text for v in self.known):
            return self._known_re
        return None

    def __call__(self, text: str) -> str:
        if len(text) > MEMO_CHARS:
            return self._scrub(text)
        clean = self._memo.get(text)
        if clean is None:
            if len(self._memo) >= MEMO_ENTRIES:
                self._memo.clear()
            clean = self._memo[text] = self._scrub(text)
        return clean

    def _scrub(self, text: str) -> str:
        known_re = self._known_in(text)
        if known_re is not None:
            text = known_re.sub(REDACTED, text)
        for pattern, replace, present in _SHAPES:
            if present(text):
                text = pattern.sub(replace, text)
        return text

    def _spans(self, text: str) -> list[tuple[int, int]]:
        known_re = self._known_in(text)
        patterns = [known_re] if known_re is not None else []
        patterns += [pattern for pattern, _, present in _SHAPES if present(text)]
        return [m.span() for p in patterns for m in p.finditer(text)]

    def split(self, text: str) -> tuple[str, str]:
        """(the scrubbed start of `text`, the raw rest), cut where no secret can straddle the cut.

        For text that goes on in the next piece: the rest (at least the last `SPLIT_KEEP`
        characters, or the longest known secret) is to be put before that piece. Only a match
        that covers everything before the cut (a credential shape longer than a piece) is cut.
        """
        cut = len(text) - max(SPLIT_KEEP, self.longest)
        if cut <= 0:
            return "", text
        spans = self._spans(text)
        moved = True
        while moved:
            moved = False
            for start, end in spans:
                if start < cut < end:
                    cut, moved = start, True
        if cut <= 0:
            return self(text), ""
        return self(text[:cut]), text[cut:]


@functools.lru_cache(maxsize=8)
def _scrubber_for(known: frozenset[str]) -> Scrubber:
    return Scrubber(known)


def text_scrubber() -> Scrubber:
    """The scrubber for the secrets known now (environment and remembered values); cheap to call
    again, so a caller holding text that arrives over time asks again for each piece."""
    return _scrubber_for(_known_values())


def scrubber_with(values: Iterable[str]) -> Scrubber:
    """The scrubber for the secrets known here plus `values` (secrets known elsewhere: a launcher's)."""
    return _scrubber_for(_known_values() | frozenset(f for v in values for f in _forms(v)))


def secrets_in_args(args: Iterable[str]) -> list[str]:
    """The secrets command-line arguments carry, for a process that lacks this one's environment:
    every value known here (secret-named variables, remembered values) that an argument holds, and
    the value given to a secret-named flag (`--hf_token VALUE`, `--api_key=VALUE`)."""
    args = [a for a in args if isinstance(a, str)]
    known = _known_values()
    found = {v for v in known if any(v in a for a in args)}
    for i, arg in enumerate(args):
        if not arg.startswith("-"):
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if not is_secret_field(name):
            continue
        if not eq and i + 1 < len(args) and not args[i + 1].startswith("-"):
            value = args[i + 1]
        found.update(_forms(value))
    return sorted(found)


def scrub_text(text: str) -> str:
    """`text` with every recognisable secret replaced by '<redacted>'."""
    return text_scrubber()(text)


def scrub_json(value: Any, scrub: Callable[[str], str] | None = None) -> Any:
    """JSON data with every string (keys too) scrubbed by value; field names are not judged."""
    scrub = scrub or text_scrubber()
    if isinstance(value, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub_json(v, scrub) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_json(v, scrub) for v in value]
    if isinstance(value, str):
        return scrub(value)
    return value


def redact(value: Any, scrubber: Scrubber | None = None) -> Any:
    """`value` (JSON data) with secret-named fields and secret-looking text replaced.

    A secret-named field's value is also remembered (`remember_secret`), so that the same value is
    scrubbed wherever else it shows up: an error message, a log line, a URL in a version.
    `scrubber`: one `text_scrubber()` taken by a caller that redacts many values at once (a listing
    of thousands of steps), instead of reading the environment again for each; a secret-named
    field found in `value` is still added to it.
    """
    first = scrubber or text_scrubber()
    named: list[Any] = []
    out = _redact(value, first, named)
    if not named:
        return out
    # Secret-named fields' values are scrubbed from the rest of `value` too: once more, when they
    # were not known to the first scrubber (nearly always they were: a record is written again and
    # again with the same config).
    for v in named:
        _remember_all(v)
    again = text_scrubber()
    return out if again.known == first.known else _redact(value, again, [])


# In raw text (a file shown as text, a record too damaged to parse, a log): "hf_token": "value" and
# API_KEY=value lose their value when the name is a secret by the field rule above.
_TEXT_JSON_MEMBER = re.compile(r'("([A-Za-z0-9_.\-]+)"\s*:\s*)"(?:[^"\\\n]|\\.)*"')
_TEXT_ASSIGNMENT = re.compile(r"\b([A-Za-z][A-Za-z0-9_]*)([ \t]*=[ \t]*)([^\s&;]+)")  # one line only


def redact_text(text: str) -> str:
    """Raw text redacted by the same rules as a record (`redact`): the value of a JSON member or
    an assignment whose name is a secret field, then every secret-looking value (`scrub_text`)."""
    text = _TEXT_JSON_MEMBER.sub(
        lambda m: f'{m.group(1)}"{REDACTED}"' if is_secret_field(m.group(2)) else m.group(0), text
    )
    text = _TEXT_ASSIGNMENT.sub(
        lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}" if is_secret_field(m.group(1)) else m.group(0), text
    )
    return text_scrubber()(text)


def _remember_all(value: Any) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _remember_all(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _remember_all(v)
    else:
        remember_secret(value)


def _redact(value: Any, scrub: Callable[[str], str], named: list[Any]) -> Any:
    """`value` redacted with `scrub`; the values found under secret-named fields go to `named`."""
    # Strings (most of a record's leaves) are scrubbed in place, not through a call of their own.
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if is_secret_field(k if type(k) is str else str(k)):
                named.append(v)
                out[k] = REDACTED
            elif type(v) is str:
                out[k] = scrub(v)
            elif isinstance(v, (dict, list, tuple, str)):
                out[k] = _redact(v, scrub, named)
            else:
                out[k] = v
        return out
    if isinstance(value, (list, tuple)):
        return [scrub(v) if type(v) is str else _redact(v, scrub, named) for v in value]
    if isinstance(value, str):
        return scrub(value)
    return value


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
