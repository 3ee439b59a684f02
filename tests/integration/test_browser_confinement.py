"""The browser server under attack: symlinked records, FIFOs, slow requests, hostile JSON."""

from __future__ import annotations

import http.client
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, urlparse

import pytest

import marin_lab.browser.server as server_mod
from marin_lab.browser.server import start_in_thread

OUTSIDE_TEXT = "SECRET OUTSIDE THE PREFIX"


def get(server, path: str, timeout: float = 60) -> tuple[int, str]:
    url = urlparse(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8")
    finally:
        conn.close()


@pytest.fixture
def prefix(tmp_path):
    prefix, outside = tmp_path / "prefix", tmp_path / "outside"
    step = prefix / "train" / "tiny-0000abcd"
    step.mkdir(parents=True)
    outside.mkdir()
    (outside / "record.json").write_text(json.dumps({"name": OUTSIDE_TEXT, "status": "SUCCESS"}))
    (outside / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0, "note": OUTSIDE_TEXT}) + "\n")
    for name in (".executor_info", ".executor_status", "results.json"):
        os.symlink(outside / "record.json", step / name)
    os.symlink(outside / "metrics.jsonl", step / "metrics.jsonl")
    (step / "docs.jsonl").write_text('{"id": "a", "text": "fine"}\n')
    experiments = prefix / "experiments"
    experiments.mkdir()
    os.symlink(outside / "record.json", experiments / "linked-00000000.json")
    return prefix, step


def test_symlinked_records_results_and_metrics_are_not_served_from_outside(prefix):
    root, step = prefix
    with start_in_thread(str(root)) as server:
        for path in (
            f"/api/step?path={quote(str(step))}",
            f"/api/metrics?path={quote(str(step))}",
            "/api/experiments",
            "/api/experiments/linked-00000000",
            f"/api/file?path={quote(str(step))}",
        ):
            status, body = get(server, path)
            assert status == 200 and OUTSIDE_TEXT not in body, (path, body)
        for name in (".executor_info", "results.json", "metrics.jsonl"):
            status, body = get(server, f"/api/file?path={quote(str(step / name))}")
            assert status == 403 and OUTSIDE_TEXT not in body
        status, body = get(server, f"/api/step?path={quote(str(step))}")
        answer = json.loads(body)
        assert answer["info"]["state"] == "corrupt" and "outside the browser's roots" in answer["info"]["error"]
        metrics = json.loads(get(server, f"/api/metrics?path={quote(str(step))}")[1])
        assert metrics["metrics"]["state"] == "corrupt" and metrics["results"]["state"] == "corrupt"


def test_fifos_never_hang_the_file_route(prefix):
    root, step = prefix
    os.mkfifo(step / "pipe.jsonl")
    os.mkfifo(step / "pipe.txt")
    with start_in_thread(str(root)) as server:
        paths = [f"/api/file?path={quote(str(step / name))}" for name in ("pipe.jsonl", "pipe.txt")] * 10
        with ThreadPoolExecutor(len(paths)) as pool:
            answers = list(pool.map(lambda p: get(server, p), paths))
        assert all(status == 403 and "named pipe" in body for status, body in answers)
        assert get(server, f"/api/file?path={quote(str(step / 'docs.jsonl'))}")[0] == 200


def test_slow_requests_do_not_block_other_requests(prefix, monkeypatch):
    root, step = prefix
    release = threading.Event()
    entered = threading.Semaphore(0)
    real_preview = server_mod.preview

    def preview(roots, path, *args):
        if path.endswith("slow.txt"):
            entered.release()
            release.wait(120)
        return real_preview(roots, path, *args)

    monkeypatch.setattr(server_mod, "preview", preview)
    (step / "slow.txt").write_text("slow")
    slow_count = 12  # more than asyncio's default pool holds on a small machine
    with start_in_thread(str(root)) as server, ThreadPoolExecutor(slow_count) as pool:
        try:
            slow = [
                pool.submit(get, server, f"/api/file?path={quote(str(step / 'slow.txt'))}", 180)
                for _ in range(slow_count)
            ]
            for _ in range(slow_count):
                assert entered.acquire(timeout=120), "the slow requests did not all start"
            status, body = get(server, f"/api/file?path={quote(str(step / 'docs.jsonl'))}", timeout=120)
            assert status == 200 and "fine" in body
            assert get(server, "/api/experiments", timeout=120)[0] == 200
        finally:
            release.set()
        assert all(f.result(timeout=120)[0] == 200 for f in slow)


def test_lone_surrogates_and_deep_nesting_are_answered_as_json(prefix):
    root, step = prefix
    (step / "hostile.jsonl").write_text('{"id": "s", "text": "\\ud800"}\n' + "[" * 50_000 + "]" * 50_000 + "\n")
    with start_in_thread(str(root)) as server:
        status, body = get(server, f"/api/file?path={quote(str(step / 'hostile.jsonl'))}")
    items = json.loads(body)["items"]
    assert status == 200 and items[0]["value"]["text"] == "\ud800" and "nested too deeply" in items[1]["error"]
