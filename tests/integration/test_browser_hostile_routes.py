"""Every route of the browser's server under hostile input: links out of the roots, named pipes,
malformed parameters. The routes are read from the application's router, so a route added later is
walked too; every answer must come back in time, never as a 500, never with a byte from outside."""

from __future__ import annotations

import http.client
import itertools
import json
import re
import sys
from pathlib import Path
from urllib.parse import quote, urlencode, urlparse

import pytest

from marin_lab.browser.server import make_app, start_in_thread

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from eval_fixtures import OUTSIDE_TEXT, build_hostile_prefix, release_fifos  # noqa: E402

ANSWER_TIMEOUT_S = 30  # far below the server's own 120 s: a hung read fails here, not as a 504
A = "evaluate/nano-a-cccc0003"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    hp = build_hostile_prefix(tmp_path_factory.mktemp("hostile-routes"))
    yield hp
    release_fifos(hp.fifos)


@pytest.fixture(scope="module")
def server(hostile):
    with start_in_thread(str(hostile.base.prefix)) as running:
        yield running
    release_fifos(hostile.fifos)


def get(server, path: str) -> tuple[int, str]:
    url = urlparse(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=ANSWER_TIMEOUT_S)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        conn.close()


def route_templates() -> list[str]:
    """Every GET route the application registers, as its template (`/api/experiments/{exp_id}`)."""
    app = make_app("/nonexistent-prefix-for-routes")
    return sorted({r.resource.canonical for r in app.router.routes() if r.method == "GET" and r.resource})


def fill(template: str, hostile) -> list[str]:
    """The template with each hostile value of each of its placeholders."""
    values = {
        "exp_id": ["fifo-00000001", "linked-00000002", "evals-12345678", ".."],
        "name": ["app.js", "..", "%2e%2e%2fetc%2fpasswd"],
        "tail": ["evals/../file"],
    }
    names = re.findall(r"{(\w+)(?::[^}]*)?}", template)
    out = []
    for combo in itertools.product(*(values.get(n, ["x"]) for n in names)):
        path = template
        for n, v in zip(names, combo, strict=True):
            path = re.sub(r"{" + n + r"(?::[^}]*)?}", quote(v, safe="%"), path)
        out.append(path)
    return out


def hostile_queries(hostile) -> list[dict[str, str]]:
    hp, step = hostile, hostile.step
    keys = {
        "link": "evaluate/link-11110001",
        "fifo": "evaluate/fifo-22220002",
        "fifosamples": "evaluate/fifosamples-33330003",
        "linksamples": "evaluate/linksamples-44440004",
    }
    paths = [
        hp.link_run,
        hp.link_run / "results.json",
        hp.link_run / ".executor_info",
        hp.fifo_run,
        hp.fifo_run / "results.json",
        hp.fifo_samples_run,
        hp.fifo_samples_run / "samples_hellaswag.jsonl",
        hp.link_samples_run / "samples_hellaswag.jsonl",
        step,
        step / "metrics.jsonl",
        step / "pipe.jsonl",
        step / "linked.txt",
        step / "logs",
        hp.outside / "text.txt",
        hp.base.prefix / "experiments" / "fifo-00000001.json",
    ]
    queries: list[dict[str, str]] = [{"path": str(p)} for p in paths]
    queries += [{"path": "../outside/text.txt"}, {"path": ""}, {"path": "gs://elsewhere/x"}]
    for key in keys.values():
        queries.append({"run": key, "a": key, "b": A, "other": A, "task": "hellaswag", "show": "disagree"})
        queries.append({"run": A, "a": A, "b": key, "other": key, "task": "hellaswag", "show": "disagree"})
    good = {"path": str(hp.base.eval_a), "run": A, "task": "hellaswag", "a": A, "b": A}
    malformed = {
        "cursor": ["-5", "1" + "0" * 25, "abc", "0x10", "9" * 5000],
        "limit": ["-1", "0", "x", "1" + "0" * 30],
        "offset": ["-1", "1" + "0" * 25, "x"],
        "attempt": ["-1", "1" + "0" * 25, "x"],
        "metric": ["(", "\x7f"],
        "tasks": ["(", "a{99999999999}"],
        "rank_on": ["("],
        "show": ["sideways"],
        "smooth": ["x", "-1"],
    }
    for name, values in malformed.items():
        for value in values:
            queries.append({**good, name: value})
            queries.append({"path": str(step), name: value})
    return queries


@pytest.mark.slow
def test_every_route_refuses_links_out_pipes_and_malformed_input(server, hostile):
    templates = route_templates()
    assert "/api/evals/run" in templates and "/api/evals/samples" in templates  # the walk sees the router
    queries = hostile_queries(hostile)
    failures = []
    asked = 0
    for template in templates:
        for path in fill(template, hostile):
            for query in queries:
                url = path + "?" + urlencode(query)
                try:
                    status, body = get(server, url)
                except TimeoutError:
                    failures.append(f"{url}: no answer within {ANSWER_TIMEOUT_S} s")
                    break  # the read is stuck for good: the rest of the route would wait as long
                asked += 1
                if status >= 500:
                    failures.append(f"{url}: {status} {body[:200]}")
                if OUTSIDE_TEXT in body:
                    failures.append(f"{url}: {status} with content from outside the roots")
                if path.startswith("/api/"):
                    answer = json.loads(body)
                    if status >= 400:
                        assert "\n" not in answer["error"], (url, answer["error"])
            if failures:  # one bad route is enough to read; do not wait on the rest
                break
        if failures:
            break
    assert not failures, "\n".join(failures[:20])
    assert asked > 500


@pytest.mark.parametrize(
    "query, status, text",
    [
        ({"path": "evaluate/link-11110001"}, 403, "outside the browser's roots"),
        ({"path": "evaluate/fifo-22220002"}, 403, "named pipe"),
    ],
)
def test_an_evaluation_whose_results_cannot_be_read_is_refused(server, query, status, text):
    got, body = get(server, "/api/evals/run?" + urlencode(query))
    assert got == status and text in json.loads(body)["error"] and OUTSIDE_TEXT not in body


@pytest.mark.parametrize(
    "route, query, text",
    [
        ("samples", {"run": "evaluate/fifosamples-33330003", "task": "hellaswag"}, "named pipe"),
        ("compare", {"a": A, "b": "evaluate/fifosamples-33330003"}, "named pipe"),
        ("samples", {"run": "evaluate/linksamples-44440004", "task": "hellaswag"}, "outside"),
        ("compare", {"a": "evaluate/linksamples-44440004", "b": A}, "outside"),
    ],
)
def test_samples_and_compare_refuse_a_pipe_or_a_link_out(server, route, query, text):
    got, body = get(server, f"/api/evals/{route}?" + urlencode(query))
    assert got == 403 and text in json.loads(body)["error"] and OUTSIDE_TEXT not in body


def test_the_leaderboard_answers_beside_a_pipe_and_a_link_out(server):
    status, body = get(server, "/api/evals")
    board = json.loads(body)
    keys = [r["run"]["key"] for r in board["rows"]]
    assert status == 200 and OUTSIDE_TEXT not in body
    assert "evaluate/link-11110001" not in keys  # its results.json lies outside the roots
    fifo = next(r for r in board["rows"] if r["run"]["key"] == "evaluate/fifo-22220002")
    assert fifo["cells"] == {} and any("named pipe" in n and "results.json" in n for n in fifo["run"]["notes"])


@pytest.mark.parametrize(
    "cursor, status, text",
    [("-5", 400, "cursor=-5"), ("1" + "0" * 25, 400, "is not a byte offset"), ("abc", 400, "not an integer")],
)
def test_a_bad_cursor_is_a_400(server, cursor, status, text):
    got, body = get(server, "/api/evals/samples?" + urlencode({"run": A, "task": "hellaswag", "cursor": cursor}))
    assert got == status and text in json.loads(body)["error"]
