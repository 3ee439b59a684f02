"""`marin-lab --help` and each command's `--help` print and exit 0 (a `%` in a help text once broke them),
and what the command and an experiment file import when they start."""

from __future__ import annotations

import subprocess
import sys

import pytest

from marin_lab.cli import build_parser, main
from tests.conftest import REPO_ROOT


def _commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sorted(set(sub.choices) - {"compile", "cluster"})  # those two parse their own arguments


@pytest.mark.parametrize("argv", [["--help"]] + [[c, "--help"] for c in _commands()])
def test_help_prints_and_exits_zero(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_the_cli_starts_without_the_model_side_of_generate_ray_or_scipy():
    """`marin-lab status` and the other record commands do not import generate's model loading
    (JAX, tokenizers) when the CLI starts: it is imported when `generate` runs. Nor Ray (imported
    when a step runs on slices or a launch connects) or scipy (when an interval is computed): with
    them `marin-lab status` took a median 2.34 s to start instead of 0.81 s (docs/executor.md)."""
    heavy = ("marin_lab.evaluation.loading", "marin_lab.models.generate", "marin_lab.processing.tokenizers")
    heavy += ("jax", "ray", "scipy")
    out = _imported_at_start("marin_lab.cli", heavy)
    assert out.strip() == "[]"


def test_an_experiment_file_starts_without_ray_or_scipy():
    """experiments/defaults.py, which experiment files import, pulls in neither Ray (imported when the
    ray backend starts or a step runs on TPU slices) nor scipy (imported when dedup clusters its
    duplicates): a `--dry_run` or `--help` does not pay for them."""
    out = _imported_at_start("experiments.defaults", ("ray", "scipy"))
    assert out.strip().splitlines()[-1] == "[]"


def _imported_at_start(module: str, heavy: tuple[str, ...]) -> str:
    """What a fresh interpreter prints after importing `module`: the names of `heavy` it imported."""
    code = f"import sys, {module}; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout
