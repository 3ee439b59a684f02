"""A first run's console, written to a file: no warning about the fresh default store, no colour
codes, one `[step]` prefix per worker line, no Ray banner lines, no cost lines for CPU steps."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

SCRIPT = textwrap.dedent(
    """
    import dataclasses

    from marin_lab.execution import ExecutorStep, executor_main, this_output_path, versioned


    @dataclasses.dataclass(frozen=True)
    class Config:
        output_path: str
        text: str


    def work(config: Config) -> None:
        print("hello from", config.text)
        with open(config.output_path + "/out.txt", "w") as f:
            f.write(config.text)


    steps = [
        ExecutorStep(name=f"tiny/{n}", fn=work, config=Config(this_output_path(), versioned(n))) for n in ("a", "b")
    ]

    if __name__ == "__main__":
        executor_main(steps=steps)
    """
)


def _console(tmp_path, *args: str) -> str:
    (tmp_path / "tiny.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "MARIN_LAB_VERBOSE", "RAY_ADDRESS")}
    env.update(HOME=str(tmp_path), PYTHONPATH=ROOT)
    with open(tmp_path / "console.txt", "w") as out:
        proc = subprocess.run(
            [sys.executable, "tiny.py", *args], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300
        )
    text = (tmp_path / "console.txt").read_text()
    assert proc.returncode == 0, text
    return text


def _check_quiet(text: str) -> None:
    assert "holds no experiments" not in text  # the default store's first run is no mistake
    assert "\x1b[" not in text  # not a terminal: no colour codes
    for n in ("a", "b"):
        (line,) = [line for line in text.splitlines() if f"hello from {n}" in line]
        assert line.startswith(f"[tiny/{n}-") and line.count(f"tiny/{n}-") == 1, line


@pytest.mark.slow
def test_a_local_first_run_console_is_quiet(tmp_path):
    _check_quiet(_console(tmp_path, "--backend", "local"))
    plan = _console(tmp_path, "--dry_run", "true")
    assert "cost" not in plan and "prices" not in plan  # CPU steps: no cost lines without --cost


@pytest.mark.ray
@pytest.mark.slow
def test_a_ray_first_run_console_has_no_ray_banner(tmp_path):
    text = _console(tmp_path, "--backend", "ray")
    _check_quiet(text)
    assert "Token authentication" not in text and "Ray dashboard" not in text
