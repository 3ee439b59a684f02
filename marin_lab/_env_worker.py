"""Runs one pickled `fn(config)` inside a step's locked environment: `python -m marin_lab._env_worker IN OUT`.

This module runs under the *environment's* interpreter and packages (which may be years older than
marin_lab's own), so it imports the standard library only.

IN holds `pickle((fn, config))`; fn and the config's classes are pickled by reference, so their
modules must import here. A module whose parent package's `__init__` cannot import in this
environment (e.g. `marin_lab.training`, whose `__init__` imports the current JAX stack) is still
loaded: its parents are then registered as bare packages without running their `__init__`, and the
module itself imports what it needs explicitly.

OUT receives `pickle({"ok": True, "result": ...})`, or `{"ok": False, "type", "message",
"traceback"}` when fn raised; the parent re-raises the latter with the remote traceback.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import io
import os
import pickle
import platform
import signal
import sys
import traceback
from typing import Any

PROTOCOL = 4
_stubbed: list[str] = []


def _import_without_parent_inits(name: str) -> Any:
    """Import `name`, registering each missing parent package bare (its `__init__` not run)."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if parent in sys.modules:
            continue
        spec = importlib.util.find_spec(parent)
        if spec is None or spec.submodule_search_locations is None:
            raise ModuleNotFoundError(f"no package named {parent!r} on the path", name=parent)
        module = importlib.util.module_from_spec(spec)
        sys.modules[parent] = module
        if i > 1:
            setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], module)
        _stubbed.append(parent)
    return importlib.import_module(name)


def import_module(name: str) -> Any:
    """`importlib.import_module`, falling back to skipping parent `__init__`s this env cannot run."""
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except Exception as first:  # noqa: BLE001 - any failure of a parent __init__ qualifies
        # Python already dropped the parent whose __init__ failed from sys.modules.
        try:
            return _import_without_parent_inits(name)
        except Exception:
            raise first from None


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        obj: Any = import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj


def interpreter_info(packages: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """Where and what this interpreter is, and the installed version of each named distribution."""
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for pkg in packages:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "executable": sys.executable,
        "prefix": sys.prefix,
        "version": platform.python_version(),
        "implementation": sys.implementation.name,
        "machine": platform.machine(),
        "platform": sys.platform,
        "packages": versions,
        "stubbed_packages": list(_stubbed),
    }


def _write(path: str, payload: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(payload, f, protocol=PROTOCOL)
    os.replace(tmp, path)


def _die_with_parent() -> None:
    # Set here rather than in a preexec_fn (unsafe in a threaded parent): an orphaned step would
    # otherwise train on after its executor was killed.
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return


def main(argv: list[str]) -> int:
    _die_with_parent()
    if len(argv) != 2:
        print("usage: python -m marin_lab._env_worker IN OUT", file=sys.stderr)
        return 2
    in_path, out_path = argv
    try:
        with open(in_path, "rb") as f:
            fn, config = _Unpickler(io.BytesIO(f.read())).load()
    except BaseException as err:  # noqa: BLE001 - reported to the parent verbatim
        _write(
            out_path,
            {
                "ok": False,
                "type": type(err).__name__,
                "message": f"could not load the step function or its config here: {err}",
                "traceback": traceback.format_exc(),
            },
        )
        return 1
    try:
        result = fn(config)
    except BaseException as err:  # noqa: BLE001
        _write(
            out_path,
            {"ok": False, "type": type(err).__name__, "message": str(err), "traceback": traceback.format_exc()},
        )
        return 1
    try:
        _write(out_path, {"ok": True, "result": result})
    except Exception as err:  # noqa: BLE001 - an unpicklable result
        _write(
            out_path,
            {
                "ok": False,
                "type": type(err).__name__,
                "message": f"the step's return value could not be pickled: {err}",
                "traceback": traceback.format_exc(),
            },
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
