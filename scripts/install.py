"""Install pinned requirements into the running virtual environment: uv, configured like pip.

    .venv/bin/python scripts/install.py -e '.[test,tpu]'

Every install is constrained by requirements/constraints.txt. uv installs the same pins as pip
in a fraction of the time (the product, test and TPU extras into an empty environment: 12 s
against about 110 s; docs/benchmarks.md, "Test suite"), but it does not read pip's configuration,
and a machine's configuration can matter: this machine class finds its CPU build of torch in a
local wheel folder (`find-links`) and most packages in local indexes. So pip's effective settings
(`pip config list`: config files and PIP_* variables) are handed to uv as its own options, and
where uv cannot be had or fails, pip installs instead, with the same arguments.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

UV = "uv==0.13.9"
CONSTRAINTS = "requirements/constraints.txt"
PIP = [sys.executable, "-m", "pip", "install", "-q", "-q", "--disable-pip-version-check"]
QUIET = {"PIP_NO_WARN_SCRIPT_LOCATION": "1", "PYTHONWARNINGS": "ignore"}


def pip_settings() -> dict[str, list[str]]:
    """pip's effective settings, e.g. {'find-links': ['/opt/wheels'], 'extra-index-url': [...]}.

    As pip decides: a PIP_* variable overrides the files' [install] section, which overrides
    their [global] one (`pip config list` prints each as ':env:.name', 'install.name', 'global.name').
    """
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    ranked: dict[str, tuple[int, list[str]]] = {}
    for line in out.splitlines():  # global.find-links='/opt/wheels'
        key, _, value = line.partition("=")
        section, _, name = key.rpartition(".")
        rank = {":env:": 2, "install": 1, "global": 0}.get(section)
        if rank is None or not value:
            continue
        if rank >= ranked.get(name, (-1, []))[0]:
            ranked[name] = (rank, shlex.split(value)[0].split())
    return {name: values for name, (_, values) in ranked.items()}


def uv_options(settings: dict[str, list[str]]) -> list[str]:
    """pip's index, wheel-folder and constraint settings as uv options (pip semantics: the best
    version from all indexes, not the first index that has the package)."""
    options = ["--index-strategy", "unsafe-best-match", "--link-mode", "copy"]
    for url in settings.get("index-url", [])[:1]:
        options += ["--index-url", url]
    for url in settings.get("extra-index-url", []):
        options += ["--extra-index-url", url]
    for folder in settings.get("find-links", []):
        options += ["--find-links", folder]
    for path in settings.get("constraint", []):
        options += ["--constraint", path]
    if settings.get("no-index") in (["1"], ["true"], ["yes"]):
        options.append("--no-index")
    return options


def uv_path() -> str | None:
    """This environment's uv, installed by pip (pinned) the first time; None where that fails."""
    uv = os.path.join(os.path.dirname(sys.executable), "uv")
    if not os.path.exists(uv):
        result = subprocess.run([*PIP, UV], env={**os.environ, **QUIET}, capture_output=True, text=True)
        if result.returncode or not os.path.exists(uv):
            tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"install.py: could not install {UV} ({tail}); installing with pip", file=sys.stderr)
            return None
    return uv


def main(args: list[str]) -> int:
    requirements = ["-c", CONSTRAINTS, *args]
    uv = uv_path()
    if uv is not None:
        settings = pip_settings()
        env = {**os.environ, "VIRTUAL_ENV": sys.prefix, "UV_NO_PROGRESS": "1"}
        for timeout in settings.get("default-timeout", settings.get("timeout", []))[:1]:
            env["UV_HTTP_TIMEOUT"] = timeout
        for cert in settings.get("cert", [])[:1]:  # a machine's own certificate authorities (a proxy's)
            env["SSL_CERT_FILE"] = cert
        command = [uv, "pip", "install", "-q", "--python", sys.executable, *uv_options(settings)]
        # pip itself as pip would leave it (the newest), the rest as pinned.
        if subprocess.run([*command, "--upgrade-package", "pip", "pip", *requirements], env=env).returncode == 0:
            return 0
        print("install.py: uv could not install these requirements; installing with pip", file=sys.stderr)
    subprocess.run([*PIP, "--upgrade", "pip"], env={**os.environ, **QUIET}, check=False)
    return subprocess.run([*PIP, *requirements], env={**os.environ, **QUIET}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
