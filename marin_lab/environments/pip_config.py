"""uv configured as pip is: pip's effective settings of this machine handed to uv as its options.

uv installs a set of pinned requirements in a fraction of pip's time (make's test environment:
45-50 s against about 110 s; docs/benchmarks.md, "Test suite"), but it does not read pip's
configuration, and a machine's configuration can matter: this machine class finds its CPU build of
torch in a local wheel folder (`find-links`), most packages in local indexes, and trusts its proxy
through a certificate file. Used by `make`'s installs (`scripts/install.py`) and by the builds of
per-step environments (`locked.py`); both install with pip where uv is missing or fails.

Standard library only: `scripts/install.py` loads this file by path before anything is installed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

UV_REQUIREMENT = "uv==0.13.9"
"""The uv `make` installs into the project's environment."""

# pip's precedence: a PIP_* variable over the files' [install] section over their [global] one.
_RANK = {":env:": 2, "install": 1, "global": 0}


def pip_settings(python: str = sys.executable, env: dict[str, str] | None = None) -> dict[str, list[str]]:
    """pip's effective settings for `python`, e.g. {'find-links': ['/opt/wheels'], 'cert': [...]}."""
    out = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False, env=env
    ).stdout
    ranked: dict[str, tuple[int, list[str]]] = {}
    for line in out.splitlines():  # global.find-links='/opt/wheels', :env:.cert='...'
        key, _, value = line.partition("=")
        section, _, name = key.rpartition(".")
        rank = _RANK.get(section)
        if rank is None or not value:
            continue
        if rank >= ranked.get(name, (-1, []))[0]:
            ranked[name] = (rank, shlex.split(value)[0].split())
    return {name: values for name, (_, values) in ranked.items()}


def uv_options(settings: dict[str, list[str]]) -> list[str]:
    """pip's index, wheel-folder and constraint settings as `uv pip install` options, with pip's
    rule of the best version from every index (uv's default takes the first index that has one)."""
    options = ["--index-strategy", "unsafe-best-match", "--link-mode", "copy"]
    for url in settings.get("index-url", [])[:1]:
        options += ["--index-url", url]
    for url in settings.get("extra-index-url", []):
        options += ["--extra-index-url", url]
    for folder in settings.get("find-links", []):
        options += ["--find-links", folder]
    for path in settings.get("constraint", []):
        options += ["--constraint", path]
    if _on(settings, "no-index"):
        options.append("--no-index")
    # pip writes each module's bytecode as it installs, uv only when asked. Without it every process
    # compiles the sources it imports, and again in each process where PYTHONDONTWRITEBYTECODE is
    # set: importing ray, torch, transformers, datasets and lm-eval took 9.8 CPU-seconds that way
    # against 5.2 with the bytecode written (2026-12-07, a loaded 2-core machine).
    if not _on(settings, "no-compile"):
        options.append("--compile-bytecode")
    return options


def _on(settings: dict[str, list[str]], name: str) -> bool:
    return settings.get(name, ["0"])[0].lower() in ("1", "true", "yes", "on")


def uv_environment(settings: dict[str, list[str]], base: dict[str, str]) -> dict[str, str]:
    """`base` plus what uv takes as variables: pip's timeout and certificate file; no progress bars."""
    env = {**base, "UV_NO_PROGRESS": "1"}
    for timeout in settings.get("default-timeout", settings.get("timeout", []))[:1]:
        env["UV_HTTP_TIMEOUT"] = timeout
    for cert in settings.get("cert", [])[:1]:  # a machine's own certificate authorities (a proxy's)
        env["SSL_CERT_FILE"] = cert
    return env


def find_uv() -> str | None:
    """The uv beside this interpreter (installed by make), else one on PATH, else None."""
    beside = os.path.join(os.path.dirname(sys.executable), "uv")
    return beside if os.access(beside, os.X_OK) else shutil.which("uv")


def uv_install_command(uv: str, python: str, settings: dict[str, list[str]]) -> list[str]:
    """`uv pip install` into `python`'s environment, configured from pip's `settings`."""
    return [uv, "pip", "install", "-q", "--python", python, *uv_options(settings)]
