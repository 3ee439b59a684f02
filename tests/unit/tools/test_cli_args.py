"""`marin-lab`'s arguments: the prefix spelt as every command takes it (`--prefix PATH`) or, for
`status` and `gc`, as the word after the command; a mistyped command or flag named with the closest
real one."""

from __future__ import annotations

import pytest

from marin_lab.cli import main


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_status_takes_the_prefix_either_way(tmp_path, capsys):
    for argv in (["status", str(tmp_path)], ["status", "--prefix", str(tmp_path)], ["status", f"--prefix={tmp_path}"]):
        assert main(argv) == 0
        assert capsys.readouterr().out == f"no experiments recorded under {tmp_path}\n"
    assert main(["status", str(tmp_path), "--prefix", str(tmp_path)]) == 0  # the same prefix twice is one


def test_a_prefix_given_twice_differently_is_a_usage_error(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    err = _usage_error(["status", str(a), "--prefix", str(b)], capsys)
    assert err == f"marin-lab status: error: the prefix is given twice ({a} and --prefix {b}): give it once"


def test_gc_takes_the_prefix_either_way(tmp_path, capsys):
    (tmp_path / "experiments").mkdir()
    for argv in (["gc", str(tmp_path)], ["gc", "--prefix", str(tmp_path)]):
        assert main(argv) == 0
        assert f"nothing to collect under {tmp_path}" in capsys.readouterr().out


def test_a_mistyped_command_names_the_closest_one(capsys):
    assert _usage_error(["statsu"], capsys) == "marin-lab: error: unknown command 'statsu'; did you mean 'status'?"
    assert _usage_error(["xyz"], capsys).startswith("marin-lab: error: unknown command 'xyz' (one of: status, explain,")


def test_a_mistyped_flag_names_the_closest_one(tmp_path, capsys):
    err = _usage_error(["status", "--prefx", str(tmp_path)], capsys)
    assert err == "marin-lab status: error: unrecognized arguments: --prefx (--prefx: did you mean --prefix?)"
    err = _usage_error(["gc", str(tmp_path), "--older-than", "3d"], capsys)
    assert err.endswith("(--older-than: did you mean --older_than?)")
    # Nothing close: the flag alone, no guess.
    assert _usage_error(["status", "--bogus"], capsys) == "marin-lab status: error: unrecognized arguments: --bogus"
