"""The lineage graph in headless Chromium: every edge visible (never under a step), pan/zoom/fit, filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from marin_lab.browser.server import start_in_thread
from tests.integration.test_browser_e2e import chromium  # noqa: F401 - the shared Chromium fixture

pytestmark = pytest.mark.browser

PIPELINE = {  # a DAG whose skip edges used to be drawn underneath the steps between their ends
    "raw": [],
    "extract": ["raw"],
    "dedup": ["extract", "raw"],
    "quality": ["dedup"],
    "tokenized": ["quality", "extract"],
    "train": ["tokenized"],
    "evaluation": ["train", "tokenized", "quality"],
}

# Samples every edge's drawn path and reports points strictly inside a step's box (other than its ends).
HIDDEN_EDGES_JS = """() => {
  const boxes = [...document.querySelectorAll('#dag .node')].map(n => ({key: n.dataset.key,
    x: +n.dataset.x, y: +n.dataset.y, w: +n.dataset.w, h: +n.dataset.h}));
  const bad = [];
  for (const p of document.querySelectorAll('#dag path.edge')) {
    const len = p.getTotalLength(); const bb = p.getBBox();
    const near = boxes.filter(b => b.x < bb.x + bb.width && b.x + b.w > bb.x
                                   && b.y < bb.y + bb.height && b.y + b.h > bb.y);
    const samples = Math.ceil(len / 4);  // a point every 4 units: no step box is thinner than that
    for (let i = 0; i <= samples; i++) {
      const pt = p.getPointAtLength(len * i / samples);
      for (const b of near) {
        if (b.key === p.dataset.from || b.key === p.dataset.to) continue;
        if (pt.x > b.x + 1 && pt.x < b.x + b.w - 1 && pt.y > b.y + 1 && pt.y < b.y + b.h - 1)
          bad.push(`${p.dataset.from} -> ${p.dataset.to} passes under ${b.key}`);
      }
    }
  }
  return {edges: document.querySelectorAll('#dag path.edge').length,
          engine: document.querySelector('#dag').dataset.engine, bad: [...new Set(bad)]};
}"""


def write_experiment(prefix: Path, exp_id: str, deps: dict[str, list[str]], failed: set[str] = frozenset()) -> None:
    steps = []
    for name, parents in deps.items():
        out = prefix / name
        out.mkdir(parents=True, exist_ok=True)
        (out / ".executor_status").write_text(json.dumps({"status": "FAILED" if name in failed else "SUCCESS"}))
        steps.append({"name": name, "identity": name, "output_path": str(out), "fn": "x:y", "dependencies": parents})
    (prefix / "experiments").mkdir(parents=True, exist_ok=True)
    (prefix / "experiments" / f"{exp_id}.json").write_text(
        json.dumps({"schema": 1, "name": exp_id, "created": "2026-11-22T00:00:00Z", "steps": steps})
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("graph") / "store"
    write_experiment(prefix, "pipeline-00000001", PIPELINE, failed={"train"})
    with start_in_thread(str(prefix)) as running:
        yield running


def test_every_edge_is_drawn_and_none_passes_under_a_step(chromium, server):  # noqa: F811
    """Checked on the drawn SVG; the server's layout for big experiments: tests/unit/browser/test_graph_layout.py."""
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(60_000)
    page.goto(f"{server.url}/#/experiment/pipeline-00000001")
    page.wait_for_selector("body[data-ready='1'] #dag")
    found = page.evaluate(HIDDEN_EDGES_JS)
    assert found["engine"] == "dagre"
    assert found["edges"] == sum(len(v) for v in PIPELINE.values())
    assert found["bad"] == []
    page.close()


def test_fit_zoom_and_filter_by_name_and_status(chromium, server):  # noqa: F811
    page = chromium.new_page(viewport={"width": 1000, "height": 800})
    page.set_default_timeout(60_000)
    page.goto(f"{server.url}/#/experiment/pipeline-00000001")
    page.wait_for_selector("body[data-ready='1'] #dag")
    dag = page.locator("#dag")
    page.click("#graph-fit")
    fitted = [float(v) for v in dag.get_attribute("viewBox").split()]
    page.click("#graph-actual")
    actual = [float(v) for v in dag.get_attribute("viewBox").split()]
    assert fitted[2] > actual[2]  # fit shows the whole width: a wider view than 1:1 in a 1000 px page
    page.fill("#graph-search", "token")
    expect(page.locator("#graph-count")).to_have_text("1 of 7 steps match")
    assert page.locator("#dag .node.dim").count() == 6
    assert page.locator("#dag .node[data-key='tokenized']").get_attribute("class").split() == ["node", "SUCCESS"]
    assert page.locator("#steps tbody tr:not([hidden])").count() == 1
    page.fill("#graph-search", "")
    page.select_option("#graph-status", "FAILED")
    expect(page.locator("#graph-count")).to_have_text("1 of 7 steps match")
    assert page.locator("#steps tbody tr:not([hidden])").inner_text().startswith("train")
    page.close()


def _training_step(prefix: Path, identity: str, started: str, lr: float) -> None:
    out = prefix / identity
    out.mkdir(parents=True)
    (out / ".executor_info").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": "train/run",
                "identity": identity,
                "output_path": str(out),
                "status": "SUCCESS",
                "version": {"config": {"lr": lr}},
                "timings": {"started": started},
                "dependencies": [],
                "result": {"wandb": {"mode": "offline", "run_id": f"run-{lr}", "dir": f"{out}/wandb"}},
            }
        )
    )
    (out / ".executor_status").write_text(json.dumps({"status": "SUCCESS"}))
    (out / "wandb").mkdir()
    (out / "wandb" / "debug.log").write_text("offline run\n")
    (out / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 5.0 - s * lr, "time": 0}) + "\n" for s in range(6))
    )


def test_metrics_of_two_versions_on_one_chart_with_hover_values_and_the_wandb_run_linked(chromium, tmp_path):  # noqa: F811
    prefix = tmp_path / "store"
    _training_step(prefix, "train/run-aaaaaaaa", "2026-11-20T00:00:00Z", 0.1)
    _training_step(prefix, "train/run-bbbbbbbb", "2026-11-21T00:00:00Z", 0.3)
    with start_in_thread(str(prefix)) as running:
        page = chromium.new_page(viewport={"width": 1200, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(f"{running.url}/#/step?path={prefix}/train/run-bbbbbbbb")
        chart = page.locator("#plots svg.chart[data-metric='loss']")
        expect(chart).to_have_attribute("data-series", "2")
        assert page.locator("#overlay-legend .series-key").all_inner_texts() == ["this run", "train/run-aaaaaaaa"]
        # The point is taken where the chart is when the pointer gets there (Playwright waits for it
        # to stand still): a section drawn above it after a bounding box was read would move it away.
        box = chart.bounding_box()
        chart.hover(position={"x": box["width"] - 12, "y": box["height"] / 2})
        expect(chart.locator("text.readout")).to_have_text("step 5: this run 3.5, train/run-aaaaaaaa 4.5")
        # The W&B run is linked: an offline run to its files, with the step's breadcrumb kept.
        page.click("#wandb-link")
        expect(page.locator("#crumbs")).to_contain_text("train/run-bbbbbbbb")
        expect(page.locator("h1")).to_have_text(f"{prefix}/train/run-bbbbbbbb/wandb")
        page.close()


def test_the_last_run_on_the_graph_groups_by_prefix_and_a_selection_filters_the_table(chromium, tmp_path):  # noqa: F811
    """Each node: executed or reused, duration, bytes written, a failure's first line; groups collapse."""
    prefix = tmp_path / "store"
    deps = {
        "raw/a": [],
        "raw/b": [],
        "raw/c": [],
        "tokenize/a": ["raw/a"],
        "tokenize/b": ["raw/b"],
        "tokenize/c": ["raw/c"],
        "train": ["tokenize/a", "tokenize/b", "tokenize/c"],
    }
    steps = []
    for name, parents in deps.items():
        out = prefix / name
        out.mkdir(parents=True)
        if name == "tokenize/c":
            status = {"status": "FAILED", "duration_s": 2.0, "error": "ValueError: shard 3 has no <b>text</b> field"}
        else:  # raw/* ran in an earlier run (another driver): reused by this one
            status = {
                "status": "SUCCESS",
                "duration_s": 90.0,
                "files": 2,
                "bytes": 3 * 1024 * 1024,
                "driver": "host:1:old" if name.startswith("raw/") else "host:2:new",
            }
        (out / ".executor_status").write_text(json.dumps(status))
        steps.append({"name": name, "identity": name, "output_path": str(out), "fn": "x:y", "dependencies": parents})
    (prefix / "experiments").mkdir()
    (prefix / "experiments" / "overlay-00000001.json").write_text(
        json.dumps(
            {"schema": 1, "name": "overlay", "created": "2026-11-28T00:00:00Z", "driver": "host:2:new", "steps": steps}
        )
    )
    with start_in_thread(str(prefix)) as running:
        page = chromium.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(60_000)
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(f"{running.url}/#/experiment/overlay-00000001")
        page.wait_for_selector("body[data-ready='1'] #dag")
        node = page.locator("#dag .node[data-key='raw/a']")
        assert node.locator("text.meta").text_content() == "reused · 1 min 30 s · 3.0 MB"
        assert node.get_attribute("data-run") == "reused" and node.get_attribute("data-bytes") == str(3 * 1024 * 1024)
        assert page.locator("#dag .node[data-key='train'] text.meta").text_content() == "executed · 1 min 30 s · 3.0 MB"
        failed = page.locator("#dag .node[data-key='tokenize/c']")
        assert failed.locator("text.meta").text_content() == "ValueError: shard 3 has no <b>tex…"  # text, never markup
        assert "ValueError: shard 3 has no <b>text</b> field" in failed.locator("title").text_content()
        assert page.locator("#dag b").count() == 0

        # Shift-click selects (the table shows only the selection); Space on a focused node too.
        page.locator("#dag .node[data-key='train']").click(modifiers=["Shift"])
        expect(page.locator("#graph-count")).to_have_text("1 selected · 1 of 7 steps match")
        assert page.locator("#steps tbody tr:not([hidden])").count() == 1
        page.locator("#dag .node[data-key='raw/b']").focus()
        page.keyboard.press(" ")
        expect(page.locator("#graph-count")).to_have_text("2 selected · 2 of 7 steps match")
        assert "selected" in page.locator("#dag .node[data-key='raw/b']").get_attribute("class").split()
        page.click("#graph-clear")
        expect(page.locator("#graph-count")).to_have_text("")
        assert page.locator("#steps tbody tr:not([hidden])").count() == 7

        # Group by name prefix: raw/* and tokenize/* become one node each, with the worst status.
        page.check("#graph-group")
        expect(page.locator("#dag .node")).to_have_count(3)
        raw = page.locator("#dag .node[data-key='group:raw']")
        assert raw.locator("text.meta").text_content() == "3 steps · 4 min 30 s · 9.0 MB"
        tok = page.locator("#dag .node[data-key='group:tokenize']")
        assert tok.get_attribute("data-status") == "FAILED"
        assert "tokenize/c: ValueError" in tok.locator("title").text_content()
        assert page.locator("#dag path.edge").count() == 2  # raw -> tokenize -> train, each once
        tok.click(modifiers=["Shift"])  # a group selects its members
        expect(page.locator("#graph-count")).to_have_text("3 selected · 3 of 7 steps match")
        page.click("#graph-clear")
        raw.click()  # a click opens the group
        expect(page.locator("#dag .node")).to_have_count(5)
        page.locator("#dag .node[data-key='raw/c']").focus()
        page.keyboard.press("Enter")  # Enter opens a step's page
        expect(page.locator("h1")).to_contain_text("raw/c")
        assert not errors, errors
        page.close()
