"""Per-step locked Python environments: build once per lock, run a step function inside one.

A step that needs packages which cannot live beside marin_lab's own (PyPI's levanter 1.1 wants
2023-era jax, datasets and pydantic) declares a `StepEnvironment`: pip requirements plus a
constraints file that pins every package. Marin's per-step pip environments broke again and again
because nothing pinned the transitive packages, so a rebuild months later resolved differently;
here the constraints file is part of the environment's identity.

- `lock_hash()` is sha256 over the interpreter (implementation, major.minor, machine), the sorted
  requirements and the constraints file's *content* (not its path): same lock, same environment.
- `ensure_environment` builds the venv under `{cache}/{lock_hash}` once. It builds into a temporary
  directory and renames it into place, under an `fcntl` lock, so concurrent builders wait for the
  first one and a failed or killed build never leaves a half-made environment behind.
- `run_in_environment` runs `fn(config)` in a subprocess of the environment's interpreter via
  `python -m marin_lab._env_worker`, with this repository on PYTHONPATH; fn and config travel
  pickled by reference, so their modules must import there (keep them stdlib-only at import).

See docs/environments.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import functools
import hashlib
import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from marin_lab.environments import pip_config
from marin_lab.errors import MarinLabError
from marin_lab.io import fs as mfs
from marin_lab.io.paths import is_within

logger = logging.getLogger(__name__)

REPO_ROOT = str(Path(__file__).resolve().parents[2])
"""The directory holding the `marin_lab` package: PYTHONPATH inside every environment."""
PICKLE_PROTOCOL = 4
_TAIL_LINES = 60
# Installed by venv itself, never by a requirement: not expected in a lock.
_BOOTSTRAP = {"pip", "setuptools", "wheel", "distribute", "pkg-resources"}


class EnvironmentBuildError(MarinLabError):
    """A step environment could not be built (pip failed, the interpreter is missing, ...)."""


class EnvironmentStepError(MarinLabError, RuntimeError):
    """The step function raised inside its environment; `traceback_text` is the remote traceback."""

    def __init__(self, message: str, traceback_text: str | None = None):
        super().__init__(message)
        self.traceback_text = traceback_text


@dataclasses.dataclass(frozen=True)
class StepEnvironment:
    """An isolated, locked Python environment for one step."""

    requirements: tuple[str, ...]
    """pip requirement specs, e.g. ("levanter==1.1", "jax", "jaxlib")."""
    constraints: str | None = None
    """A constraints/lock file (local path or URL) pinning every package pip may install."""
    python: str = "python3.11"
    """The base interpreter (a name on PATH or a path) the venv is made from."""
    extra_pythonpath: tuple[str, ...] = ()
    """Directories added to the environment's path (a .pth file); part of the hash when set."""

    def lock_hash(self) -> str:
        """sha256[:16] of interpreter, sorted requirements and the constraints file's content."""
        payload: dict[str, Any] = {
            "schema": 1,
            "python": _interpreter_tag(self.python),
            "requirements": normalized_requirements(self.requirements),
            "constraints_sha256": (hashlib.sha256(self.constraints_bytes()).hexdigest() if self.constraints else None),
        }
        if self.extra_pythonpath:
            payload["extra_pythonpath"] = list(self.extra_pythonpath)
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def constraints_bytes(self) -> bytes:
        """The constraints file's content (b"" when there is none)."""
        if not self.constraints:
            return b""
        try:
            return mfs.read_bytes(self.constraints)
        except FileNotFoundError as err:
            raise EnvironmentBuildError(
                f"StepEnvironment.constraints: file {self.constraints!r} does not exist; "
                "point it at the lock file (e.g. requirements/levanter.lock)"
            ) from err


def normalized_requirements(requirements: tuple[str, ...] | list[str]) -> list[str]:
    """Requirements stripped, without blanks, sorted: their order does not change what pip installs."""
    if isinstance(requirements, str):
        raise EnvironmentBuildError(f"StepEnvironment.requirements={requirements!r} is a string; pass a tuple of specs")
    return sorted({r.strip() for r in requirements if r and r.strip()})


def _resolve_python(python: str) -> str:
    found = shutil.which(python)
    if not found:
        raise EnvironmentBuildError(
            f"StepEnvironment.python={python!r} is not an executable on PATH; install that "
            "interpreter or give its full path"
        )
    return os.path.realpath(found)


@functools.lru_cache(maxsize=16)
def _probe(resolved_python: str) -> dict[str, str]:
    code = (
        "import json, platform, sys; print(json.dumps({'implementation': sys.implementation.name, "
        "'version': platform.python_version(), 'machine': platform.machine(), "
        "'platform': sys.platform}))"
    )
    try:
        out = subprocess.run(
            [resolved_python, "-I", "-c", code], check=True, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise EnvironmentBuildError(f"could not run interpreter {resolved_python!r}: {err}") from err
    return json.loads(out.stdout)


def _interpreter_tag(python: str) -> str:
    """'cpython-3.11-x86_64-linux': what a venv's wheels depend on (not the patch release)."""
    info = _probe(_resolve_python(python))
    major_minor = ".".join(info["version"].split(".")[:2])
    return f"{info['implementation']}-{major_minor}-{info['machine']}-{info['platform']}"


def cache_root(cache_dir: str | None = None) -> str:
    """Where environments live: cache_dir, else $MARIN_ENV_CACHE, else ~/.cache/marin_lab/envs."""
    root = cache_dir or os.environ.get("MARIN_ENV_CACHE") or os.path.join("~", ".cache", "marin_lab", "envs")
    if "://" in root and not root.startswith("file://"):
        raise EnvironmentBuildError(
            f"environment cache {root!r} is not a local directory; a venv must live on local disk "
            "(set MARIN_ENV_CACHE to a local path)"
        )
    return os.path.abspath(os.path.expanduser(root.removeprefix("file://")))


def environment_python(env_dir: str) -> str:
    return os.path.join(env_dir, "bin", "python")


def _is_complete(env_dir: str, lock_hash: str) -> bool:
    try:
        return Path(env_dir, ".lock_hash").read_text().strip() == lock_hash and os.path.exists(
            environment_python(env_dir)
        )
    except OSError:
        return False


@contextlib.contextmanager
def _file_lock(path: str) -> Iterator[None]:
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("another process is building this environment; waiting for it (%s)", path)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_environment(env: StepEnvironment, cache_dir: str | None = None) -> str:
    """The environment's python executable, building the environment first if it is not cached."""
    root = cache_root(cache_dir)
    lock_hash = env.lock_hash()
    final = os.path.join(root, lock_hash)
    if _is_complete(final, lock_hash):
        return environment_python(final)
    os.makedirs(root, exist_ok=True)
    with _file_lock(os.path.join(root, f".{lock_hash}.lock")):
        if _is_complete(final, lock_hash):  # built by the process we waited for
            return environment_python(final)
        # Holding the lock, nobody else builds this hash: leftovers are from killed builders.
        for stale in Path(root).glob(f".building-{lock_hash}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if os.path.exists(final):
            logger.warning("environment %s is incomplete (no matching .lock_hash); rebuilding it", final)
            shutil.rmtree(final)
        tmp = os.path.join(root, f".building-{lock_hash}-{uuid.uuid4().hex[:8]}")
        try:
            _build(env, lock_hash, tmp, final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return environment_python(final)


def _log_run(cmd: list[str], log_path: str, env: dict[str, str]) -> int:
    """Run `cmd` with its output appended to the build log (after the command line); its exit status."""
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env).returncode


def _run_logged(cmd: list[str], log_path: str, what: str) -> None:
    returncode = _log_run(cmd, log_path, _clean_env({"PIP_DISABLE_PIP_VERSION_CHECK": "1"}))
    if returncode:
        tail = "\n".join(Path(log_path).read_text(errors="replace").splitlines()[-_TAIL_LINES:])
        raise EnvironmentBuildError(f"{what} failed (exit {returncode}); nothing was kept. Output tail:\n{tail}")


def _build(env: StepEnvironment, lock_hash: str, tmp: str, final: str) -> None:
    started = time.monotonic()
    requirements = normalized_requirements(env.requirements)
    base_python = _resolve_python(env.python)
    logger.info(
        "building step environment %s (%d requirements%s) in %s; this takes a while once",
        lock_hash,
        len(requirements),
        ", locked by " + env.constraints if env.constraints else "",
        final,
    )
    log_path = os.path.join(tempfile.gettempdir(), f"marin-env-build-{lock_hash}-{uuid.uuid4().hex[:8]}.log")
    try:
        # pip is only needed to install something; a bare venv is much faster to make.
        venv = [base_python, "-m", "venv", tmp] + ([] if requirements else ["--without-pip"])
        _run_logged(venv, log_path, f"creating the venv with {base_python}")
        python = environment_python(tmp)
        Path(tmp, "requirements.txt").write_text("".join(f"{r}\n" for r in requirements))
        what = ["-r", os.path.join(tmp, "requirements.txt")]
        if env.constraints:
            Path(tmp, "constraints.txt").write_bytes(env.constraints_bytes())
            what = ["-c", os.path.join(tmp, "constraints.txt"), *what]
        installer = "pip"
        if requirements:
            installer = _install(python, what, log_path, lock_hash)
        if env.extra_pythonpath:
            site = _site_packages(python)
            Path(site, "marin_lab_extra_path.pth").write_text(
                "".join(f"{os.path.abspath(p)}\n" for p in env.extra_pythonpath)
            )
        packages = _installed_packages(python)
        pinned = _pinned_names(env.constraints_bytes().decode(errors="replace").splitlines() + requirements)
        unpinned = sorted(n for n in packages if _canonical(n) not in pinned and _canonical(n) not in _BOOTSTRAP)
        if unpinned:
            logger.warning(
                "step environment %s: %d installed package(s) are not pinned by the lock, so a "
                "rebuild may differ: %s (add them to the constraints file)",
                lock_hash,
                len(unpinned),
                ", ".join(unpinned),
            )
        _relocate_scripts(tmp, final)
        record = {
            "lock_hash": lock_hash,
            "python": _probe(base_python),
            "base_python": base_python,
            "requirements": requirements,
            "constraints": env.constraints,
            "constraints_sha256": hashlib.sha256(env.constraints_bytes()).hexdigest() if env.constraints else None,
            "extra_pythonpath": list(env.extra_pythonpath),
            "packages": packages,
            "unpinned": unpinned,
            "installer": installer,
            "built": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "build_s": round(time.monotonic() - started, 1),
        }
        Path(tmp, "environment.json").write_text(json.dumps(record, indent=2, sort_keys=True))
        Path(tmp, ".lock_hash").write_text(lock_hash + "\n")  # last: marks the build complete
        logger.info("step environment %s built in %.0fs (%d packages)", lock_hash, record["build_s"], len(packages))
    finally:
        with contextlib.suppress(OSError):
            os.remove(log_path)


def _install(python: str, what: list[str], log_path: str, lock_hash: str) -> str:
    """Install `what` (pip's -c/-r arguments) into `python`'s venv; the installer that did it.

    uv, configured from pip's settings of this machine (pip_config.py), where it is beside this
    interpreter or on PATH; pip where it is not, and after uv fails (pip's own words then end the
    log shown in the error).
    """
    uv = pip_config.find_uv()
    if uv is not None:
        clean = _clean_env({})
        settings = pip_config.pip_settings(python, env=clean)
        command = [*pip_config.uv_install_command(uv, python, settings), *what]
        returncode = _log_run(command, log_path, pip_config.uv_environment(settings, clean))
        if returncode == 0:
            return os.path.basename(uv) + " " + _uv_version(uv)
        logger.info(
            "step environment %s: uv could not install it (exit %d); installing with pip", lock_hash, returncode
        )
    pip = [python, "-m", "pip", "install", "--no-input", "--progress-bar", "off", *what]
    _run_logged(pip, log_path, f"pip install for step environment {lock_hash}")
    return "pip"


def _uv_version(uv: str) -> str:
    out = subprocess.run([uv, "--version"], capture_output=True, text=True, check=False).stdout.split()
    return out[1] if len(out) > 1 else "?"


def _site_packages(python: str) -> str:
    out = subprocess.run(
        [python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def _installed_packages(python: str) -> dict[str, str]:
    code = (
        "import json; from importlib import metadata; print(json.dumps({d.metadata['Name']: d.version "
        "for d in metadata.distributions() if d.metadata['Name']}))"
    )
    out = subprocess.run([python, "-I", "-c", code], check=True, capture_output=True, text=True)
    return dict(sorted(json.loads(out.stdout).items(), key=lambda kv: kv[0].lower()))


def _canonical(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def _pinned_names(lines: list[str]) -> set[str]:
    names = set()
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            names.add(_canonical(line.split("==", 1)[0].split("[", 1)[0].split(";", 1)[0]))
    return names


def _relocate_scripts(tmp: str, final: str) -> None:
    """Point console-script shebangs and activate scripts at the final path before the rename."""
    old, new = tmp.encode(), final.encode()
    for path in Path(tmp, "bin").iterdir():
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old in data and b"\0" not in data[:4096]:
            mode = path.stat().st_mode
            path.write_bytes(data.replace(old, new))
            path.chmod(mode)


def read_environment_record(python: str) -> dict[str, Any] | None:
    """The environment.json of the environment that owns `python` (None for other interpreters)."""
    path = Path(python).parent.parent / "environment.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------------------------
# running a step function inside an environment


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "__PYVENV_LAUNCHER__")
    }
    env.update(extra)
    return env


def _import_root(module_name: str) -> str | None:
    """The sys.path entry `module_name` was imported from (None for built-ins and site-packages)."""
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    depth = module_name.count(".") + (2 if path.name == "__init__.py" else 1)
    root = path.parents[depth - 1]
    # Never leak this interpreter's installed packages into an environment with older ones.
    if "site-packages" in root.parts or "dist-packages" in root.parts or is_within(str(root), sys.base_prefix):
        return None
    return str(root)


def _check_by_reference(fn: Callable[..., Any]) -> None:
    qualname = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", None)
    if not module or "<locals>" in qualname or "<lambda>" in qualname or module == "__main__":
        raise EnvironmentStepError(
            f"run_in_environment: {module}.{qualname} cannot run in a step environment: the function "
            "travels by reference, so it must be defined at the top level of an importable module "
            "(not a lambda, a nested function, or a function in the __main__ script)"
        )


def run_in_environment(python: str, fn: Callable[[Any], Any], config: Any) -> Any:
    """Run `fn(config)` under `python` (an environment's interpreter) and return its result."""
    _check_by_reference(fn)
    name = f"{fn.__module__}.{fn.__qualname__}"
    paths = [REPO_ROOT]
    for module in (fn.__module__, type(config).__module__):
        root = _import_root(module)
        if root and root not in paths:
            paths.append(root)
    with tempfile.TemporaryDirectory(prefix="marin-env-call-") as tmp:
        in_path, out_path = os.path.join(tmp, "in.pkl"), os.path.join(tmp, "out.pkl")
        try:
            payload = pickle.dumps((fn, config), protocol=PICKLE_PROTOCOL)
        except Exception as err:
            raise EnvironmentStepError(f"run_in_environment: {name}: the config could not be pickled: {err}") from err
        Path(in_path).write_bytes(payload)
        env = _clean_env(
            {
                "PYTHONPATH": os.pathsep.join(paths),
                "PYTHONNOUSERSITE": "1",
                "VIRTUAL_ENV": str(Path(python).parent.parent),
            }
        )
        logger.info("running %s in environment %s", name, python)
        proc = subprocess.Popen(
            [python, "-m", "marin_lab._env_worker", in_path, out_path], env=env, stdin=subprocess.DEVNULL
        )
        try:
            returncode = proc.wait()
        finally:
            if proc.poll() is None:  # interrupted: do not leave the step running
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if not os.path.exists(out_path):
            raise EnvironmentStepError(
                f"{name} in environment {python} exited with code {returncode} without an answer "
                "(killed, out of memory, or the interpreter could not start); see its output above"
            )
        with open(out_path, "rb") as f:
            answer = pickle.load(f)
    if answer.get("ok"):
        return answer["result"]
    remote = answer.get("traceback") or ""
    raise EnvironmentStepError(
        f"{name} raised {answer.get('type')}: {answer.get('message')} (in environment {python})\n"
        f"Remote traceback:\n{remote}",
        traceback_text=remote,
    )


def run_in_step_environment(env: StepEnvironment, fn: Callable[[Any], Any], config: Any) -> Any:
    """Build (or find cached) `env` on the machine this runs on, then run `fn(config)` in it.

    The executor sends this callable, not an interpreter path: on a multi-node Ray cluster the step
    may run on a node where the driver's environment does not exist. Builds are cached per node and
    locked, so attempts and concurrent steps share one build.
    """
    return run_in_environment(ensure_environment(env), fn, config)
