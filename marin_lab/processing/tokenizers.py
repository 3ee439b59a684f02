"""The one owner of tokenizers: where the tokenizer a spec names comes from, and loaded tokenizers
kept per process.

A tokenizer is named by a `tokenizer.json` path (local or any fsspec URL), a folder holding one
(such as the output of `train_tokenizer`), or a Hugging Face hub model id (with a revision);
`resolve_tokenizer_bytes` turns a spec into the file's bytes. Everything that turns those bytes
into a `tokenizers.Tokenizer` -- the tokenize steps and their shard workers, evaluation, the
browser's token pages -- goes through `tokenizer_from_bytes` or `tokenizer_at`, which keep the
last few loaded tokenizers of this process by the sha256 of their JSON: loading GPT-2's takes
~0.3 s of CPU, which would otherwise be paid once per shard instead of once per process (the
shard engine's reused worker processes keep theirs from one step to the next).

A cached tokenizer is shared: callers use it to encode and decode, never change its settings.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from marin_lab.io import fs as mfs
from marin_lab.processing.errors import TokenizeError
from marin_lab.processing.known_tokenizers import how_to_fetch
from marin_lab.store.token_cache import TOKENIZER_FILE

logger = logging.getLogger(__name__)

__all__ = [
    "CACHE_SIZE",
    "EOS_CANDIDATES",
    "find_eos_id",
    "load_tokenizer",
    "load_tokenizer_offline",
    "optional_tokenizer_at",
    "resolve_tokenizer_bytes",
    "tokenizer_at",
    "tokenizer_from_bytes",
]

EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[SEP]")
CACHE_SIZE = 4
"""Loaded tokenizers kept per process (a shard worker needs one; the browser a few)."""

_CACHE: OrderedDict[str, Any] = OrderedDict()  # sha256 of the JSON -> tokenizers.Tokenizer
_LOCK = threading.Lock()


def _cached(sha256: str) -> Any | None:
    with _LOCK:
        tokenizer = _CACHE.get(sha256)
        if tokenizer is not None:
            _CACHE.move_to_end(sha256)
        return tokenizer


def tokenizer_from_bytes(data: bytes, origin: str) -> Any:
    """The `tokenizers.Tokenizer` of a tokenizer.json's bytes (`origin` names them in errors),
    from this process's cache when the same bytes were loaded before."""
    key = hashlib.sha256(data).hexdigest()
    found = _cached(key)
    if found is not None:
        return found
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as err:  # the tokenizers library raises plain Exceptions for bad files
        raise TokenizeError(f"tokenizer {origin}: not a valid tokenizer.json ({err})") from err
    with _LOCK:
        _CACHE[key] = tokenizer
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return tokenizer


def tokenizer_at(url: str, *, sha256: str | None = None, read: Callable[[str], bytes] | None = None) -> Any:
    """The tokenizer.json at `url` (a token cache's copy, a model's). `sha256`, when its writer
    recorded one: a tokenizer of those bytes already loaded here is used without reading the file.
    `read` reads the file (default: any fsspec URL; the browser passes its confined reader)."""
    if sha256:
        found = _cached(sha256)
        if found is not None:
            return found
    return tokenizer_from_bytes((read or mfs.read_bytes)(url), url)


def optional_tokenizer_at(url: str | None) -> Any | None:
    """`tokenizer_at(url)`, or None when there is no `url` or no file there."""
    if not url or not mfs.exists(url):
        return None
    return tokenizer_at(url)


def _looks_like_path(spec: str) -> bool:
    return (
        spec.startswith(("/", ".", "~"))
        or spec.endswith(".json")
        or (os.sep in spec.strip("/") and spec.count("/") > 1)
    )


def resolve_tokenizer_bytes(spec: str, revision: str | None = None) -> tuple[bytes, str]:
    """The bytes of the tokenizer.json that `spec` names, and where they came from."""
    if not spec:
        raise TokenizeError("tokenizer is empty: give a tokenizer.json path, a folder, or a hub id")
    if "://" in spec or os.path.exists(os.path.expanduser(spec)) or _looks_like_path(spec):
        url = spec if "://" in spec else os.path.abspath(os.path.expanduser(spec))
        fs, path = mfs.fs_and_path(url)
        if fs.isdir(path):
            url = mfs.join(url, TOKENIZER_FILE)
            path = mfs.fs_and_path(url)[1]
        if not fs.isfile(path):
            raise TokenizeError(
                f"tokenizer {spec!r}: {url} does not exist. Give the path of a tokenizer.json, a "
                f"folder holding one (e.g. a train_tokenizer step's output), or a hub model id."
            )
        return mfs.read_bytes(url), url
    return _hub_tokenizer_bytes(spec, revision)


def _hub_tokenizer_bytes(repo_id: str, revision: str | None) -> tuple[bytes, str]:
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    if revision is None:
        logger.warning(
            "tokenizer %r from the hub without tokenizer_revision: pin a commit sha so the token "
            "cache can be reproduced",
            repo_id,
        )
    where = f"hub tokenizer {repo_id!r} (revision {revision!r})"
    # hf_hub_download retries an unreachable hub five times with back-off, logging each try, before
    # it looks in the cache; one request without retries decides instead, and the cache answers.
    # The errors below say all the hub's did (`from None`): its frames would only lengthen the log.
    offline = constants.is_offline_mode()
    cache_only = offline
    if not offline:
        try:
            get_hf_file_metadata(hf_hub_url(repo_id, TOKENIZER_FILE, revision=revision))
        except HfHubHTTPError as err:
            status = err.response.status_code
            if status < 500 and status not in (408, 429):  # the hub answered: no such repo, revision or file
                raise TokenizeError(
                    f"field 'tokenizer': {where} has no {TOKENIZER_FILE} on the Hugging Face hub (HTTP "
                    f"{status}); check the id and tokenizer_revision (a gated repo needs HF_TOKEN), or give "
                    f"the path of a local {TOKENIZER_FILE}"
                ) from None
            cache_only = True
        except Exception:  # no connection, no name resolution, a timeout: only the cache can answer
            cache_only = True
    try:
        local = hf_hub_download(
            repo_id=repo_id, filename=TOKENIZER_FILE, revision=revision, local_files_only=cache_only
        )
    except LocalEntryNotFoundError:
        fetch = how_to_fetch(repo_id, revision)
        raise TokenizeError(
            f"field 'tokenizer': {where} is not in the Hugging Face cache and the hub "
            f"{'is off (HF_HUB_OFFLINE is set)' if offline else 'cannot be reached'}; fetch it once where "
            f"there is network (`{fetch}`), or give the path of a local {TOKENIZER_FILE}"
        ) from None
    except Exception as err:
        raise TokenizeError(
            f"field 'tokenizer': {where}: could not get {TOKENIZER_FILE} from the Hugging Face hub or its "
            f"cache ({type(err).__name__}: {err}). If it is meant to be a local path, check that it exists"
        ) from err
    with open(local, "rb") as f:
        return f.read(), f"hf://{repo_id}@{revision or 'main'}/{TOKENIZER_FILE}"


def load_tokenizer_offline(spec: str, revision: str | None = None) -> Any | None:
    """The tokenizer `spec` names if it can be read without the network (a path, a folder, or a hub
    id already in the Hugging Face cache), else None. Planning uses this: a plan never downloads."""
    if "://" in spec or os.path.exists(os.path.expanduser(spec)) or _looks_like_path(spec):
        return load_tokenizer(spec, revision)
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(spec, TOKENIZER_FILE, revision=revision)
    if not isinstance(cached, str):  # None (never fetched) or a "known missing" marker
        return None
    with open(cached, "rb") as f:
        return tokenizer_from_bytes(f.read(), cached)


def load_tokenizer(spec: str, revision: str | None = None) -> Any:
    """A `tokenizers.Tokenizer` from a path, folder or hub id (see `resolve_tokenizer_bytes`)."""
    data, origin = resolve_tokenizer_bytes(spec, revision)
    return tokenizer_from_bytes(data, origin)


def find_eos_id(tokenizer: Any, eos_token: str | None) -> int:
    """The id of `eos_token`, or of the first known end-of-text token when it is None."""
    candidates = (eos_token,) if eos_token else EOS_CANDIDATES
    for token in candidates:
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return token_id
    raise TokenizeError(
        f"the tokenizer has no end-of-text token among {list(candidates)}; set "
        f"TokenizeConfig.eos_token to a token it knows"
    )
