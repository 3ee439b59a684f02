"""Conditional writes of one small file: atomic create, compare-and-swap, conditional delete.

Leases need "write only if nobody else did in the meantime". Each filesystem offers it
differently:

- local disk: mutations hold an exclusive `flock` on the parent directory (all writers are on
  this host by definition), and the file is replaced atomically with a rename. The token is the
  content's sha256.
- gs://: object generations. Create is `ifGenerationMatch=0`, replace is
  `ifGenerationMatch=<generation read>`, through google-cloud-storage (which honours
  STORAGE_EMULATOR_HOST). The token is the generation.
- memory:// (tests): a process-wide lock; the token is the content's sha256.

`ConflictError` means the precondition failed: someone else wrote first.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from marin_lab.io.fs import fs_and_path


class ConflictError(Exception):
    """The file changed (or appeared) since it was read: the conditional write did not happen."""


class ConditionalFile:
    """Base class: one small file that is only ever written conditionally."""

    def read(self) -> tuple[bytes, Any] | None:
        """(content, token), or None if the file does not exist."""
        raise NotImplementedError

    def create(self, data: bytes) -> Any:
        """Write `data` if the file does not exist; return the new token or raise ConflictError."""
        raise NotImplementedError

    def replace(self, data: bytes, token: Any) -> Any:
        """Write `data` if the file still has `token`; return the new token or raise ConflictError."""
        raise NotImplementedError

    def delete(self, token: Any) -> None:
        """Remove the file if it still has `token` (else raise ConflictError)."""
        raise NotImplementedError


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class LocalConditionalFile(ConditionalFile):
    def __init__(self, path: str):
        self.path = path
        self.folder = os.path.dirname(path) or "."

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            fd = os.open(self.folder, os.O_RDONLY)
        except FileNotFoundError:  # made on first use, not checked at every lock
            os.makedirs(self.folder, exist_ok=True)
            fd = os.open(self.folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _read_unlocked(self) -> tuple[bytes, str] | None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        return data, _sha(data)

    def _write_unlocked(self, data: bytes) -> str:
        tmp = os.path.join(self.folder, f".tmp.{os.path.basename(self.path)}.{uuid.uuid4().hex[:8]}")
        # No fsync: a conditional file holds a claim (a lease, WAITING), not a result. After a power
        # loss a missing or torn one reads as free or stale (leases.py), and every holder died with
        # the host anyway; within a running host, the rename alone is atomic for all readers.
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)
        return _sha(data)

    def read(self) -> tuple[bytes, str] | None:
        return self._read_unlocked()  # writes are atomic renames: no lock needed to read

    def create(self, data: bytes) -> str:
        with self._locked():
            if os.path.exists(self.path):
                raise ConflictError(f"{self.path} already exists")
            return self._write_unlocked(data)

    def replace(self, data: bytes, token: Any) -> str:
        with self._locked():
            current = self._read_unlocked()
            if current is None or current[1] != token:
                raise ConflictError(f"{self.path} changed since it was read")
            return self._write_unlocked(data)

    def delete(self, token: Any) -> None:
        with self._locked():
            current = self._read_unlocked()
            if current is None:
                return
            if current[1] != token:
                raise ConflictError(f"{self.path} changed since it was read")
            os.remove(self.path)


_MEMORY_LOCK = threading.Lock()


class MemoryConditionalFile(ConditionalFile):
    def __init__(self, fs: Any, path: str):
        self.fs, self.path = fs, path

    def _read_unlocked(self) -> tuple[bytes, str] | None:
        try:
            data = self.fs.cat_file(self.path)
        except FileNotFoundError:
            return None
        return data, _sha(data)

    def read(self) -> tuple[bytes, str] | None:
        with _MEMORY_LOCK:
            return self._read_unlocked()

    def create(self, data: bytes) -> str:
        with _MEMORY_LOCK:
            if self._read_unlocked() is not None:
                raise ConflictError(f"memory://{self.path} already exists")
            self.fs.pipe_file(self.path, data)
            return _sha(data)

    def replace(self, data: bytes, token: Any) -> str:
        with _MEMORY_LOCK:
            current = self._read_unlocked()
            if current is None or current[1] != token:
                raise ConflictError(f"memory://{self.path} changed since it was read")
            self.fs.pipe_file(self.path, data)
            return _sha(data)

    def delete(self, token: Any) -> None:
        with _MEMORY_LOCK:
            current = self._read_unlocked()
            if current is None:
                return
            if current[1] != token:
                raise ConflictError(f"memory://{self.path} changed since it was read")
            self.fs.rm_file(self.path)


_GCS_CLIENT: Any = None
_GCS_CLIENT_LOCK = threading.Lock()


def _gcs_client() -> Any:
    global _GCS_CLIENT
    with _GCS_CLIENT_LOCK:
        if _GCS_CLIENT is None:
            # Not `from google.cloud import storage`: mypy finds no `storage` in that namespace that way.
            import google.cloud.storage as storage

            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials

                _GCS_CLIENT = storage.Client(credentials=AnonymousCredentials(), project="marin-lab-emulator")
            else:
                _GCS_CLIENT = storage.Client()
        return _GCS_CLIENT


def gcs_bucket_location(bucket: str, *, patient: bool = True) -> str:
    """A bucket's location (`us-west4`, `us`, ...), lower-cased: where reading it costs no egress.

    `patient=False` (a plan) asks once with a 10 s timeout and no retries, so that a closed port or
    an unreachable host answers at once instead of after the client's two minutes of retries."""
    if patient:
        found = _gcs_client().get_bucket(bucket, timeout=30)
    else:
        found = _gcs_client().get_bucket(bucket, timeout=10, retry=None)
    return str(found.location or "unknown").lower()


# Errors that mean "could not ask" (no credentials, no network, no answer), not "asked, and the
# answer is no" (no such bucket, permission denied): matched by class name, so that no cloud library
# is imported to classify them.
_UNREACHABLE_NAMES = frozenset(
    {
        "DefaultCredentialsError",
        "RefreshError",
        "TransportError",  # google.auth
        "Unauthorized",  # google.api_core: HTTP 401, the request carried no (valid) credentials
        "ConnectionError",
        "ConnectTimeout",
        "ReadTimeout",
        "Timeout",  # requests
        "RetryError",
        "DeadlineExceeded",
        "ServiceUnavailable",  # google.api_core
        "ClientConnectorError",
        "ClientConnectorDNSError",
        "ServerTimeoutError",  # aiohttp (gcsfs)
    }
)


def cannot_ask(err: BaseException) -> bool:
    """Whether `err` says the cloud could not be asked at all (credentials or network), as opposed to
    an answer (a missing bucket, a refused permission)."""
    if isinstance(err, (ConnectionError, TimeoutError, socket.gaierror)):
        return True
    return any(c.__name__ in _UNREACHABLE_NAMES for c in type(err).__mro__)


def reset_gcs_client() -> None:
    """Forget the cached client (tests that start a new emulator call this)."""
    global _GCS_CLIENT
    with _GCS_CLIENT_LOCK:
        _GCS_CLIENT = None


class GcsConditionalFile(ConditionalFile):
    def __init__(self, bucket: str, name: str):
        self.bucket_name, self.name = bucket, name

    def _blob(self) -> Any:
        return _gcs_client().bucket(self.bucket_name).blob(self.name)

    def read(self) -> tuple[bytes, int] | None:
        from google.api_core.exceptions import NotFound

        blob = self._blob()
        try:
            data = blob.download_as_bytes()
        except NotFound:
            return None
        return data, int(blob.generation)

    def _upload(self, data: bytes, generation: int) -> int:
        from google.api_core.exceptions import PreconditionFailed

        blob = self._blob()
        try:
            blob.upload_from_string(data, content_type="application/json", if_generation_match=generation)
        except PreconditionFailed as err:
            raise ConflictError(f"gs://{self.bucket_name}/{self.name} changed since it was read") from err
        return int(blob.generation)

    def create(self, data: bytes) -> int:
        return self._upload(data, 0)

    def replace(self, data: bytes, token: Any) -> int:
        return self._upload(data, int(token))

    def delete(self, token: Any) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            self._blob().delete(if_generation_match=int(token))
        except NotFound:
            return
        except PreconditionFailed as err:
            raise ConflictError(f"gs://{self.bucket_name}/{self.name} changed since it was read") from err


def conditional_file(url: str) -> ConditionalFile:
    """The conditional-write implementation for `url`'s filesystem."""
    fs, path = fs_and_path(url)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return LocalConditionalFile(path)
    if protocol in ("gs", "gcs"):
        bucket, _, name = path.partition("/")
        return GcsConditionalFile(bucket, name)
    if protocol == "memory":
        return MemoryConditionalFile(fs, path)
    raise NotImplementedError(
        f"{url}: leases need atomic conditional writes, which marin_lab implements for local disk, "
        "gs:// and memory://; use one of those for the prefix"
    )
