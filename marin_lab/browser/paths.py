"""Path confinement: every path the browser opens must lie inside one of its configured roots.

A request names a file by URL (`gs://bucket/x`, `memory://x`) or local path (absolute, or relative
to the first root). It is refused (403) when it has a `..` segment, names another protocol or
bucket, or, on a local disk, resolves through a symlink to somewhere outside every root. The check
is `marin_lab.io.paths`' containment rule (the one every confined path uses), made on the resolved
real path, so a symlink inside a root that points out of it is caught;
`storage.open_file` checks again on the descriptor it opened, so a swap after the check is caught
too.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from dataclasses import dataclass, field

from marin_lab.browser.errors import BadRequestError, ForbiddenPathError
from marin_lab.io.fs import normalize_prefix
from marin_lab.io.paths import canonical, canonical_within

_REAL_DIR_TTL_S = 5.0
# gcsfs accepts both spellings of the protocol; compare them as one.
_PROTOCOL_ALIASES = {"gcs": "gs", "file": ""}


def _split_protocol(url: str) -> tuple[str, str]:
    """(protocol without '://', or '' for local; the rest)."""
    if "://" in url:
        protocol, rest = url.split("://", 1)
        protocol = _PROTOCOL_ALIASES.get(protocol, protocol)
        return protocol, rest
    return "", url


def _clean_segments(rest: str, original: str) -> list[str]:
    segments = []
    for segment in rest.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            raise ForbiddenPathError(
                f"path {original!r} contains '..'; name files by their full path inside the browser's roots"
            )
        segments.append(segment)
    return segments


@dataclass(frozen=True)
class Roots:
    """The folders (local paths or bucket URLs) that the browser may read, nothing else."""

    urls: tuple[str, ...]
    """Normalised roots: absolute local paths or `protocol://bucket/path` without a trailing '/'."""
    _real_dirs: dict = field(default_factory=dict, compare=False, repr=False)
    """Resolved real paths of folders seen recently: {folder: (real path, time)}."""
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @classmethod
    def of(cls, roots: list[str] | tuple[str, ...]) -> Roots:
        if not roots:
            raise ValueError("the browser needs at least one root folder to serve")
        urls = []
        for root in roots:
            protocol, rest = _split_protocol(root)
            if protocol:
                urls.append(f"{protocol}://" + "/".join(_clean_segments(rest, root)))
            else:
                urls.append(normalize_prefix(rest))
        return cls(tuple(dict.fromkeys(urls)))  # a root named twice (the prefix and a --root) once

    @property
    def primary(self) -> str:
        return self.urls[0]

    def resolve(self, requested: str) -> str:
        """The confined URL or absolute local path for `requested`; raises ForbiddenPathError."""
        if not isinstance(requested, str) or not requested.strip():
            raise BadRequestError("missing 'path': give a file or folder path inside the roots")
        if "\x00" in requested:
            raise BadRequestError(f"path {requested!r} contains a NUL byte")
        protocol, rest = _split_protocol(requested.strip())
        if protocol:
            return self._resolve_remote(protocol, rest, requested)
        if not rest.startswith("/"):
            primary_protocol, primary_rest = _split_protocol(self.primary)
            if primary_protocol:
                return self._resolve_remote(primary_protocol, f"{primary_rest}/{rest}", requested)
            rest = f"{self.primary}/{rest}"
        return self._resolve_local(rest, requested)

    def contains(self, requested: str) -> bool:
        try:
            self.resolve(requested)
        except (ForbiddenPathError, BadRequestError):
            return False
        return True

    def _resolve_remote(self, protocol: str, rest: str, original: str) -> str:
        url = f"{protocol}://" + "/".join(_clean_segments(rest, original))
        real = canonical(url)
        if any(canonical_within(real, root) for root in self._remote_roots):
            return url
        raise ForbiddenPathError(
            f"path {original!r} is outside the browser's roots {list(self.urls)}; "
            "start the browser with --root for that location if you mean to browse it"
        )

    @functools.cached_property
    def _remote_roots(self) -> tuple[str, ...]:
        """The bucket roots in canonical form, computed once."""
        return tuple(canonical(root) for root in self.urls if _split_protocol(root)[0])

    def _realpath(self, path: str) -> str:
        """os.path.realpath, with the folders' real paths remembered for a few seconds.

        A 1,000-step experiment resolves 1,000 paths under a handful of folders; resolving each
        folder once keeps that to one lstat per step. The short memory bounds how long a folder
        swapped for a symlink could go unnoticed.
        """
        folder, name = os.path.split(path)
        if not name:
            return os.path.realpath(path)
        now = time.monotonic()
        with self._lock:
            cached = self._real_dirs.get(folder)
        if cached is None or now - cached[1] > _REAL_DIR_TTL_S:
            real_folder = os.path.realpath(folder)
            with self._lock:
                if len(self._real_dirs) > 50_000:
                    self._real_dirs.clear()
                self._real_dirs[folder] = (real_folder, now)
        else:
            real_folder = cached[0]
        full = os.path.join(real_folder, name)
        return os.path.realpath(full) if os.path.islink(full) else full

    def _real_roots(self) -> list[str]:
        return [self._realpath(root) for root in self.urls if not _split_protocol(root)[0]]

    def _resolve_local(self, path: str, original: str) -> str:
        normal = "/" + "/".join(_clean_segments(path, original))
        self.check_real(self._realpath(normal), original)
        return normal

    def check_real(self, real: str, original: str) -> None:
        """Refuse a local real path (symlinks resolved) that lies outside every local root."""
        if any(canonical_within(real, real_root) for real_root in self._real_roots()):
            return
        raise ForbiddenPathError(
            f"path {original!r} resolves to {real!r}, outside the browser's roots "
            f"{list(self.urls)} (a symlink that leaves the roots is not followed)"
        )
