"""The browser's HTTP API on a real server: status codes, confinement, no writes, no secrets."""

from __future__ import annotations

import http.client
import json
import sys
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest

from marin_lab.browser import server as server_module
from marin_lab.browser.server import main, start_in_thread
from marin_lab.store import default_prefix

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from browser_fixtures import EXPERIMENT_ID, OUTSIDE_TEXT, SECRET_VALUE, XSS_TEXT, build_prefix  # noqa: E402


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return build_prefix(tmp_path_factory.mktemp("api"))


@pytest.fixture(scope="module")
def server(fx):
    with start_in_thread(str(fx.prefix)) as running:
        yield running


def request(server, path: str, method: str = "GET", headers: dict | None = None) -> tuple[int, dict, str]:
    url = urlparse(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        # Raw path: no client-side normalisation of '..' or '%2e%2e', the server must cope.
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        body = response.read().decode("utf-8")
        return response.status, dict(response.getheaders()), body
    finally:
        conn.close()


def get_json(server, path: str) -> tuple[int, dict]:
    status, headers, body = request(server, path)
    assert headers["Content-Type"].startswith("application/json"), (path, headers)
    return status, json.loads(body)


def test_health_and_experiments(server, fx):
    status, body = get_json(server, "/api/health")
    assert status == 200 and body["prefix"] == str(fx.prefix)
    status, body = get_json(server, "/api/experiments")
    assert status == 200
    assert [e["id"] for e in body["experiments"]][:2] == [EXPERIMENT_ID, "older-11112222"]


def test_experiment_page_data(server):
    status, body = get_json(server, f"/api/experiments/{EXPERIMENT_ID}")
    assert status == 200 and len(body["steps"]) == 6 and len(body["graph"]["positions"]) == 6


@pytest.mark.parametrize(
    "path, code",
    [
        ("/api/experiments/nope-00000000", 404),
        ("/api/experiments/..%2F..%2Fetc", 400),
        ("/api/file?path=", 400),
        ("/api/file?path={raw}/data/plain.jsonl&limit=abc", 400),
        ("/api/file?path={raw}/data/plain.jsonl&limit=100000", 400),
        ("/api/file?path={raw}/data/plain.jsonl&cursor=zz", 400),
        ("/api/file?path={raw}/nope.jsonl", 404),
        ("/api/step?path={prefix}/nope/step-00000000", 404),
        ("/api/no-such-route", 404),
    ],
)
def test_errors_have_real_status_codes(server, fx, path, code):
    status, body = get_json(server, path.format(raw=quote(str(fx.raw)), prefix=quote(str(fx.prefix))))
    assert status == code and body["status"] == code and body["error"]


@pytest.mark.parametrize(
    "path",
    [
        "{prefix}/../outside/secret.txt",
        "{prefix}/%2e%2e/outside/secret.txt",
        "{outside}/secret.txt",
        "{raw}/escape/secret.txt",
        "{raw}/link-secret.txt",
        "/etc/passwd",
        "file:///etc/passwd",
        "gs://another-bucket/x",
        "../../etc/passwd",
    ],
)
def test_paths_outside_the_roots_are_forbidden(server, fx, path):
    target = path.format(prefix=fx.prefix, outside=fx.outside, raw=fx.raw)
    for route in ("file", "step", "metrics"):
        status, headers, body = request(server, f"/api/{route}?path={quote(target, safe='%')}")
        assert status == 403, (route, target, body)
        assert OUTSIDE_TEXT not in body


def test_raw_traversal_in_the_url_path_does_not_escape(server):
    for path in ("/static/../server.py", "/static/%2e%2e%2fserver.py", "/static/..%2f..%2fetc%2fpasswd"):
        status, _, body = request(server, path)
        assert status == 404 and "import" not in body


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_there_are_no_write_routes(server, fx, method):
    for path in ("/api/experiments", f"/api/file?path={quote(str(fx.raw))}/notes.txt", "/"):
        status, _, _ = request(server, path, method=method)
        assert status in (404, 405)
    assert (fx.raw / "notes.txt").exists()


def test_foreign_host_header_is_refused(server):
    # A DNS-rebinding page reaches 127.0.0.1 with its own name in Host.
    status, _, body = request(server, "/api/experiments", headers={"Host": "evil.example:8765"})
    assert status == 403 and "localhost only" in body


def test_security_headers(server):
    _, headers, body = request(server, "/")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "unsafe-inline" not in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert '<script src="/static/app.js"' in body
    status, headers, _ = request(server, "/static/app.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")


def test_secrets_never_leave_the_server(server, fx):
    paths = [
        f"/api/step?path={quote(str(fx.raw))}",
        f"/api/file?path={quote(str(fx.raw / '.executor_info'))}",
        f"/api/file?path={quote(str(fx.raw / 'notes.txt'))}",
        "/api/experiments",
        f"/api/experiments/{EXPERIMENT_ID}",
    ]
    for path in paths:
        status, _, body = request(server, path)
        assert status == 200 and SECRET_VALUE not in body and "should-not-show" not in body


def test_corrupt_records_are_answered_with_200_and_a_state(server, fx):
    status, body = get_json(server, f"/api/step?path={quote(str(fx.corrupt))}")
    assert status == 200 and body["info"]["state"] == "corrupt" and body["status"] == "CORRUPT"
    status, body = get_json(server, "/api/experiments/broken-deadbeef")
    assert status == 200 and body["state"] == "corrupt"


def test_documents_come_back_as_json_data_with_markup_intact(server, fx):
    status, body = get_json(server, f"/api/file?path={quote(str(fx.raw / 'data/docs-00001.jsonl.zst'))}&limit=5")
    assert status == 200 and body["items"][3]["value"]["text"] == XSS_TEXT
    status, body = get_json(
        server,
        f"/api/file?path={quote(str(fx.raw / 'data/docs-00001.jsonl.zst'))}&limit=5&cursor={body['next_cursor']}",
    )
    assert [i["line"] for i in body["items"]] == [5, 6, 7, 8, 9]


def test_metrics_route(server, fx):
    status, body = get_json(server, f"/api/metrics?path={quote(str(fx.train))}")
    assert status == 200 and body["metrics"]["rows"] == 100 and body["results"]["state"] == "missing"


def test_main_without_a_prefix_serves_the_default_store(monkeypatch):
    """`marin-lab browse` shares the executor's default prefix (the project's marin_store when
    MARIN_PREFIX is unset)."""
    monkeypatch.delenv("MARIN_PREFIX", raising=False)
    served = []
    monkeypatch.setattr(server_module, "serve", lambda prefix, **kw: served.append(prefix))
    main([])
    assert served == [default_prefix()]


def test_a_number_too_large_for_a_float_is_a_bad_metrics_line_not_a_500(server, fx):
    step = fx.prefix / "train" / "huge-numbers-0000"
    step.mkdir(parents=True)
    huge = "9" * 400  # valid JSON; float() of it overflows, which once answered 500
    (step / "metrics.jsonl").write_text(
        '{"step": 1, "loss": 2.5}\n'
        f'{{"step": 2, "loss": {huge}}}\n'
        f'{{"step": {huge}, "loss": 1.0}}\n'
        f'{{"step": 3, "loss": 2.0, "tokens_per_s": {huge}}}\n'
        '{"step": 4, "loss": 1.5}\n'
    )
    status, body = get_json(server, f"/api/metrics?path={quote(str(step))}")
    assert status == 200, body
    assert body["metrics"]["rows"] == 2 and body["metrics"]["bad_lines"] == 3
    assert body["metrics"]["series"]["loss"] == [[1, 2.5], [4, 1.5]]
    status, body = get_json(server, f"/api/metrics?path={quote(str(step))}&metric=tokens_per_s")
    assert status == 200 and body["metrics"]["bad_lines"] == 3
