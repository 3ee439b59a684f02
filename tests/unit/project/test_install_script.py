"""scripts/install.py hands pip's configuration of a machine to uv (make's installs)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def install():
    spec = importlib.util.spec_from_file_location("install_script", os.path.join(ROOT, "scripts", "install.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pips_files_and_variables_become_uv_options(install, tmp_path, monkeypatch):
    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\nindex-url = https://mirror.example/simple\n"
        "extra-index-url = file:///srv/a/simple file:///srv/b/simple\nconstraint = /etc/caps.txt\n"
        "cert = /etc/ssl/file.pem\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    monkeypatch.setenv("PIP_CERT", "/etc/ssl/proxy.pem")  # a variable overrides the file
    settings = install.pip_config.pip_settings()
    assert settings["extra-index-url"] == ["file:///srv/a/simple", "file:///srv/b/simple"]
    assert settings["find-links"] == ["/opt/wheels"] and settings["cert"] == ["/etc/ssl/proxy.pem"]
    options = install.pip_config.uv_options(settings)
    pairs = set(zip(options, options[1:], strict=False))
    assert ("--index-strategy", "unsafe-best-match") in pairs  # pip's rule: the best version of every index
    assert ("--index-url", "https://mirror.example/simple") in pairs
    assert ("--extra-index-url", "file:///srv/a/simple") in pairs and (
        "--extra-index-url",
        "file:///srv/b/simple",
    ) in pairs
    assert ("--find-links", "/opt/wheels") in pairs and ("--constraint", "/etc/caps.txt") in pairs


def test_no_configuration_gives_the_index_strategy_and_pips_defaults(install, tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in [k for k in os.environ if k.startswith("PIP_") and k != "PIP_CONFIG_FILE"]:
        monkeypatch.delenv(name)
    assert install.pip_config.uv_options(install.pip_config.pip_settings()) == [
        "--index-strategy",
        "unsafe-best-match",
        "--link-mode",
        "copy",
        "--compile-bytecode",  # pip writes bytecode as it installs; uv does when asked
    ]


def test_pips_no_compile_setting_keeps_uv_from_writing_bytecode(install, monkeypatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_COMPILE", "1")
    settings = install.pip_config.pip_settings()
    assert settings.get("no-compile") == ["1"]
    assert "--compile-bytecode" not in install.pip_config.uv_options(settings)


def test_a_bad_requirement_fails_with_pips_answer_too(tmp_path):
    """uv refuses, pip is tried with the same arguments and refuses too: the exit status says so."""
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "install.py"), "--no-index", "no-such-package-xyz==1.0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "installing with pip" in result.stderr
