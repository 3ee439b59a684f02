"""`marin-lab browse` has one parser (also behind `python -m marin_lab.browser.server`), and
`--root X` beside `--prefix P` serves P with X readable too (it once refused to start)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from marin_lab.browser import server
from marin_lab.browser.server import BROWSER_KEY, start_in_thread
from marin_lab.cli import main as cli_main


@pytest.fixture
def served(monkeypatch):
    """What `serve` would run, instead of running it: the app (and the socket is closed)."""
    apps = []

    def run_app(app, sock, **_):
        sock.close()
        apps.append(app)

    monkeypatch.setattr(server.web, "run_app", run_app)
    return apps


@pytest.mark.parametrize("entry", ["marin-lab", "python -m marin_lab.browser.server"])
def test_browse_with_a_root_starts_and_serves_the_prefix_first(tmp_path, served, capsys, entry):
    prefix, extra = tmp_path / "store", tmp_path / "elsewhere"
    prefix.mkdir()
    extra.mkdir()
    argv = ["--prefix", str(prefix), "--root", str(extra), "--port", "0"]
    rc = cli_main(["browse", *argv]) if entry == "marin-lab" else server.main(argv)
    assert rc == 0, capsys.readouterr().err
    browser = served[0][BROWSER_KEY]
    assert browser.prefix == str(prefix) and browser.roots.urls == (str(prefix), str(extra))
    assert f"(prefix {prefix})" in capsys.readouterr().out


def test_a_relative_prefix_named_as_a_root_too_is_one_root(tmp_path, served, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "store").mkdir()
    assert cli_main(["browse", "--prefix", "store", "--root", "store", "--port", "0"]) == 0
    browser = served[0][BROWSER_KEY]
    assert browser.prefix == str(tmp_path / "store") and browser.roots.urls == (str(tmp_path / "store"),)


def test_a_file_under_a_root_is_served_and_one_outside_is_refused(tmp_path):
    prefix, extra, outside = tmp_path / "store", tmp_path / "elsewhere", tmp_path / "outside"
    for folder in (prefix, extra, outside):
        folder.mkdir()
    (extra / "notes.jsonl").write_text('{"text": "hello"}\n')
    (outside / "secret.jsonl").write_text('{"text": "no"}\n')
    with start_in_thread(str(prefix), roots=[str(extra)]) as running:

        def get(path: str) -> tuple[int, dict]:
            url = f"{running.url}/api/file?path={urllib.parse.quote(path)}"
            try:
                with urllib.request.urlopen(url, timeout=30) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as err:
                return err.code, json.loads(err.read())

        status, body = get(str(extra / "notes.jsonl"))
        assert status == 200 and "hello" in json.dumps(body)
        assert get(str(outside / "secret.jsonl"))[0] == 403
