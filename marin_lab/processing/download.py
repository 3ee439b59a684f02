"""Download: copy raw files into a step's output, checked, with a provenance record.

Three sources:
- a package source, `debian://python3.11-doc/usr/share/doc/python3.11/html` or
  `pypi://NAME==VERSION/PATH` (marin_lab.processing.packages): the package is fetched into the
  machine's corpus cache when the step runs (never when it is planned), and the versions used are
  recorded in `provenance.json` and the step's result; each file's recorded source is
  `{package source}/{relative path}`, not the cache folder;
- any fsspec URL, folder or glob (`file://`, `gs://`, `http(s)://`, `memory://`): a folder is
  copied recursively, a glob copies its matches (relative to the part before the first wildcard),
  anything else is one file;
- a Hugging Face dataset repository (`hf_dataset` + a pinned `revision`), fetched with
  `huggingface_hub.snapshot_download` (offline, it is served from the local hub cache).

Files land under `{output_path}/data/` with their relative paths. Each file is streamed to a
temporary name while its sha256 is computed, checked against `expected` (size and/or sha256) and
then renamed into place (on object stores: uploaded in one put), so no reader ever sees a partial
file. Transient errors are retried with exponential backoff; a missing file or a checksum that
stays wrong is a `DownloadError` naming the file. A completion marker per file makes a rerun fetch
only what is missing. `provenance.json` lists the source, the revision and every file with its
size and sha256.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import hashlib
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass, field

import fsspec

from marin_lab.execution.record.artifacts import reproducibility
from marin_lab.io import fs as mfs
from marin_lab.io.sources import SourceFile, list_source_and_skipped_links, sha256_file
from marin_lab.processing.errors import DownloadError
from marin_lab.processing.packages import fetch_package_source, is_package_source
from marin_lab.processing.shards import map_shards, mark_shard_done, read_shard_done
from marin_lab.versioning import field_hints, versioned_field

logger = logging.getLogger(__name__)

__all__ = ["DownloadConfig", "download", "sha256_file"]

_CHUNK = 8 << 20


@field_hints
@dataclass(frozen=True)
class DownloadConfig:
    output_path: str
    """The step's output: files go to `{output_path}/data/`, the record to `provenance.json`."""
    source: str | None = versioned_field(None)
    """A package source (debian://, pypi://) or an fsspec URL, folder or glob (file://, gs://,
    http(s)://). Exclusive with `hf_dataset`."""
    hf_dataset: str | None = versioned_field(None)
    """A Hugging Face dataset repository id ('org/name'). Needs `revision`."""
    revision: str | None = versioned_field(None)
    """For `hf_dataset`: the commit sha (or tag) to fetch; pin a commit to make runs reproducible.
    For `source`: recorded in provenance.json as given (e.g. a Debian package version)."""
    include: tuple[str, ...] | None = versioned_field(None)
    """Glob patterns on relative paths; only matching files are fetched (None: all)."""
    expected: dict[str, dict] | None = versioned_field(None)
    """Per relative path, the expected `size` and/or `sha256`; a mismatch fails the file."""
    max_retries: int = 4
    """Retries per file after a transient error (a missing file is not retried)."""
    backoff_s: float = 1.0
    """First retry waits this long; each further retry waits twice as long."""
    num_workers: int = 4
    """Processes (or Ray tasks) fetching files in parallel."""
    hf_cache_dir: str | None = None
    """The Hugging Face hub cache to use (default: the hub's own, e.g. ~/.cache/huggingface/hub)."""
    package_cache_dir: str | None = None
    """Where a package source is fetched and unpacked (default: $MARIN_LAB_CORPUS, else
    ~/.cache/marin_lab/corpus): a machine-local cache, never part of the identity."""


@dataclass(frozen=True)
class _BatchTask:
    files: tuple[SourceFile, ...]
    output_path: str
    expected: dict[str, dict] = field(default_factory=dict)
    max_retries: int = 4
    backoff_s: float = 1.0
    labels: dict[str, str] = field(default_factory=dict)
    """URL -> what to record as the file's source, where that is not the URL itself."""

    @property
    def label(self) -> str:
        return f"{len(self.files)} files from {self.files[0].url}"


def _copy_checked(url: str, dest: str, expected: dict | None) -> dict:
    """Stream `url` to `dest` atomically; returns its size and sha256 after checking them."""
    dest_local = mfs.is_local(dest)
    dest_path = mfs.fs_and_path(dest)[1]
    folder = os.path.dirname(dest_path) if dest_local else None
    if folder:
        os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp.download.", dir=folder)
    try:
        h, size = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out, fsspec.open(url, "rb") as src:
            for chunk in iter(lambda: src.read(_CHUNK), b""):
                h.update(chunk)
                size += len(chunk)
                out.write(chunk)
        digest = h.hexdigest()
        if expected:
            if "size" in expected and int(expected["size"]) != size:
                raise _ChecksumMismatch(f"{url}: size {size} bytes, expected {expected['size']}")
            if "sha256" in expected and expected["sha256"].lower() != digest:
                raise _ChecksumMismatch(f"{url}: sha256 {digest}, expected {expected['sha256']}")
        if dest_local:
            os.replace(tmp, dest_path)
        else:
            mfs.fs_and_path(dest)[0].put_file(tmp, dest_path)  # one object put: atomic
        return {"size": size, "sha256": digest}
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class _ChecksumMismatch(Exception):
    pass


def _fetch_with_retries(task: SourceFile, batch: _BatchTask) -> dict:
    dest = mfs.join(batch.output_path, "data", task.rel)
    marker = mfs.join(batch.output_path, "progress", task.rel)
    previous = read_shard_done(marker)
    if previous is not None:
        return {**previous, "reused": True}
    expected = batch.expected.get(task.rel)
    for attempt in range(batch.max_retries + 1):
        try:
            info = _copy_checked(task.url, dest, expected)
            break
        except FileNotFoundError as err:
            raise DownloadError(f"download: {task.url} does not exist ({err}); check DownloadConfig.source") from err
        except Exception as err:
            what = "checksum mismatch" if isinstance(err, _ChecksumMismatch) else f"{type(err).__name__}: {err}"
            if attempt == batch.max_retries:
                raise DownloadError(
                    f"download: {task.url} failed after {attempt + 1} attempts ({what}). If the "
                    f"source changed, update DownloadConfig.expected; else retry later."
                ) from err
            wait = batch.backoff_s * 2**attempt
            logger.warning("download: %s attempt %d failed (%s); retrying in %.1fs", task.url, attempt + 1, what, wait)
            time.sleep(wait)
    record = {"path": task.rel, "source": batch.labels.get(task.url, task.url), **info}
    mark_shard_done(marker, record)
    return {**record, "reused": False}


def _fetch_batch(batch: _BatchTask) -> list[dict]:
    return [_fetch_with_retries(t, batch) for t in batch.files]


def _hf_snapshot(config: DownloadConfig, repo: str) -> tuple[str, str]:
    """A local folder with the files of the dataset repository `repo`, and the commit it resolved to."""
    if not config.revision:
        raise DownloadError(
            f"download: hf_dataset={repo!r} needs DownloadConfig.revision (a commit "
            f"sha): an unpinned dataset can change under a finished step."
        )
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(
            repo_id=repo,
            repo_type="dataset",
            revision=config.revision,
            cache_dir=config.hf_cache_dir,
            allow_patterns=list(config.include) if config.include else None,
        )
    except Exception as err:
        raise DownloadError(
            f"download: Hugging Face dataset {repo!r} at revision {config.revision!r} "
            f"could not be fetched ({type(err).__name__}: {err}). Offline (HF_HUB_OFFLINE=1) it "
            f"must already be in the hub cache."
        ) from err
    return folder, os.path.basename(os.path.normpath(folder))


def moving_source(config: DownloadConfig) -> str | None:
    """Why a download may give other bytes when run again (a moving URL or revision), or None."""
    if config.hf_dataset:
        rev = config.revision or "main"
        if not re.fullmatch(r"[0-9a-f]{40}", rev):
            return f"Hugging Face dataset {config.hf_dataset} at revision {rev!r}, which moves; pin a commit sha"
        return None
    if config.source and config.source.startswith(("http://", "https://")) and not config.expected:
        return f"{config.source} is fetched without a revision or expected checksums; its content may change"
    return None


_ONE_SOURCE = "DownloadConfig: set exactly one of `source` and `hf_dataset`"


@reproducibility(volatile_fields={"provenance.json": ("retrieved",)}, not_reproducible=moving_source)
def download(config: DownloadConfig) -> dict:
    """Fetch the files `config` names into `{output_path}/data/` and write `provenance.json`."""
    if config.source and config.hf_dataset:
        raise DownloadError(_ONE_SOURCE)
    resolved, versions, kind, labels = None, None, "huggingface" if config.hf_dataset else "fsspec", {}
    outside: list[dict[str, str]] = []
    if is_package_source(config.source):
        fetched = fetch_package_source(config.source, config.package_cache_dir)
        files, broken, folders = list_source_and_skipped_links(fetched.local_path, config.include)
        outside = [
            link
            for link in fetched.links_outside
            if not config.include or any(fnmatch.fnmatch(link["path"], p) for p in config.include)
        ]
        source_label, versions, kind = config.source, fetched.versions, config.source.split("://")[0]
        # Each file's recorded source names it inside the package, not in this machine's cache.
        labels = {
            f.url: config.source if f.url == fetched.local_path else f"{config.source.rstrip('/')}/{f.rel}"
            for f in files
        }
    elif config.hf_dataset:
        folder, resolved = _hf_snapshot(config, config.hf_dataset)
        files, broken, folders = list_source_and_skipped_links(folder, config.include)
        source_label = f"hf://datasets/{config.hf_dataset}"
    elif config.source:
        files, broken, folders = list_source_and_skipped_links(config.source, config.include)
        source_label = config.source
    else:
        raise DownloadError(_ONE_SOURCE)
    if not files:
        raise DownloadError(
            f"download: no files found at {source_label!r}"
            + (f" matching {list(config.include)}" if config.include else "")
            + (f" ({len(broken)} broken symlink(s), e.g. {broken[0]['path']} -> {broken[0]['link']})" if broken else "")
            + "; check DownloadConfig.source / hf_dataset / include."
        )
    unknown = set(config.expected or {}) - {f.rel for f in files}
    if unknown:
        raise DownloadError(f"download: DownloadConfig.expected names files the source lacks: {sorted(unknown)}")

    n_batches = min(len(files), max(1, config.num_workers) * 4)
    chunks = [tuple(files[i * len(files) // n_batches : (i + 1) * len(files) // n_batches]) for i in range(n_batches)]
    batches = [
        _BatchTask(
            chunk,
            config.output_path,
            dict(config.expected or {}),
            config.max_retries,
            config.backoff_s,
            {f.url: labels[f.url] for f in chunk if f.url in labels},
        )
        for chunk in chunks
    ]
    batches_done = map_shards(_fetch_batch, batches, num_workers=config.num_workers, desc="download")
    results = [r for batch in batches_done for r in batch]
    records = [{k: r[k] for k in ("path", "size", "sha256", "source")} for r in results]
    provenance = {
        "source": source_label,
        "kind": kind,
        "revision": config.revision,
        "resolved_revision": resolved,
        "packages": versions,
        "retrieved": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "files": records,
        "count": len(records),
        "total_bytes": sum(r["size"] for r in records),
        # Not copied (there is nothing to copy), but never lost silently: each with its target.
        "skipped_broken_symlinks": broken,
        # Not copied: they led out of the package (to this machine's own files); each with its target.
        "skipped_symlinks_outside_package": outside,
        # Not entered: their files are listed where they really lie (or lie outside the source).
        "skipped_linked_folders": folders,
    }
    mfs.write_json(mfs.join(config.output_path, "provenance.json"), provenance)
    reused = sum(1 for r in results if r["reused"])
    logger.info(
        "download: %d files, %d bytes from %s (%d already there)",
        len(records),
        provenance["total_bytes"],
        source_label,
        reused,
    )
    if outside:
        logger.warning(
            "download: %d symlink(s) under %s lead out of the package and were not copied (listed in "
            "provenance.json), e.g. %s -> %s",
            len(outside),
            source_label,
            outside[0]["path"],
            outside[0]["link"],
        )
    if broken:
        logger.warning(
            "download: %d broken symlink(s) under %s not copied (listed in provenance.json), e.g. %s -> %s",
            len(broken),
            source_label,
            broken[0]["path"],
            broken[0]["link"],
        )
    return {
        "files": len(records),
        "total_bytes": provenance["total_bytes"],
        "reused": reused,
        "source": source_label,
        "resolved_revision": resolved,
        "packages": versions,
        "skipped_broken_symlinks": len(broken),
        "broken_symlink_examples": [b["path"] for b in broken[:5]],
        "skipped_symlinks_outside_package": len(outside),
        "outside_symlink_examples": [link["path"] for link in outside[:5]],
        "skipped_linked_folders": len(folders),
    }
