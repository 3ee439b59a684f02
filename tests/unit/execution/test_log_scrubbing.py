"""Regression: secret values of any characters are scrubbed from step logs as they are written,
from the terminal echo and from everything the browser serves (old logs included); and log
capture does work linear in the bytes printed, however long a line is."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from marin_lab.browser.logs import read_log
from marin_lab.browser.paths import Roots
from marin_lab.browser.preview import preview
from marin_lab.browser.server import _json
from marin_lab.execution.run import logs
from marin_lab.execution.run.logs import MAX_PIECE, READ_BYTES, LogSpec, _Reader, _Sink, capture
from marin_lab.io.secrets import REDACTED, SPLIT_KEEP, scrub_text

# What secret-named variables really hold: a base64 value may start with "/" and hold "+" and
# "="; a passphrase holds spaces. The docs promise only "8 characters or more".
ODD_SECRETS = {
    "MARIN_TEST_B64_KEY": "/u8+Qk3zR9w=",
    "MARIN_TEST_PASSWORD": "correct horse battery staple",
    "MARIN_TEST_SIGNING_SECRET": "a1b2c3d4",
}


@pytest.fixture
def odd_secrets(monkeypatch):
    for name, value in ODD_SECRETS.items():
        monkeypatch.setenv(name, value)
    return list(ODD_SECRETS.values())


def _leaks(text: str) -> list[str]:
    return [s for s in ODD_SECRETS.values() if s in text]


def test_secret_values_of_any_characters_are_scrubbed(odd_secrets):
    text = " | ".join(f"value {v} here" for v in odd_secrets)
    clean = scrub_text(text)
    assert _leaks(clean) == [] and clean.count(REDACTED) == 3 and clean.startswith("value <redacted> here")
    # Shorter values are left alone: a variable KEY=1 must not blank every "1".
    os.environ["MARIN_TEST_SHORT_TOKEN"] = "abc"
    try:
        assert scrub_text("abc def") == "abc def"
    finally:
        del os.environ["MARIN_TEST_SHORT_TOKEN"]


def test_step_log_and_terminal_echo_are_scrubbed(tmp_path, odd_secrets, capfd):
    url = str(tmp_path / "logs" / "attempt-1.log")
    with capture(LogSpec(url=url, label="s/x-1234")):
        for value in odd_secrets:
            os.write(1, f"printed {value}\n".encode())
            os.write(2, f"warned {value}\r".encode())  # a progress redraw, kept as its last state
    text = Path(url).read_text(encoding="utf-8")
    out, err = capfd.readouterr()
    assert _leaks(text) == [] and _leaks(out + err) == []
    assert "printed <redacted>" in text and "[s/x-1234] printed <redacted>" in out


def _reader(tmp_path, echo_to) -> tuple[_Reader, list[bytes]]:
    written: list[bytes] = []

    class Sink:
        def write(self, data: bytes) -> None:
            written.append(data)

    spec = LogSpec(url=str(tmp_path / "unused.log"), label="long")
    return _Reader(-1, echo_to, Sink(), spec, {}), written


def test_one_long_line_is_captured_in_linear_work_and_scrubbed_across_pieces(tmp_path, odd_secrets):
    secret = odd_secrets[1]
    size = 6 * MAX_PIECE
    body = bytearray(b"x" * size)
    # Secrets straddling a piece boundary, a read boundary, and the very end of the line.
    spots = [MAX_PIECE - 10, 3 * MAX_PIECE - len(secret) // 2, 5 * READ_BYTES - 3, size - len(secret)]
    for at in spots:
        body[at : at + len(secret)] = secret.encode()
    echo = os.open(os.devnull, os.O_WRONLY)
    try:
        reader, written = _reader(tmp_path, echo)
        for start in range(0, size, READ_BYTES):
            reader.feed(bytes(body[start : start + READ_BYTES]))
        reader.finish()
    finally:
        os.close(echo)
    out = b"".join(written)
    assert secret.encode() not in out and out.count(REDACTED.encode()) == len(spots)
    assert out.endswith(REDACTED.encode() + b"\n") and out.count(b"\n") == 1
    assert out.replace(REDACTED.encode(), b"").count(b"x") == size - len(spots) * len(secret)
    # Linear: every byte is scrubbed about once (pieces overlap by the few KiB a secret could
    # straddle), and no more than a piece is held at once. Gathering the line first and
    # re-searching it on every read, as capture once did, scrubs it whole: 6 MiB at a time.
    counts = reader.counts
    assert counts["scrubbed_chars"] <= size * 1.02 + MAX_PIECE, counts
    assert counts["largest_scrub"] <= MAX_PIECE + READ_BYTES + SPLIT_KEEP, counts
    assert counts["pieces"] >= size // (MAX_PIECE + READ_BYTES)


def test_short_lines_keep_their_boundaries_and_progress_is_throttled(tmp_path):
    reader, written = _reader(tmp_path, os.open(os.devnull, os.O_WRONLY))
    try:
        data = b"".join(b"line %d\n" % i for i in range(20_000)) + b"bar 1\rbar 2\rbar 3\nend"
        for start in range(0, len(data), 1000):  # lines cut anywhere between reads
            reader.feed(data[start : start + 1000])
        reader.finish()
    finally:
        os.close(reader.echo_fd)
    lines = b"".join(written).split(b"\n")
    assert lines[:3] == [b"line 0", b"line 1", b"line 2"] and lines[19_999] == b"line 19999"
    assert lines[20_000:] == [b"bar 1", b"bar 3", b"end", b""]  # redraws in between are dropped


def test_a_long_line_through_real_capture(tmp_path, odd_secrets, capfd):
    url = str(tmp_path / "logs" / "attempt-1.log")
    line = ("y" * (MAX_PIECE - 5) + odd_secrets[0] + "z" * (MAX_PIECE // 2)).encode()
    with capture(LogSpec(url=url, label="big")):
        os.write(1, line[: MAX_PIECE // 2])
        os.write(1, line[MAX_PIECE // 2 :] + b"\nafter\n")
    text = Path(url).read_text(encoding="utf-8")
    out, _ = capfd.readouterr()
    assert text == "y" * (MAX_PIECE - 5) + REDACTED + "z" * (MAX_PIECE // 2) + "\nafter\n"
    assert _leaks(out) == [] and out.count("[big] ") == 2  # the prefix once per line, not per piece


def test_the_browser_masks_old_logs_like_the_file_view(tmp_path, odd_secrets):
    logs = tmp_path / "step" / "logs"
    logs.mkdir(parents=True)
    # Written before capture scrubbed such values (or by another tool): served masked.
    old = (
        f"connecting with {odd_secrets[0]}\nAPI_KEY=plainvalue123\n"
        f'{{"db_password": "hunter2hunter2"}}\nuser said {odd_secrets[1]}\n'
    )
    (logs / "attempt-1.log").write_text(old)
    roots = Roots.of([str(tmp_path)])
    log_view = read_log(roots, str(tmp_path / "step"))["text"]
    file_view = preview(roots, str(logs / "attempt-1.log"))["text"]
    assert log_view == file_view
    for leaked in (*odd_secrets[:2], "plainvalue123", "hunter2hunter2"):
        assert leaked not in log_view
    assert "connecting with <redacted>" in log_view and "API_KEY=<redacted>" in log_view


def test_every_browser_answer_is_scrubbed_on_the_way_out(odd_secrets):
    answer = {
        "items": [{"value": {"text": f"doc quoting {odd_secrets[2]}"}}],
        "error": f"failed at {odd_secrets[0]}",
        f"key {odd_secrets[1]}": 1,
    }
    body = _json(answer).body.decode()
    assert _leaks(body) == [] and json.loads(body)["error"] == "failed at <redacted>"


def test_a_failed_log_upload_is_said_on_stderr_and_never_fails_the_step(monkeypatch):
    def refuse(url, data):
        raise OSError("bucket gone")

    monkeypatch.setattr(logs, "atomic_write_bytes", refuse)
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", stderr)
    sink = _Sink(LogSpec(url="memory://logs/a.log", label="step-a"))
    sink.write(b"first line\n")  # the first write uploads at once
    assert "[step-a] could not upload its log to memory://logs/a.log: bucket gone" in stderr.getvalue()
    sink.close()
    # A process started without a stderr has sys.__stderr__ None: the failure is then not said at all.
    monkeypatch.setattr(sys, "__stderr__", None)
    sink = _Sink(LogSpec(url="memory://logs/b.log", label="step-b"))
    sink.write(b"first line\n")
    sink.close()
