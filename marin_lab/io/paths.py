"""The one rule for "is this location inside that one", for every place that confines a path.

Comparing the strings as written is not enough: `/data/link/x` lies inside `/data/prefix` when
`link` is a symlink to it, `file:///data/prefix` is `/data/prefix`, `gcs://b/p` is `gs://b/p`,
and `/data/prefix-old` starts with `/data/prefix` without lying inside it. So both sides are first
brought to a canonical form, and only then compared segment by segment:

- a local path (plain, relative to the working directory, `~`, or a `file://`/`local://` URL)
  becomes its absolute real path, every symlink resolved (`os.path.realpath`: the part of the
  path that exists is resolved, the rest is taken as written);
- any other fsspec URL becomes `protocol://path` with the filesystem's own protocol name (`gs`
  for `gcs`), its path stripped the way that filesystem strips it, and empty and `.` segments
  dropped. A `..` segment is refused (`PathOutsideError`): object stores take it literally as part
  of a key, while a reader takes it as "the folder above", so no answer would be safe;
- http(s) URLs are compared as written (less a trailing `/`): they have no folders to resolve.

The canonical form of a URL is still a usable URL for the same location (`memory://a/b`,
`gs://bucket/p`), so a caller may keep it after checking it.

`contain_links(tree)` applies the rule to a folder read as a root of its own (an unpacked
package): afterwards no symlink in it leads out.
"""

from __future__ import annotations

import os

import fsspec
from fsspec.implementations.local import LocalFileSystem

from marin_lab.errors import MarinLabError

__all__ = ["PathOutsideError", "canonical", "canonical_within", "confine", "contain_links", "is_within", "overlaps"]

_LOCAL_PROTOCOLS = ("file", "local")
_AS_WRITTEN = ("http", "https")


class PathOutsideError(MarinLabError, ValueError):
    """A path lies outside the folder it must stay in, or cannot be placed at all (a remote `..`)."""


def _split(url: str) -> tuple[str, str]:
    """(protocol, rest); '' for a local path."""
    if "://" in url:
        protocol, rest = url.split("://", 1)
        return protocol.lower(), rest
    return "", url


def canonical(url: str) -> str:
    """`url` in the form two locations are compared in (see the module docstring)."""
    if not isinstance(url, str) or not url:
        raise PathOutsideError(f"{url!r} is not a path or URL")
    protocol, rest = _split(url)
    if protocol in _AS_WRITTEN:
        return url.rstrip("/")
    if not protocol or protocol in _LOCAL_PROTOCOLS:
        local = rest if not protocol else LocalFileSystem._strip_protocol(url)
        return os.path.realpath(os.path.expanduser(local))
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError):  # an fsspec protocol not installed here: compared as written
        name, path = protocol, rest
    else:
        name = cls.protocol if isinstance(cls.protocol, str) else cls.protocol[0]
        path = cls._strip_protocol(url)
        if name in _LOCAL_PROTOCOLS:
            return os.path.realpath(path)
    segments = [s for s in path.split("/") if s not in ("", ".")]
    if ".." in segments:
        raise PathOutsideError(
            f"{url}: a '..' segment in a {protocol}:// URL names no single location "
            "(object stores keep it as part of the key); write the path without it"
        )
    return f"{name}://" + "/".join(segments)


def canonical_within(child: str, parent: str) -> bool:
    """Whether canonical `child` is canonical `parent` or lies below it (no resolving here: for
    callers that already hold canonical forms, e.g. cached real paths)."""
    child_protocol, child_path = _split(child)
    parent_protocol, parent_path = _split(parent)
    if child_protocol != parent_protocol:
        return False
    if child_protocol in _AS_WRITTEN:
        return child == parent or child.startswith(parent.rstrip("/") + "/")
    parent_path = parent_path.rstrip("/")
    if not parent_path:  # "/" or a whole protocol ("memory://")
        return True
    return child_path == parent_path or child_path.startswith(parent_path + "/")


def is_within(child: str, parent: str) -> bool:
    """Whether `child` is `parent` or lies inside it, both resolved (symlinks, `file://`, relative
    paths, protocol aliases) before comparing."""
    return canonical_within(canonical(child), canonical(parent))


def overlaps(a: str, b: str) -> bool:
    """Whether one of `a` and `b` lies inside the other (or they are the same location)."""
    ca, cb = canonical(a), canonical(b)
    return canonical_within(ca, cb) or canonical_within(cb, ca)


def confine(child: str, parent: str, *, what: str = "path") -> str:
    """Canonical `child`, or PathOutsideError naming `what` when it resolves outside `parent`."""
    real, root = canonical(child), canonical(parent)
    if not canonical_within(real, root):
        where = "" if real == child else f" (resolves to {real})"
        raise PathOutsideError(f"{what} {child}{where} lies outside {parent}; it must stay inside it")
    return real


_MAX_LINK_HOPS = 40  # as the kernel's own limit on nested symlinks


def _resolve_in_tree(tree: str, rel: str) -> str | None:
    """Where `rel` leads inside `tree` when `tree` is read as a root of its own (an absolute link
    target starts at `tree`); None when it climbs out or loops."""
    parts = [p for p in rel.split("/") if p]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return None
            resolved.pop()
            continue
        here = os.path.join(tree, *resolved, part)
        if not os.path.islink(here):
            resolved.append(part)
            continue
        hops += 1
        if hops > _MAX_LINK_HOPS:
            return None
        target = os.readlink(here)
        if target.startswith("/"):
            resolved = []
        parts = [p for p in target.split("/") if p] + parts
    return os.path.join(tree, *resolved)


def contain_links(tree: str) -> list[dict[str, str]]:
    """Keep every symlink under `tree` inside it, reading `tree` as a root of its own (an unpacked
    package): an absolute link is rewritten relative to the tree's root, and a link that leads out
    of the tree is removed. Returns the removed ones as `{"path", "link"}`, sorted by path.

    Unpacked as is, `usr/share/doc/x/jquery.js -> /usr/share/javascript/jquery.js` would read this
    machine's own file (and copy it into a step's output as package content); rewritten, it names
    the package's own file, or nothing (a broken link, skipped and listed by whoever reads it).
    The tree must not change while this runs (it is meant for a folder just unpacked)."""
    links = []
    for folder, dirs, files in os.walk(tree):  # followlinks=False: a linked folder is listed, not entered
        links += [os.path.join(folder, name) for name in dirs + files if os.path.islink(os.path.join(folder, name))]
    removed = []
    # Every link is judged on the tree as unpacked, before any is changed: the outcome does not
    # depend on the order (a link through one that leaves leaves too).
    judged = [(path, os.readlink(path), _resolve_in_tree(tree, os.path.relpath(path, tree))) for path in sorted(links)]
    for path, target, inside in judged:
        rel = os.path.relpath(path, tree)
        if inside is not None and target.startswith("/"):
            os.unlink(path)
            os.symlink(os.path.relpath(inside, os.path.dirname(path)), path)
        elif inside is None:
            os.unlink(path)
            removed.append({"path": rel, "link": target})
    # What the system does with what is left must agree: the one containment rule has the last word.
    for path in sorted(links):
        if os.path.islink(path) and not is_within(path, tree):
            removed.append({"path": os.path.relpath(path, tree), "link": os.readlink(path)})
            os.unlink(path)
    return sorted(removed, key=lambda link: link["path"])
