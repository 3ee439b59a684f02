"""`marin-lab launch` under hostile input: an address that accepts TCP but is not Ray, a torn or
wrongly typed launch.json. Each is one line, in seconds, and starts nothing."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from marin_lab.cli import main as cli_main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(REPO, "tests", "launch_experiment.py")


@pytest.fixture()
def silent_port():
    """A port that accepts connections and reads, but never answers (not a Ray head)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()
    conns = []

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                conns.append(conn)
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    for c in conns:
        c.close()
    srv.close()


@pytest.mark.slow
def test_an_address_that_is_not_ray_is_one_line_within_seconds(tmp_path, capsys, silent_port):
    prefix = str(tmp_path / "p")
    started = time.monotonic()
    code = cli_main(
        ["launch", SCRIPT, "--address", f"127.0.0.1:{silent_port}", "--prefix", prefix, "--working_dir", REPO]
    )
    assert code == 1 and time.monotonic() - started < 30
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a Ray head" in err and str(silent_port) in err, err
    assert not os.path.exists(prefix)


@pytest.mark.parametrize(
    "content",
    [
        '{"run_id": "r-1", "status": "RUN',  # torn
        "[1, 2, 3]",  # not an object
        '{"run_id": "r-1", "attempts": "many"}',  # attempts not a list
        '{"run_id": "r-1", "attempts": [7, "x"]}',  # attempts not objects
        '{"run_id": 5, "attempts": []}',  # run_id not text
        '{"run_id": "r-1", "attempts": [{"attempt": "one"}], "max_restarts": []}',
        "\xff\xfe",  # not UTF-8 JSON
    ],
)
def test_a_torn_or_wrongly_typed_launch_record_is_one_line(tmp_path, capsys, content):
    folder = tmp_path / "launches" / "r-1"
    folder.mkdir(parents=True)
    (folder / "launch.json").write_bytes(content.encode("latin-1"))
    assert cli_main(["launch", "--status", "r-1", "--prefix", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "launch.json" in err and "r-1" in err, err


def test_a_sound_launch_record_still_prints(tmp_path, capsys):
    folder = tmp_path / "launches" / "r-1"
    folder.mkdir(parents=True)
    (folder / "launch.json").write_text(
        json.dumps(
            {
                "run_id": "r-1",
                "status": "SUCCEEDED",
                "script": "x.py",
                "max_restarts": 3,
                "attempts": [{"attempt": 1, "outcome": "succeeded", "started": "t0", "ended": "t1"}],
            }
        )
    )
    assert cli_main(["launch", "--status", "r-1", "--prefix", str(tmp_path)]) == 0
    assert "r-1: SUCCEEDED" in capsys.readouterr().out


def test_script_arguments_after_double_dash_are_taken(tmp_path, capsys):
    """As `launch --help` says: they reach the checks (here, the address), not argparse's refusal."""
    prefix = str(tmp_path / "p")
    code = cli_main(
        [
            "launch",
            SCRIPT,
            "--address",
            "127.0.0.1:1",
            "--prefix",
            prefix,
            "--working_dir",
            REPO,
            "--",
            "--lr",
            "3e-4",
            "events",
        ]
    )
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no Ray cluster answers there" in err, err
