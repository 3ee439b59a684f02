"""Install pinned requirements into the running virtual environment: uv, configured like pip.

    .venv/bin/python scripts/install.py -e '.[test,tpu]'

Every install is constrained by requirements/constraints.txt. uv installs the same pins as pip in
a fraction of the time, but does not read pip's configuration: pip's effective settings of this
machine are handed to it (marin_lab/environments/pip_config.py, loaded by path: nothing of the
project is installed yet). Where uv cannot be had or fails, pip installs, with the same arguments.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

CONSTRAINTS = "requirements/constraints.txt"
PIP = [sys.executable, "-m", "pip", "install", "-q", "-q", "--disable-pip-version-check"]
QUIET = {"PIP_NO_WARN_SCRIPT_LOCATION": "1", "PYTHONWARNINGS": "ignore"}
_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "pip_config", os.path.join(_HERE, "..", "marin_lab", "environments", "pip_config.py")
)
assert _spec is not None and _spec.loader is not None
pip_config = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pip_config)


def uv_path() -> str | None:
    """This environment's uv, installed by pip (pinned) the first time; None where that fails."""
    uv = os.path.join(os.path.dirname(sys.executable), "uv")
    if not os.path.exists(uv):
        result = subprocess.run(
            [*PIP, pip_config.UV_REQUIREMENT], env={**os.environ, **QUIET}, capture_output=True, text=True
        )
        if result.returncode or not os.path.exists(uv):
            tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            print(
                f"install.py: could not install {pip_config.UV_REQUIREMENT} ({tail}); installing with pip",
                file=sys.stderr,
            )
            return None
    return uv


def main(args: list[str]) -> int:
    requirements = ["-c", CONSTRAINTS, *args]
    uv = uv_path()
    if uv is not None:
        settings = pip_config.pip_settings()
        env = pip_config.uv_environment(settings, {**os.environ, "VIRTUAL_ENV": sys.prefix})
        command = pip_config.uv_install_command(uv, sys.executable, settings)
        # pip itself as pip would leave it (the newest), the rest as pinned.
        if subprocess.run([*command, "--upgrade-package", "pip", "pip", *requirements], env=env).returncode == 0:
            return 0
        print("install.py: uv could not install these requirements; installing with pip", file=sys.stderr)
    subprocess.run([*PIP, "--upgrade", "pip"], env={**os.environ, **QUIET}, check=False)
    return subprocess.run([*PIP, *requirements], env={**os.environ, **QUIET}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
