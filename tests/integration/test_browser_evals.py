"""The evaluation pages: their API on a real server, and the pages in headless Chromium showing the
numbers `marin-lab evals` prints on the same prefix."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import sys
from pathlib import Path
from urllib.parse import quote, urlencode, urlparse

import pytest

from marin_lab.browser.server import start_in_thread
from marin_lab.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from eval_fixtures import HOSTILE_TASK, build_eval_prefix  # noqa: E402

CHROMIUM = os.environ.get("MARIN_LAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "screenshots"
A, B = "evaluate/nano-a-cccc0003", "evaluate/nano-b-dddd0004"


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return build_eval_prefix(tmp_path_factory.mktemp("browser-evals"))


@pytest.fixture(scope="module")
def server(fx):
    with start_in_thread(str(fx.prefix)) as running:
        yield running


def get(server, path: str) -> tuple[int, dict]:
    url = urlparse(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        assert response.getheader("Content-Type").startswith("application/json")
        return response.status, json.loads(response.read().decode("utf-8"))
    finally:
        conn.close()


def cli_json(argv: list[str], capsys) -> dict:
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_leaderboard_api_is_the_cli_json(server, fx, capsys):
    status, api = get(server, "/api/evals")
    assert status == 200
    cli = cli_json(["evals", str(fx.prefix), "--format", "json"], capsys)
    assert [r["run"]["key"] for r in api["rows"]] == [r["run"]["key"] for r in cli["rows"]]
    assert [r["cells"] for r in api["rows"]] == [r["cells"] for r in cli["rows"]]
    # One metric per column (acc_norm): the hostile run's NaN acc_norm leaves its hellaswag cell empty,
    # so the tasks both nano runs hold form the rank.
    assert api["rank_tasks"] == cli["rank_tasks"] == ["arc_easy", "hellaswag", "piqa"]
    assert api["columns"] == cli["columns"] and api["columns"][1]["header"][1] == "acc_norm"
    hostile = next(r for r in api["rows"] if r["run"]["key"] == "evaluate/hostile-99990007")
    assert HOSTILE_TASK in hostile["cells"]  # the name is data; the page renders it as text
    assert any("is nan" in n for n in hostile["run"]["notes"])


def test_compare_samples_and_training_api(server, fx):
    status, cmp = get(server, "/api/evals/compare?" + urlencode({"a": A, "b": B}))
    assert status == 200 and cmp["tasks"]["hellaswag"]["diff"]["low"] > 0
    assert "is ahead on hellaswag" in cmp["verdict"]
    status, page = get(
        server,
        "/api/evals/samples?"
        + urlencode({"run": A, "task": "hellaswag", "show": "disagree", "other": B, "limit": 500}),
    )
    assert status == 200 and len(page["items"]) == cmp["tasks"]["hellaswag"]["diff"]["disagree"]
    status, page = get(server, "/api/evals/samples?" + urlencode({"run": A, "task": "hellaswag", "limit": 3}))
    assert status == 200 and len(page["items"]) == 3 and page["next_cursor"] > 0
    status, train = get(server, "/api/evals/training?tasks=hellaswag")
    assert status == 200 and sorted(r["name"] for r in train["runs"]) == ["train/nano-a", "train/nano-b"]
    series = train["runs"][0]["series"]["eval/hellaswag/acc"]
    assert [p[0] for p in series] == [0, 100, 200, 300]
    assert sorted(train["runs"][0]["series"]) == ["eval/hellaswag/acc"]  # _low / _high are its bounds
    low = train["runs"][0]["bounds"]["eval/hellaswag/acc"]["low"]
    assert [round(v - p[1], 6) for p, v in zip(low, [p[1] for p in series], strict=True)] == [0.05] * 4


@pytest.mark.parametrize(
    "path, status, text",
    [
        ("/api/evals/compare?a=nope&b=" + quote(B), 404, "no evaluation 'nope'"),
        ("/api/evals/compare?b=" + quote(B), 400, "a= is missing"),
        ("/api/evals?tasks=(", 400, "not a regular expression"),
        ("/api/evals/samples?run=" + quote(A) + "&task=hellaswag&show=sideways", 400, "show="),
        ("/api/evals/samples?run=" + quote(A) + "&task=nope", 400, "has no task"),
        ("/api/evals/samples?run=" + quote(A) + "&task=hellaswag&limit=100000", 400, "outside"),
        ("/api/evals/samples?run=" + quote(A) + "&task=hellaswag&cursor=x", 400, "not an integer"),
    ],
)
def test_bad_queries_are_one_line(server, path, status, text):
    got, body = get(server, path)
    assert got == status and text in body["error"] and "\n" not in body["error"]


def test_a_samples_file_linked_outside_the_roots_is_refused(tmp_path):
    fx = build_eval_prefix(tmp_path)
    outside = tmp_path / "outside.jsonl"
    outside.write_text('{"doc_id": 0, "acc": 1.0, "arguments": [["TOP SECRET", " x"]]}\n')
    samples = fx.eval_a / "samples_piqa.jsonl"
    samples.unlink()
    samples.symlink_to(outside)
    with start_in_thread(str(fx.prefix)) as running:
        status, body = get(running, "/api/evals/samples?" + urlencode({"run": A, "task": "piqa"}))
        assert status == 403 and "outside" in body["error"]
        status, body = get(running, "/api/evals/compare?" + urlencode({"a": A, "b": B}))
        assert status == 403 and "TOP SECRET" not in json.dumps(body)


def test_compare_api_gives_no_verdict_on_another_split(tmp_path):
    fx = build_eval_prefix(tmp_path)
    data = json.loads((fx.eval_b / "results.json").read_text())
    data["marin_lab"]["tasks"]["arc_easy"]["split"] = "test"
    (fx.eval_b / "results.json").write_text(json.dumps(data))
    with start_in_thread(str(fx.prefix)) as running:
        status, cmp = get(running, "/api/evals/compare?" + urlencode({"a": A, "b": B}))
    arc = cmp["tasks"]["arc_easy"]
    assert status == 200 and arc["paired"] is False and arc["diff"] is None and arc["text"] == "no verdict"
    assert "split validation vs test" in arc["unpaired"] and "within noise" not in arc["sentence"]
    covered = cmp["verdict"].split("; no verdict on")[0]
    assert "hellaswag" in covered and "arc_easy" not in covered and cmp["verdict"].endswith("(see the row)")
    assert cmp["tasks"]["hellaswag"]["paired"] is True


def test_a_prefix_without_evaluations_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    with start_in_thread(str(tmp_path / "empty")) as running:
        status, api = get(running, "/api/evals")
        assert status == 200 and api["rows"] == [] and "no evaluation" in api["empty"]
        status, train = get(running, "/api/evals/training")
        assert status == 200 and train["runs"] == []


def test_run_outside_the_roots_is_not_listed(tmp_path):
    fx = build_eval_prefix(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(fx.eval_a, elsewhere / "evaluate/x-12121212")
    exp = json.loads((fx.prefix / "experiments/evals-12345678.json").read_text())
    exp["steps"].append({"name": "evaluate/x", "output_path": str(elsewhere / "evaluate/x-12121212")})
    (fx.prefix / "experiments/evals-12345678.json").write_text(json.dumps(exp))
    with start_in_thread(str(fx.prefix)) as running:
        _, api = get(running, "/api/evals")
    assert all(str(elsewhere) not in r["run"]["path"] for r in api["rows"])


# ---- headless Chromium --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail(
            f"headless Chromium not found at {CHROMIUM}: `apt-get install -y chromium` (or set MARIN_LAB_CHROMIUM)"
        )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, server):
    context = chromium.new_context(viewport={"width": 1500, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.errors = errors
    yield page
    context.close()


def _open(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']")


def _shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.mark.browser
def test_leaderboard_page_shows_the_cli_numbers(page, server, fx, capsys):
    capsys.readouterr()
    assert main(["evals", str(fx.prefix)]) == 0
    cli_lines = capsys.readouterr().out.splitlines()
    _open(page, server.url + "/#/evals")
    page.wait_for_selector("#leaderboard tbody tr")
    rows = page.locator("#leaderboard tbody tr")
    keys = [rows.nth(i).get_attribute("data-key") for i in range(rows.count())]
    body = [line for line in cli_lines if re.match(r"\d+\s", line)]  # under the header's lines
    cli_keys = [re.search(r"(evaluate/\S+)", line).group(1) for line in body[: len(keys)]]
    assert keys == cli_keys
    for i, key in enumerate(keys):
        line = next(ln for ln in cli_lines if key in ln)
        for cell in rows.nth(i).locator("td.cell").all():
            text = cell.inner_text().strip()
            if text != "-":
                assert text in line, (key, text, line)
    b_row = page.locator(f"tr[data-key='{B}']")
    assert b_row.locator("td.cell[data-task='arc_easy']").get_attribute("class").count("capped") == 1
    # Each column names its metric, split and chance level, as the CLI's header does.
    header = page.locator("#leaderboard thead th[data-task='hellaswag']").inner_text()
    assert header.split("\n") == ["hellaswag", "acc_norm", "split validation", "chance 25.0"]
    # Coloured only where the intervals separate: hellaswag (B wholly above A), never piqa (within noise).
    a_row = page.locator(f"tr[data-key='{A}']")
    assert "sep-above" in b_row.locator("td.cell[data-task='hellaswag']").get_attribute("class")
    assert "sep-below" in a_row.locator("td.cell[data-task='hellaswag']").get_attribute("class")
    assert "sep-" not in b_row.locator("td.cell[data-task='piqa']").get_attribute("class")
    assert b_row.locator("td.cell[data-task='piqa']").evaluate("e => getComputedStyle(e).backgroundColor") in (
        "rgba(0, 0, 0, 0)",
        "transparent",
    )
    assert b_row.locator("a.model-link").get_attribute("href") == "#/step?" + urlencode({"path": str(fx.train_b)})
    # A script in a task name is a header's text, never markup.
    assert HOSTILE_TASK in page.locator("#leaderboard thead").inner_text()
    page.wait_for_timeout(300)
    assert page.evaluate("window.__xss") is None and page.locator("#app script, #app img").count() == 0
    assert "no 'marin_lab' or 'results' section" in page.locator("#eval-notes").inner_text()
    _shot(page, "evals-01-leaderboard")

    # Keyboard: select two rows with the space bar, then compare.
    page.locator(f"tr[data-key='{A}'] input[type=checkbox]").focus()
    page.keyboard.press("Space")
    page.locator(f"tr[data-key='{B}'] input[type=checkbox]").focus()
    page.keyboard.press("Space")
    page.locator("#compare-selected").focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("#verdict")
    page.wait_for_selector("body[data-ready='1']")
    assert not page.errors, page.errors


@pytest.mark.browser
def test_compare_and_sample_pages_show_the_cli_numbers(page, server, fx, capsys):
    capsys.readouterr()
    assert main(["evals", str(fx.prefix), "--compare", A, B]) == 0
    cli = capsys.readouterr().out
    _open(page, server.url + "/#/evals/compare?" + urlencode({"a": A, "b": B}))
    verdict = page.locator("#verdict").inner_text().strip()
    assert verdict in cli
    for task in ("hellaswag", "piqa", "arc_easy"):
        row = page.locator(f"#compare-table tr[data-task='{task}']")
        assert row.locator("td.diff").inner_text().strip() in next(ln for ln in cli.splitlines() if ln.startswith(task))
    _shot(page, "evals-02-compare")
    page.click("#compare-table tr[data-task='hellaswag'] a.disagree-link")
    page.wait_for_selector("#samples .sample")
    page.wait_for_selector("body[data-ready='1']")
    shown = page.locator("#samples .sample").count()
    assert 0 < shown <= 25
    first = page.locator("#samples .sample").first
    assert first.locator("li.picked").count() == 1 and first.locator("li.gold").count() == 1
    assert "loglikelihood" in first.inner_text() and "per character" in first.inner_text()
    # acc_norm picks by the per-character score: that one is marked; both models' picks side by side.
    assert first.locator(".score-norm.by-metric").count() == first.locator("li").count()
    assert first.locator(".pick-here").count() == 1 and first.locator(".pick-other").count() == 1
    assert "per character" in page.locator("#samples-metric").inner_text()
    _shot(page, "evals-03-samples-disagree")
    page.click("a.filter:has-text('wrong')")
    page.wait_for_selector("strong.filter:has-text('wrong')")
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("#samples .sample.right").count() == 0 and page.locator("#samples .sample.wrong").count() > 0
    page.click("#next-page")
    page.wait_for_selector("#page-number:has-text('page 2')")
    assert not page.errors, page.errors


@pytest.mark.browser
def test_hostile_samples_and_training_page(page, server, fx):
    _open(
        page, server.url + "/#/evals/samples?" + urlencode({"run": "evaluate/hostile-99990007", "task": HOSTILE_TASK})
    )
    page.wait_for_selector("#samples .sample")
    assert page.locator("#samples .sample.bad").count() == 2  # broken JSON, and the 5 MB line, skipped
    assert page.locator("#app script, #app img").count() == 0
    _open(page, server.url + "/#/evals/training")
    page.wait_for_selector(".training-table")
    table = page.locator(".training-table[data-key='eval/hellaswag/acc']")
    assert table.locator("thead th").count() == 3 and table.locator("tbody tr").count() == 4
    assert "(0.2-0.3)" in table.locator("tbody tr").first.inner_text()  # step 0: 0.25 (0.2-0.3)
    _shot(page, "evals-04-training")
    assert page.evaluate("window.__xss") is None
    assert not page.errors, page.errors


@pytest.mark.browser
def test_an_evaluation_steps_page_shows_its_tasks(page, server, fx, capsys):
    capsys.readouterr()
    assert main(["evals", str(fx.prefix)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if A in ln)
    _open(page, server.url + "/#/step?" + urlencode({"path": str(fx.eval_a)}))
    page.wait_for_selector("#eval-tasks tbody tr")
    shown = page.locator("#eval-tasks tr[data-task='hellaswag'] td").nth(1).inner_text().strip()
    assert shown.startswith("acc_norm ") and shown.removeprefix("acc_norm ") in line
    page.click("#eval-tasks tr[data-task='hellaswag'] a")
    page.wait_for_selector("#samples .sample")
    assert not page.errors, page.errors
