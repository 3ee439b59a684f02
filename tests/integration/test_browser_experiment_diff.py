"""Experiments side by side in headless Chromium: the runs of one script grouped with what differs,
two experiments (of two scripts) compared step by step, and their training runs overlaid."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from marin_lab.browser.server import start_in_thread
from tests.integration.test_browser_e2e import chromium  # noqa: F401 - the shared Chromium fixture
from tests.unit.browser.test_experiment_diff import pipeline, write

pytestmark = pytest.mark.browser

RECORDS = {  # id -> (script, created, learning rate, identity tag of the training step)
    "sweep-00000001": ("experiments/sweep.py", "2026-12-01T00:00:00Z", 3e-3, "b0000001"),
    "sweep-00000002": ("experiments/sweep.py", "2026-12-02T00:00:00Z", 1e-3, "b0000002"),
    "other-00000001": ("experiments/other.py", "2026-12-04T00:00:00Z", 3e-4, "b0000009"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("diff") / "store"
    for exp_id, (script, created, lr, tag) in RECORDS.items():
        write(prefix, exp_id, script, created, pipeline(lr, tag))
        (prefix / f"checkpoints/nano-{tag}" / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "loss": 5.0 - lr * 100 * s}) + "\n" for s in range(1, 11))
        )
    with start_in_thread(str(prefix)) as running:
        yield running


def test_sibling_runs_grouped_compared_across_scripts_and_overlaid(chromium, server):  # noqa: F811
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(60_000)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)

    # The list: the two records of sweep.py under their script, the newer saying what changed.
    page.goto(server.url + "/#/")
    page.wait_for_selector("body[data-ready='1'] #experiments")
    rows = page.locator("#experiments tbody tr")
    assert [r.get_attribute("data-id") or r.get_attribute("data-script") for r in rows.all()] == [
        "other-00000001",
        "experiments/sweep.py",
        "sweep-00000002",
        "sweep-00000001",
    ]
    assert "2 versions of this script" in rows.nth(1).inner_text()
    differs = page.locator("tr[data-id='sweep-00000002'] td.differs")
    assert "checkpoints/nano: optimizer.learning_rate: 0.003 -> 0.001" in differs.inner_text()
    assert "1 step changed through its dependencies" in differs.inner_text()
    assert page.locator("tr[data-id='sweep-00000001'] td.differs").inner_text() == ""  # the first has none before it

    # Its link opens the comparison of the two: the changed field, the step moved by its dependency.
    differs.locator("a.diff-link").click()
    page.wait_for_selector("#diff-steps")
    assert page.locator("#diff-a").input_value() == "sweep-00000001"
    assert page.locator("#diff-b").input_value() == "sweep-00000002"
    train = page.locator("#diff-steps tr[data-step='checkpoints/nano']")
    assert train.get_attribute("data-change") == "changed"
    assert train.locator(".field").all_inner_texts() == ["optimizer.learning_rate: 0.003 -> 0.001"]
    assert page.locator("#diff-steps tr[data-step='evaluation/nano']").get_attribute("data-change") == "upstream"
    assert page.locator("#diff-same summary").inner_text() == "1 step the same in both"
    assert "Two runs of one script." in page.locator("#app").inner_text()

    # Across scripts: B becomes the other script's experiment.
    page.select_option("#diff-b", "other-00000001")
    expect(page.locator("#diff-steps tr[data-step='checkpoints/nano'] .field")).to_have_text(
        "optimizer.learning_rate: 0.003 -> 0.0003"
    )
    assert "Runs of two scripts." in page.locator("#app").inner_text()

    # Their training runs overlaid on one chart, each named by its experiment.
    page.click("#diff-overlay")
    page.wait_for_selector("body[data-compare-ready='1']")
    assert "with=other-00000001" in page.url
    assert [r.get_attribute("data-experiment") for r in page.locator("#compare-runs tbody tr").all()] == [
        "sweep-00000001",
        "other-00000001",
    ]
    curves = page.locator("#compare-chart path[data-run]")
    expect(curves).to_have_count(2)
    assert [c.get_attribute("data-label") for c in curves.all()] == [
        "sweep · checkpoints/nano · b0000001",
        "other · checkpoints/nano · b0000009",
    ]
    # The address keeps the other experiment: opened again, the same two runs.
    shared = page.url
    page.goto(server.url + "/#/")
    page.wait_for_selector("#experiments")
    page.goto(shared)
    page.wait_for_selector("body[data-compare-ready='1']")
    expect(page.locator("#compare-chart path[data-run]")).to_have_count(2)
    assert not errors, errors
    page.close()
