"""Keep secrets off the page even if a record or file holds one.

The executor already redacts step records; this is the second line (records written before that,
or by other tools). Text is scrubbed by `marin_lab.execution.secrets.scrub_text`, the records' own
rule; keys also by the records' field rule (`hf_token`, `api_key`). A key is treated as a secret when it looks like an environment variable (upper case) and
names a KEY, TOKEN, SECRET or PASSWORD, or, inside an `env`-like mapping, whatever its case.
Config fields such as `tokenizer` or `max_tokens` are not environment variables and stay visible.
"""

from __future__ import annotations

import re
from typing import Any

from marin_lab.execution.provenance import is_secret_field
from marin_lab.execution.secrets import scrub_text

REDACTED = "[redacted]"
_SECRET_WORDS = r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)"
_ENV_STYLE_SECRET = re.compile(rf"[A-Z0-9_]*{_SECRET_WORDS}[A-Z0-9_]*")
_ANY_CASE_SECRET = re.compile(rf".*{_SECRET_WORDS}.*", re.IGNORECASE)
_ENV_CONTAINERS = {"env", "env_vars", "environ", "environment_variables", "envvars"}
# In raw text (a corrupt record, a .env-like file): "API_KEY": "value" or API_KEY=value.
_TEXT_JSON_SECRET = re.compile(rf'("[A-Za-z0-9_]*{_SECRET_WORDS}[A-Za-z0-9_]*"\s*:\s*)"[^"\n]*"')
_TEXT_ASSIGN_SECRET = re.compile(rf"\b([A-Z0-9_]*{_SECRET_WORDS}[A-Z0-9_]*\s*=\s*)\S+")


def is_secret_key(key: str, *, in_env: bool = False) -> bool:
    if _ENV_STYLE_SECRET.fullmatch(key) or is_secret_field(key.rsplit(".", 1)[-1]):
        return True
    return in_env and bool(_ANY_CASE_SECRET.fullmatch(key))


def redact(value: Any, *, in_env: bool = False) -> Any:
    """A copy of a JSON value with secret-named entries replaced by '[redacted]'."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(key, str) and is_secret_key(key, in_env=in_env):
                out[key] = REDACTED
            else:
                child_env = isinstance(key, str) and key.lower() in _ENV_CONTAINERS
                out[key] = redact(item, in_env=child_env)
        return out
    if isinstance(value, list):
        return [redact(item, in_env=in_env) for item in value]
    if isinstance(value, str):
        return scrub_text(value)
    return value


def redact_text(text: str) -> str:
    text = _TEXT_JSON_SECRET.sub(lambda m: f'{m.group(1)}"{REDACTED}"', text)
    return scrub_text(_TEXT_ASSIGN_SECRET.sub(lambda m: f"{m.group(1)}{REDACTED}", text))
