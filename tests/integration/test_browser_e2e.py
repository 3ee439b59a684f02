"""The browser in headless Chromium: click through experiments, the graph, a step and a data file.

Screenshots go to test-output/screenshots/ (kept by CI as test output).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from marin_lab.browser.server import start_in_thread

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from browser_fixtures import EXPERIMENT_ID, OUTSIDE_TEXT, SECRET_VALUE, XSS_TEXT, build_prefix  # noqa: E402

pytestmark = pytest.mark.browser

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


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return build_prefix(tmp_path_factory.mktemp("e2e"))


@pytest.fixture(scope="module")
def server(fx):
    with start_in_thread(str(fx.prefix)) as running:
        yield running


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
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.errors = errors
    yield page
    context.close()


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def wait_ready(page) -> None:
    page.wait_for_selector("body[data-ready='1']")


def test_click_through_experiment_graph_step_file_and_pages(page, server, fx):
    page.goto(server.url + "/")
    wait_ready(page)
    rows = page.locator("#experiments tbody tr")
    assert rows.count() == 3
    assert rows.first.get_attribute("data-id") == EXPERIMENT_ID  # newest first
    assert "FAILED 1" in rows.first.inner_text()
    shot(page, "01-experiments")

    page.click(f"tr[data-id='{EXPERIMENT_ID}'] a.experiment-link")
    page.wait_for_selector("svg#dag g.node")
    wait_ready(page)
    nodes = page.locator("svg#dag g.node")
    assert nodes.count() == 6
    assert page.locator("svg#dag path.edge").count() == 6
    assert page.locator("svg#dag g.node[data-status='FAILED']").count() == 1
    colour = page.locator("svg#dag g.node[data-status='SUCCESS'] rect").first.get_attribute("fill")
    assert colour == "var(--SUCCESS)"
    shot(page, "02-experiment-graph")

    page.click("svg#dag g.node[data-key='tokenize/docs-bbbb0002']")
    page.wait_for_selector("#explain")
    wait_ready(page)
    assert "tokenize/docs-bbbb0002" in page.locator("h1").inner_text()
    explain = page.locator("#explain").inner_text()
    assert "config.tokenizer" in explain and "gpt2" in explain and "config.source" in explain
    assert page.locator("#status-history tbody tr").count() == 2
    assert page.locator("#manifest a.manifest-file").count() >= 3
    shot(page, "03-step")

    # Dependency link goes to the upstream step; its manifest opens a data file.
    page.click("a:has-text('raw/docs-aaaa0001')")
    page.wait_for_selector("#manifest")
    wait_ready(page)
    page.click("#manifest a.manifest-file:has-text('data/docs-00001.jsonl.zst')")
    page.wait_for_selector("#documents .doc")
    wait_ready(page)
    assert page.locator("#page-number").inner_text() == "page 1"
    first_ids = page.locator("#documents .doc .head").first.inner_text()
    assert "line 1" in first_ids
    shot(page, "04-file-page-1")

    page.click("#next-page")
    page.wait_for_selector("#page-number:has-text('page 2')")
    wait_ready(page)
    assert "line 26" in page.locator("#documents .doc .head").first.inner_text()
    shot(page, "05-file-page-2")
    page.click("#prev-page")
    page.wait_for_selector("#page-number:has-text('page 1')")
    assert not page.errors, page.errors


def test_script_in_a_document_is_shown_not_run(page, server, fx):
    page.goto(server.url + "/#/files?path=" + quote(str(fx.raw / "data/plain.jsonl")))
    page.wait_for_selector("#documents .doc")
    wait_ready(page)
    texts = page.locator("#documents .doc-text").all_inner_texts()
    assert XSS_TEXT in texts
    page.wait_for_timeout(300)  # an injected onerror handler would have fired by now
    assert page.evaluate("window.__xss") is None
    assert page.locator("#documents script, #documents img").count() == 0
    # The broken line is shown as broken, not dropped.
    assert "not valid JSON" in page.locator("#documents .doc.bad").first.inner_text()
    shot(page, "06-xss-shown-as-text")
    page.goto(server.url + "/#/files?path=" + quote(str(fx.raw / "notes.txt")))
    page.wait_for_selector("pre.text-view")
    assert XSS_TEXT in page.locator("pre.text-view").inner_text()
    assert page.evaluate("window.__xss") is None


def test_traversal_and_escape_show_an_error_page(page, server, fx):
    for target in (f"{fx.prefix}/../outside/secret.txt", str(fx.raw / "escape/secret.txt"), "/etc/passwd"):
        page.goto(server.url + "/#/files?path=" + quote(target))
        page.wait_for_selector("#error")
        assert "HTTP 403" in page.locator("#error").inner_text()
        assert OUTSIDE_TEXT not in page.content()
    shot(page, "07-forbidden")


def test_training_plots_eval_results_and_no_secrets(page, server, fx):
    page.goto(server.url + "/#/step?path=" + quote(str(fx.train)) + f"&exp={EXPERIMENT_ID}")
    page.wait_for_selector("#plots svg.chart")
    metrics = page.locator("#plots svg.chart")
    assert {metrics.nth(i).get_attribute("data-metric") for i in range(metrics.count())} >= {
        "loss",
        "learning_rate",
        "tokens_per_s",
    }
    loss = page.locator("#plots svg.chart[data-metric='loss']")
    assert loss.locator("path[data-label]").count() == 1
    # Observable Plot's axes: ticks with values and gridlines on both axes, the x axis labelled.
    assert loss.locator("g[aria-label='x-axis tick label'] text").count() >= 3
    assert loss.locator("g[aria-label='y-axis tick label'] text").count() >= 3
    assert loss.locator("g[aria-label='x-grid'] line").count() >= 3
    assert loss.locator("g[aria-label='y-grid'] line").count() >= 3
    assert "step" in (loss.locator("g[aria-label='x-axis label']").text_content() or "")
    # Hovering shows the value at the nearest logged step.
    box = loss.bounding_box()  # its size; the point is taken where the chart stands when hovered
    loss.hover(position={"x": box["width"] - 16, "y": box["height"] / 2})
    expect(loss.locator("text.readout")).to_contain_text("step ")
    # Log scale, for every chart of the page at once (these values are all positive).
    page.check("#metrics .chart-log")
    expect(loss).to_have_attribute("data-scale", "log")
    expect(page.locator("#plots svg.chart[data-metric='learning_rate']")).to_have_attribute("data-scale", "log")
    # Smoothing: the smoothed line over the raw one, drawn faint beneath it.
    page.select_option("#metrics .chart-smoothing", "0.9")
    expect(loss.locator("g.raw-lines path")).to_have_count(1)
    page.select_option("#metrics .chart-smoothing", "0")
    page.uncheck("#metrics .chart-log")
    expect(loss.locator("g.raw-lines path")).to_have_count(0)
    # A constant series (grad_norm 1.0) stays a flat line around its value: its smoothed float
    # noise (1e-16) is not stretched over the whole height.
    page.select_option("#metrics .chart-smoothing", "0.9")
    grad = page.locator("#plots svg.chart[data-metric='grad_norm'] g[aria-label='y-axis tick label'] text")
    expect(grad.first).to_be_attached()
    assert "1.00" in grad.all_text_contents(), grad.all_text_contents()
    page.select_option("#metrics .chart-smoothing", "0")
    shot(page, "08-training-plots")
    assert not page.errors, page.errors  # the CSP admits every chart (Plot's own <style> is not put in the page)
    page.goto(server.url + "/#/step?path=" + quote(str(fx.evaluate)))
    page.wait_for_selector("#results")
    assert "0.5" in page.locator("#results").inner_text()
    assert page.locator("#attempts tbody tr").count() == 2
    assert "<b>empty</b>" in page.locator("#attempts").inner_text()  # shown as text
    assert "v4-16 × 1 slice, 2 hosts: slice-0" in page.locator("#attempts tbody tr").first.inner_text()
    page.goto(server.url + "/#/step?path=" + quote(str(fx.raw)))
    page.wait_for_selector("#manifest")
    assert SECRET_VALUE not in page.content()


def test_corrupt_and_missing_records_render_as_such(page, server, fx):
    page.goto(server.url + "/#/step?path=" + quote(str(fx.corrupt)))
    page.wait_for_selector("#record-problem")
    assert "corrupt" in page.locator("#record-problem").inner_text()
    page.goto(server.url + "/#/experiment/broken-deadbeef")
    page.wait_for_selector("#corrupt")
    page.goto(server.url + "/#/step?path=" + quote(str(fx.missing)))
    page.wait_for_selector("#error")
    assert "HTTP 404" in page.locator("#error").inner_text()
    shot(page, "09-missing-step")


def test_token_shard_and_parquet_views(page, server, fx):
    page.goto(server.url + "/#/files?path=" + quote(str(fx.tokenize / "train/shard-00000.tokens.npy")))
    page.wait_for_selector("#viewer[data-kind='tokens'] .doc-text")
    first = page.locator("#documents .doc-text").first.inner_text()
    assert first == "Document 0: the quick brown fox jumps over lazy dog. <eos>"
    shot(page, "10-token-shard")
    page.click("#parent-link")  # up to train/, then up to the step's folder, which links to its page
    page.wait_for_selector("#viewer[data-kind='directory']")
    page.click("#parent-link")
    page.click("#step-link")
    page.wait_for_selector("#explain")
    assert "tokenize/docs-bbbb0002" in page.locator("h1").inner_text()
    page.goto(server.url + "/#/files?path=" + quote(str(fx.raw / "data/table.parquet")))
    page.wait_for_selector("#viewer[data-kind='parquet'] #rows tbody tr")
    assert page.locator("#rows tbody tr").count() == 25
    page.click("#next-page")
    page.wait_for_selector("#page-number:has-text('page 2')")
    assert page.locator("#rows tbody tr").first.locator("td").first.inner_text() == "doc-0025"
    assert not page.errors, page.errors
