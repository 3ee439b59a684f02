"""What a step record says about where and how a step ran, and what it wrote.

Secrets never enter a record: secret-named environment variables are left out, and records are
redacted whole by `execution.secrets.redact` (the one owner of what a secret is).
"""

from __future__ import annotations

import contextlib
import email
import functools
import hashlib
import importlib.metadata
import os
import platform
import re
import socket
import subprocess
import sys
from typing import Any, cast

from fsspec.implementations.local import LocalFileSystem

from marin_lab.execution.state.status import RECORD_FILES
from marin_lab.io.fs import fs_and_path, list_files

# The secret rules and redaction live in execution.secrets; these names are kept here for callers
# that import them from their earlier home.
from marin_lab.io.secrets import REDACTED, is_secret_field, is_secret_name, redact, redact_text  # noqa: F401
from marin_lab.store.layout import ATTEMPT_LOG, LOGS_DIR

# The executor's capture of a step's output (execution/run/logs.py): a record of one run, with its
# times and hosts, never a result, so manifests (verify, reproduce) leave it out.
RUN_LOG = re.compile(re.escape(LOGS_DIR) + "/" + ATTEMPT_LOG.pattern)
# Environment variables worth recording: they change how code runs. Everything else is noise.
_ENV_PREFIXES = (
    "MARIN",
    "RAY_",
    "JAX_",
    "XLA_",
    "TPU_",
    "CUDA_",
    "NVIDIA_",
    "HF_",
    "WANDB_",
    "PYTHONHASHSEED",
    "OMP_",
    "MKL_",
    "TOKENIZERS_",
    "MEGASCALE_",
    "GCSFS_",
    "STORAGE_EMULATOR_HOST",
)


def recorded_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES) and not is_secret_name(k)}


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    out = {}
    for dist in importlib.metadata.distributions():
        name, version = _name_and_version(dist)
        if name:  # None in a distribution whose metadata lacks it
            out[name] = version
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


def _name_and_version(dist: importlib.metadata.Distribution) -> tuple[str | None, str]:
    """`dist.name` and `dist.version`, read from the metadata's headers alone: they parsed the whole
    file, mostly the package's description, a fifth of a second for 200 packages in every process
    that records a step (the driver and each worker)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or dist.read_text("") or ""
    headers = email.message_from_string(text.split("\n\n", 1)[0])
    return headers["Name"], cast(str, headers["Version"])  # typed as importlib types `dist.version`


@functools.lru_cache(maxsize=1)
def _host_devices() -> tuple[int, tuple[str, ...]]:
    """The host's TPU device files and GPU names: asked once per process (a worker runs many steps),
    since asking nvidia-smi starts a process, a millisecond or more at every step."""
    try:
        tpu_devices = [d for d in os.listdir("/dev") if d.startswith("accel") or d.startswith("vfio")]
    except OSError:
        tpu_devices = []
    gpus: tuple[str, ...] = ()
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
        if out.returncode == 0 and out.stdout.strip():
            gpus = tuple(g.strip() for g in out.stdout.strip().splitlines())
    except (OSError, subprocess.SubprocessError):
        pass
    return len(tpu_devices), gpus


def accelerators() -> dict[str, Any]:
    """What accelerators this host shows, without importing (slow) ML frameworks."""
    found: dict[str, Any] = {"cpu_count": os.cpu_count()}
    tpu_devices, gpus = _host_devices()
    if tpu_devices:
        found["tpu_devices"] = tpu_devices
    if os.environ.get("TPU_ACCELERATOR_TYPE"):
        found["tpu_type"] = os.environ["TPU_ACCELERATOR_TYPE"]
    if gpus:
        found["gpus"] = list(gpus)
    jax = sys.modules.get("jax")
    if jax is not None:  # only if the step itself already imported it
        with contextlib.suppress(Exception):
            found["jax_devices"] = [str(d) for d in jax.devices()]
    return found


def runtime_environment() -> dict[str, Any]:
    """Collected where the step's function runs (a worker process or a Ray task)."""
    return {
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "accelerators": accelerators(),
        "env": recorded_env(),
        "packages": package_versions(),
    }


def manifest(output_path: str) -> dict[str, Any]:
    """Every output file (not the executor's own records) with its size and sha256."""
    fs, _ = fs_and_path(output_path)
    files: list[dict[str, Any]] = []
    total = 0
    for rel, size in list_files(output_path):
        base = rel.rsplit("/", 1)[-1]
        if base in RECORD_FILES or base.startswith(".tmp.") or RUN_LOG.fullmatch(rel):
            continue
        full = fs_and_path(f"{output_path.rstrip('/')}/{rel}")[1]
        if isinstance(fs, LocalFileSystem) and os.path.islink(full):
            # A link is recorded as what it points to, never followed (it may point outside the step).
            files.append({"path": rel, "link": os.readlink(full)})
            continue
        digest = hashlib.sha256()
        with fs.open(full, "rb") as f:
            while chunk := f.read(8 << 20):
                digest.update(chunk)
        files.append({"path": rel, "size": size, "sha256": digest.hexdigest()})
        total += size
    return {"files": files, "count": len(files), "total_bytes": total}


def compare_manifests(recorded: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Human-readable differences between two manifests; empty when they match."""
    rec = {f["path"]: f for f in recorded.get("files", [])}
    act = {f["path"]: f for f in actual.get("files", [])}
    problems = []
    for path in sorted(rec.keys() | act.keys()):
        r, a = rec.get(path), act.get(path)
        if a is None:
            problems.append(f"missing: {path}")
        elif r is None:
            problems.append(f"unexpected: {path} ({a['size']} bytes)")
        elif "link" in r or "link" in a:
            if r.get("link") != a.get("link"):
                problems.append(f"link differs: {path}: recorded {r.get('link')}, now {a.get('link')}")
        elif r["size"] != a["size"]:
            problems.append(f"size differs: {path}: recorded {r['size']}, now {a['size']}")
        elif r["sha256"] != a["sha256"]:
            problems.append(f"checksum differs: {path}: recorded {r['sha256'][:12]}, now {a['sha256'][:12]}")
    return problems
