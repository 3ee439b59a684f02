"""`marin-lab --help` and each command's `--help` print and exit 0 (a `%` in a help text once broke them)."""

from __future__ import annotations

import pytest

from marin_lab.cli import build_parser, main


def _commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sorted(set(sub.choices) - {"compile", "cluster"})  # those two parse their own arguments


@pytest.mark.parametrize("argv", [["--help"]] + [[c, "--help"] for c in _commands()])
def test_help_prints_and_exits_zero(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out
