"""Which code produced an experiment: the commit, whether the tree was clean, and the script itself.

A commit alone is not enough. The normal state of an experiment under review is a new file that
is not committed yet, often next to edits of the helpers it uses; `git status --untracked-files=no`
calls that tree clean, and the script's text is stored nowhere. So the experiment record gets:

- `commit`, and `dirty`: true when a tracked file is modified anywhere in the repository, or an
  untracked (and not ignored) file exists in the package, in `experiments/`, or is the script;
- `changed`: those paths (`git status --porcelain` style, at most `MAX_CHANGED`);
- `diff`: the uncommitted changes as one patch (tracked edits against HEAD, then every untracked
  file of those folders as a new file), capped at `MAX_DIFF_BYTES` (`diff_bytes` is the full size);
- the script's text, stored content-addressed under `{experiments}/scripts/` beside the record
  (`store_script`), with its sha256: the record can be rerun as it was, whatever the tree holds now.

Credential-looking strings are redacted from the diff and the stored script (provenance.redact);
the record then says `redacted: true`, and the sha256 is that of the stored text.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import subprocess
import threading
import types
import weakref
from typing import Any

from marin_lab.io.fs import atomic_write_bytes, exists, join
from marin_lab.io.paths import canonical, is_within
from marin_lab.io.secrets import redact

MAX_DIFF_BYTES = 256 * 1024
MAX_CHANGED = 200
SCRIPTS_FOLDER = "scripts"


def _git(args: list[str], cwd: str, *, ok_codes: tuple[int, ...] = (0,)) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode not in ok_codes:
        return None
    return done.stdout.decode("utf-8", errors="replace")


def _package_dir() -> str:
    import marin_lab

    return os.path.dirname(os.path.abspath(marin_lab.__file__))


def git_state(script: str | None) -> dict[str, Any]:
    """commit, dirty, changed and diff of the repository holding `script` (default: the cwd).

    Outside a repository (or without git) every field is None: unknown, not clean.
    """
    where = os.path.dirname(os.path.abspath(script)) if script and os.path.isfile(script) else os.getcwd()
    root = (_git(["rev-parse", "--show-toplevel"], where) or "").strip()
    commit = (_git(["rev-parse", "HEAD"], where) or "").strip()
    if not root or not commit:
        return {"commit": None, "dirty": None, "changed": None, "diff": None}
    # Resolved, so that a script reached through a symlink into the repository is still in scope.
    scopes = [
        canonical(p)
        for p in (
            _package_dir(),
            os.path.join(root, "experiments"),
            script if script and os.path.isfile(script) else None,
        )
        if p and os.path.exists(p) and is_within(p, root)
    ]
    root = canonical(root)
    tracked = [
        line
        for line in (_git(["status", "--porcelain", "--untracked-files=no"], root) or "").splitlines()
        if line.strip()
    ]
    untracked = []
    if scopes:
        listed = (
            _git(
                ["ls-files", "--others", "--exclude-standard", "-z", "--", *[os.path.relpath(p, root) for p in scopes]],
                root,
            )
            or ""
        )
        untracked = sorted(p for p in listed.split("\0") if p)
    changed = tracked + [f"?? {p}" for p in untracked]
    patch = _git(["diff", "HEAD", "--no-color", "--no-ext-diff"], root) or ""
    for rel in untracked:
        patch += _git(["diff", "--no-index", "--no-color", "--", "/dev/null", rel], root, ok_codes=(0, 1)) or ""
    data = redact(patch)
    raw = data.encode("utf-8")
    return {
        "commit": commit,
        "dirty": bool(changed),
        "changed": changed[:MAX_CHANGED],
        "changed_count": len(changed),
        "diff": raw[:MAX_DIFF_BYTES].decode("utf-8", errors="ignore"),
        "diff_bytes": len(raw),
        "diff_truncated": len(raw) > MAX_DIFF_BYTES,
        "diff_redacted": data != patch,
    }


def store_script(experiments_folder: str, script: str | None) -> dict[str, Any]:
    """Store `script`'s text under `{experiments_folder}/scripts/` (content-addressed, written once).

    Returns the record's `script_*` fields; `stored_script` is relative to `experiments_folder`, so
    a copied bucket still finds it.
    """
    if not script or not os.path.isfile(script):
        return {
            "stored_script": None,
            "script_sha256": None,
            "script_missing": "the experiment did not run from a file (interactive or -c)",
        }
    with open(script, "rb") as f:
        original = f.read()
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError:
        return {
            "stored_script": None,
            "script_sha256": hashlib.sha256(original).hexdigest(),
            "script_missing": f"{script} is not UTF-8 text",
        }
    stored = redact(text).encode("utf-8")
    digest = hashlib.sha256(stored).hexdigest()
    stem = os.path.splitext(os.path.basename(script))[0] or "script"
    rel = f"{SCRIPTS_FOLDER}/{stem}-{digest[:16]}.py"
    url = join(experiments_folder, rel)
    if not exists(url):
        atomic_write_bytes(url, stored)
    return {
        "stored_script": rel,
        "script_sha256": digest,
        "script_bytes": len(stored),
        "script_redacted": stored != original,
    }


# ---- a step function's own code ------------------------------------------------------------------
# After a bug in a step's function is fixed the step's identity is unchanged (code is not identity),
# so the next run reuses the old output. Its SUCCESS status keeps a fingerprint of the function's
# source (and of the functions and classes of the same module it names, helpers included); a later
# plan compares it with the current one and says when they differ (decide.py). Other edits to the
# same file (a new step, another config) leave the fingerprint as it was.

MAX_FINGERPRINT_OBJECTS = 64


_FINGERPRINTS: weakref.WeakKeyDictionary[Any, dict[str, str] | None] = weakref.WeakKeyDictionary()
_FINGERPRINT_LOCK = threading.Lock()


def function_fingerprint(fn: Any) -> dict[str, str] | None:
    """{"file", "function", "sha256"} of a step function's source, or None when its source cannot be
    read (a function made in an interactive session, a builtin, a callable object without one).
    Computed once per function in a process (a plan may hold many steps of one function)."""
    target = source_function(fn)
    if target is None:
        return None
    # One at a time: the driver starts steps from several threads, and `inspect.getsource` of a
    # class parses its module with `ast`, which CPython 3.11 does not allow from two threads at once
    # ("SystemError: AST constructor recursion depth mismatch", seen on a busy machine).
    with _FINGERPRINT_LOCK:
        try:
            return _FINGERPRINTS[target]
        except (KeyError, TypeError):
            pass
        found = _fingerprint(target)
        with contextlib.suppress(TypeError):
            _FINGERPRINTS[target] = found
        return found


def _fingerprint(target: Any) -> dict[str, str] | None:
    module = getattr(target, "__module__", None)
    try:
        file = inspect.getsourcefile(target)
    except TypeError:
        return None
    if not file:
        return None
    seen: dict[str, str] = {}
    stack: list[Any] = [target]
    while stack and len(seen) < MAX_FINGERPRINT_OBJECTS:
        obj = stack.pop()
        # The qualified name only: a script run as `__main__` and imported by its module name is one code.
        name = str(getattr(obj, "__qualname__", "?"))
        if name in seen:
            continue
        try:
            seen[name] = inspect.getsource(obj)
        except Exception:  # noqa: BLE001 - a hint only: unreadable source never fails the step
            if obj is target:
                return None
            continue
        stack.extend(_same_module_names(obj, module))
    digest = hashlib.sha256("\0".join(f"{k}\0{v}" for k, v in sorted(seen.items())).encode()).hexdigest()
    rel = os.path.relpath(file) if not os.path.relpath(file).startswith("..") else file
    return {"file": rel, "function": getattr(target, "__qualname__", "?"), "sha256": digest[:16]}


def source_function(fn: Any) -> Any:
    """The Python function whose source is a step's code: through partials, decorators that keep
    `__wrapped__`, `@ray.remote`, and wrappers that name it (`source_function`, as Marin's StepSpec
    functions do)."""
    for _ in range(8):
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif type(fn).__name__ == "RemoteFunction" and hasattr(fn, "_function"):
            fn = fn._function
        elif getattr(fn, "source_function", None) is not None and not inspect.isfunction(fn):
            fn = fn.source_function
        else:
            break
    fn = inspect.unwrap(fn) if callable(fn) else fn
    return fn if inspect.isfunction(fn) or inspect.ismethod(fn) else None


def _same_module_names(obj: Any, module: str | None) -> list[Any]:
    """The functions and classes of `module` that `obj`'s code names (its helpers)."""
    code = getattr(obj, "__code__", None)
    scope = getattr(obj, "__globals__", None)
    if code is None or not isinstance(scope, dict):
        return []
    names: set[str] = set()
    codes = [code]
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    found = []
    for n in sorted(names):
        value = scope.get(n)
        if (inspect.isfunction(value) or inspect.isclass(value)) and getattr(value, "__module__", None) == module:
            found.append(value)
    return found
