"""What a step record says about where and how a step ran, and what it wrote.

Secrets never enter a record: any environment variable or config field whose name contains KEY,
TOKEN, SECRET or PASSWORD (any case) is left out or redacted, wherever it sits.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from fsspec.implementations.local import LocalFileSystem

from marin_lab.execution.secrets import REDACTED, remember_secret, text_scrubber
from marin_lab.execution.status import RECORD_FILES
from marin_lab.io.fs import fs_and_path, list_files

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# The executor's capture of a step's output (execution/logs.py): a record of one run, with its
# times and hosts, never a result, so manifests (verify, reproduce) leave it out.
RUN_LOG = re.compile(r"logs/attempt-\d+\.log")
# Environment variables worth recording: they change how code runs. Everything else is noise.
_ENV_PREFIXES = ("MARIN", "RAY_", "JAX_", "XLA_", "TPU_", "CUDA_", "NVIDIA_", "HF_", "WANDB_", "PYTHONHASHSEED",
                 "OMP_", "MKL_", "TOKENIZERS_", "MEGASCALE_", "GCSFS_", "STORAGE_EMULATOR_HOST")


# Field names are judged word by word: `api_key`, `hf_token`, `db_password` are secrets, but a
# tokenizer's `eos_token`, a count of `tokens` or the `tokenizer` itself are not.
_SECRET_WORDS = {"key", "apikey", "secret", "password", "passwd", "credential", "credentials", "token"}
_NOT_SECRET_BEFORE_TOKEN = {"eos", "bos", "pad", "unk", "sep", "cls", "mask", "special", "start", "end", "max",
                            "min", "num", "n", "total", "first", "last", "image", "audio"}


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


def redact(value: Any) -> Any:
    """`value` (JSON data) with secret-named fields and secret-looking text replaced.

    A secret-named field's value is also remembered (`secrets.remember_secret`), so that the same
    value is scrubbed wherever else it shows up: an error message, a log line, a URL in a version.
    """
    _remember_named(value)
    return _redact(value, text_scrubber())


# In raw text (a file shown as text, a record too damaged to parse): "hf_token": "value" and
# API_KEY=value lose their value when the name is a secret by the field rule above.
_TEXT_JSON_MEMBER = re.compile(r'("([A-Za-z0-9_.\-]+)"\s*:\s*)"(?:[^"\\\n]|\\.)*"')
_TEXT_ASSIGNMENT = re.compile(r"\b([A-Za-z][A-Za-z0-9_]*)(\s*=\s*)([^\s&;]+)")


def redact_text(text: str) -> str:
    """Raw text redacted by the same rules as a record (`redact`): the value of a JSON member or
    an assignment whose name is a secret field, then every secret-looking value (`scrub_text`)."""
    text = _TEXT_JSON_MEMBER.sub(
        lambda m: f'{m.group(1)}"{REDACTED}"' if is_secret_field(m.group(2)) else m.group(0), text)
    text = _TEXT_ASSIGNMENT.sub(
        lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}" if is_secret_field(m.group(1)) else m.group(0), text)
    return text_scrubber()(text)


def _remember_named(value: Any) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if is_secret_field(str(k)):
                _remember_all(v)
            else:
                _remember_named(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _remember_named(v)


def _redact(value: Any, scrub: Callable[[str], str]) -> Any:
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret_field(str(k)) else _redact(v, scrub)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v, scrub) for v in value]
    if isinstance(value, str):
        return scrub(value)
    return value


def _remember_all(value: Any) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _remember_all(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _remember_all(v)
    else:
        remember_secret(value)


def recorded_env() -> dict[str, str]:
    return {
        k: v for k, v in sorted(os.environ.items())
        if k.startswith(_ENV_PREFIXES) and not is_secret_name(k)
    }


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    out = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            out[name] = dist.version
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


def accelerators() -> dict[str, Any]:
    """What accelerators this host shows, without importing (slow) ML frameworks."""
    found: dict[str, Any] = {"cpu_count": os.cpu_count()}
    try:
        tpu_devices = [d for d in os.listdir("/dev") if d.startswith("accel") or d.startswith("vfio")]
    except OSError:
        tpu_devices = []
    if tpu_devices:
        found["tpu_devices"] = len(tpu_devices)
    if os.environ.get("TPU_ACCELERATOR_TYPE"):
        found["tpu_type"] = os.environ["TPU_ACCELERATOR_TYPE"]
    try:
        gpus = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
        if gpus.returncode == 0 and gpus.stdout.strip():
            found["gpus"] = [g.strip() for g in gpus.stdout.strip().splitlines()]
    except (OSError, subprocess.SubprocessError):
        pass
    jax = sys.modules.get("jax")
    if jax is not None:  # only if the step itself already imported it
        try:
            found["jax_devices"] = [str(d) for d in jax.devices()]
        except Exception:
            pass
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
    files = []
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
