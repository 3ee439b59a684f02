"""What a reader sees first, in headless Chromium: a training step's train and validation loss on
one chart above its record, and the lineage graph opened on its last steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from marin_lab.browser.server import start_in_thread
from tests.integration.test_browser_e2e import chromium  # noqa: F401 - the shared Chromium fixture
from tests.integration.test_browser_graph import write_experiment

pytestmark = pytest.mark.browser

EVAL_EVERY = 5


def _training_step(out: Path) -> None:
    out.mkdir(parents=True)
    rows = [
        {"step": s, "loss": 5.0 - 0.1 * s, "learning_rate": 1e-3, "time": 0}
        | ({"eval/valid/loss": 5.5 - 0.05 * s} if s % EVAL_EVERY == 0 else {})
        for s in range(1, 21)
    ]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    record = {
        "schema": 1,
        "name": "train/tiny",
        "identity": "train/tiny-aaaa0001",
        "output_path": str(out),
        "status": "SUCCESS",
        "version": {"config": {"lr": 1e-3}},
        # A long result and config: the raw JSON that once stood between the header and the charts.
        "result": {f"field_{i}": i for i in range(60)},
        "config": {f"option_{i}": i for i in range(60)},
        "dependencies": [],
        "status_history": [{"status": "SUCCESS", "time": "2026-12-01T00:00:00Z"}],
    }
    (out / ".executor_info").write_text(json.dumps(record))
    (out / ".executor_status").write_text(json.dumps({"status": "SUCCESS"}))


def test_train_and_validation_loss_on_one_chart_above_the_record(chromium, tmp_path):  # noqa: F811
    out = tmp_path / "store" / "train" / "tiny-aaaa0001"
    _training_step(out)
    with start_in_thread(str(tmp_path / "store")) as running:
        page = chromium.new_page(viewport={"width": 1200, "height": 900})
        page.set_default_timeout(60_000)
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(f"{running.url}/#/step?path={out}")
        chart = page.locator("#plots svg.chart[data-metric='loss']")
        expect(chart).to_have_attribute("data-series", "2")
        labels = [p.get_attribute("data-label") for p in chart.locator("path[data-label]").all()]
        assert labels == ["this run · train", "this run · validation valid"]
        assert chart.locator("path[data-label='this run · validation valid']").get_attribute("data-points") == "4"
        assert page.locator("#loss-legend .series-key").all_inner_texts() == labels
        assert page.locator("#plots .plot .title").first.inner_text().startswith("loss: train and validation")
        # Above the record (its result, status history and config), and on the first screen.
        top = chart.bounding_box()["y"]
        for below in ("pre.result", "#status-history", "h2:has-text('Config')"):
            assert top < page.locator(below).bounding_box()["y"], below
        assert top + chart.bounding_box()["height"] < 900
        # Under the cursor at the last step: both losses.
        box = chart.bounding_box()
        chart.hover(position={"x": box["width"] - 16, "y": box["height"] / 2})
        readout = "step 20: this run · train 3, this run · validation valid 4.5"
        expect(chart.locator("text.readout")).to_have_text(readout)
        assert not errors, errors
        page.close()


CHAIN = {f"stage{i:02d}": [f"stage{i - 1:02d}"] if i else [] for i in range(10)}
WIDE = CHAIN | {"train": ["stage09"], "evaluation": ["train"], "export": ["train"]}

# Which drawn steps lie wholly inside the SVG's view.
VISIBLE_JS = """() => {
  const [x, y, w, h] = document.querySelector('#dag').getAttribute('viewBox').split(' ').map(Number);
  return [...document.querySelectorAll('#dag .node')].filter(n =>
    +n.dataset.x >= x && +n.dataset.x + +n.dataset.w <= x + w &&
    +n.dataset.y >= y && +n.dataset.y + +n.dataset.h <= y + h).map(n => n.dataset.key).sort();
}"""


def test_the_graph_opens_fitted_on_its_last_layer(chromium, tmp_path):  # noqa: F811
    """A DAG wider than the page opens on the steps it ends in, not its first ones nor shrunk whole."""
    prefix = tmp_path / "store"
    write_experiment(prefix, "wide-00000001", WIDE)
    with start_in_thread(str(prefix)) as running:
        page = chromium.new_page(viewport={"width": 1000, "height": 800})
        page.set_default_timeout(60_000)
        page.goto(f"{running.url}/#/experiment/wide-00000001")
        page.wait_for_selector("body[data-ready='1'] #dag[data-opened='last-layer']")
        visible = page.evaluate(VISIBLE_JS)
        assert {"evaluation", "export", "train"} <= set(visible)
        assert "stage00" not in visible  # not shrunk to show everything: names stay readable
        page.click("#graph-fit")
        assert "stage00" in page.evaluate(VISIBLE_JS)
        page.click("#graph-last")
        assert "stage00" not in page.evaluate(VISIBLE_JS) and "evaluation" in page.evaluate(VISIBLE_JS)
        page.close()
