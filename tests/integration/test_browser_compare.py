"""The compare view in headless Chromium: several runs' metrics overlaid on one chart.

An experiment with a data step and three training steps (metrics.jsonl of 20, 30 and 25 logged steps,
an eval loss every 10, one corrupt line, one secret-named key) is made here; the page must draw one
curve per chosen run with all its points, show each run's value under the cursor, and restore a
choice from its address.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from marin_lab.browser.server import start_in_thread

# The shared Chromium and page fixtures (page uses this module's server).
from tests.integration.test_browser_e2e import chromium, page, shot  # noqa: F401

pytestmark = pytest.mark.browser

EXP_ID = "compare-0badc0de"
RUNS = {  # name -> (identity hash, logged steps, precision policy, compute dtype, seed)
    "train/fp32": ("aaaa0001", 20, {"matmul": "compute"}, "float32", 0),
    "train/fp8": ("bbbb0002", 30, {"matmul": "fp8"}, "bfloat16", 0),
    "train/fp8-adam16": ("cccc0003", 25, {"matmul": "fp8", "optimizer_state": "float16_scaled"}, "bfloat16", 1),
}


def loss_of(run_index: int, step: int) -> float:
    return round(6.0 - 0.1 * step - 0.25 * run_index, 4)


def _write(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


@pytest.fixture(scope="module")
def prefix(tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("compare")
    data = prefix / "tokenized" / "docs-dddd0000"
    _write(data / ".executor_info", {"name": "tokenized/docs", "identity": "tokenized/docs-dddd0000", "config": {}})
    _write(data / ".executor_status", {"status": "SUCCESS"})
    steps = [
        {"name": "tokenized/docs", "identity": "tokenized/docs-dddd0000", "output_path": str(data), "dependencies": []}
    ]
    for k, (name, (short, n, precision, compute, seed)) in enumerate(RUNS.items()):
        identity = f"{name}-{short}"
        out = prefix / identity
        rows = [
            {"step": s, "loss": loss_of(k, s), "learning_rate": 1e-3, "WANDB_API_KEY": 123}
            | ({"eval/valid/loss": loss_of(k, s) + 0.5} if s % 10 == 0 else {})
            for s in range(n)
        ]
        lines = [json.dumps(r) for r in rows]
        if k == 1:
            lines.insert(5, '{"step": 4, "loss": ')  # a torn line: skipped and counted
        (out).mkdir(parents=True)
        (out / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        _write(
            out / ".executor_info",
            {
                "name": name,
                "identity": identity,
                "output_path": str(out),
                "config": {"compute_dtype": compute, "param_dtype": "float32", "seed": seed, "precision": precision},
            },
        )
        _write(out / ".executor_status", {"status": "SUCCESS"})
        steps.append(
            {"name": name, "identity": identity, "output_path": str(out), "dependencies": ["tokenized/docs-dddd0000"]}
        )
    _write(
        prefix / "experiments" / f"{EXP_ID}.json",
        {"name": "compare", "created": "2026-11-23T00:00:00Z", "steps": steps},
    )
    return prefix


@pytest.fixture(scope="module")
def server(prefix):
    with start_in_thread(str(prefix)) as running:
        yield running


def _curves(tab) -> dict[str, int]:
    lines = tab.locator("#compare-chart path[data-run]")
    return {
        lines.nth(i).get_attribute("data-run"): int(lines.nth(i).get_attribute("data-points"))
        for i in range(lines.count())
    }


def _hover_step(tab, step: int, last_step: int) -> None:
    chart = tab.locator("#compare-chart svg.chart")
    box = chart.bounding_box()
    # the plotting area's pixels, from the chart (its width is the rendered one: no scaling here)
    left = float(chart.get_attribute("data-plot-left"))
    right = box["width"] - float(chart.get_attribute("data-plot-right"))
    tab.mouse.move(box["x"] + left + step / last_step * (box["width"] - left - right), box["y"] + box["height"] / 2)


def test_three_runs_overlaid_with_hover_values_and_a_shareable_address(page, server):  # noqa: F811
    page.goto(server.url + f"/#/experiment/{EXP_ID}")
    page.click("#compare-link")
    page.wait_for_selector("body[data-compare-ready='1']")
    identities = [f"{name}-{short}" for name, (short, *_rest) in RUNS.items()]
    assert _curves(page) == dict(zip(identities, (20, 30, 25), strict=True))  # the torn line is skipped
    assert page.locator("#compare-runs tbody tr").count() == 3  # the data step logged no metrics
    table = page.locator("#compare-runs").inner_text()
    assert "compute bfloat16 · matmul fp8 · adam state float16_scaled · seed 1" in table and "cccc0003" in table
    assert "1 unreadable lines skipped" in page.locator("#compare-notes").inner_text()
    options = page.locator("#compare-metric option").all_inner_texts()
    assert options[:2] == ["loss", "eval/valid/loss"] and "WANDB_API_KEY" not in options and "step" not in options

    last = page.locator("#last-values tbody tr")  # before hovering: each run's last logged value
    assert [row.locator("td").all_inner_texts()[1:] for row in last.all()] == [
        [str(loss_of(k, n - 1)), str(n - 1)] for k, (_, n, *_rest) in enumerate(RUNS.values())
    ]
    _hover_step(page, 12, last_step=29)
    rows = page.locator("#hover-values tbody tr")
    rows.first.wait_for()
    assert rows.count() == 3
    for k in range(3):
        cells = rows.nth(k).locator("td").all_inner_texts()
        assert float(cells[1]) == loss_of(k, 12) and cells[2] == "12"
        assert list(RUNS)[k] in cells[0]
    shot(page, "compare-three-runs")

    # Relative to the fp32 run: each run in % of fp32's value at the same step (fp32 logged steps 0-19).
    page.select_option("#compare-vs", identities[0])
    page.wait_for_function(
        "() => document.querySelector('#compare-chart svg').dataset.metric.startsWith('loss: % vs train/fp32')"
    )
    assert _curves(page) == dict.fromkeys(identities, 20)
    cells = page.locator("#last-values tbody tr").nth(1).locator("td").all_inner_texts()
    assert cells[1].endswith("%") and abs(float(cells[1][:-1]) - 100 * (loss_of(1, 19) / loss_of(0, 19) - 1)) < 1e-3
    assert float(cells[2]) == loss_of(1, 19) and cells[3] == "19"
    # A log scale cannot show the base run's own 0%: the chart stays linear and says why.
    page.check("#compare-log")
    page.wait_for_function("() => document.querySelector('#compare-chart svg').dataset.logRefused !== undefined")
    assert page.locator("#compare-chart svg.chart").get_attribute("data-scale") == "linear"
    assert "log scale off" in page.locator("#compare-chart .chart-note").inner_text()
    page.uncheck("#compare-log")
    page.select_option("#compare-vs", "")

    # Drop the fp32 run, plot the eval loss smoothed: the address follows, and opening it restores the choice.
    page.locator(f"#compare-runs input[data-run='{identities[0]}']").uncheck()
    page.select_option("#compare-metric", "eval/valid/loss")
    page.select_option("#compare-smooth", "0.6")
    page.wait_for_function(
        "() => document.querySelectorAll('#compare-chart path[data-run]').length === 2 "
        "&& document.querySelector('#compare-chart svg').dataset.metric === 'eval/valid/loss' "
        "&& location.hash.includes('smooth=0.6')"
    )
    shared = page.url
    assert "metric=eval%2Fvalid%2Floss" in shared and identities[0].replace("/", "%2F") not in shared
    page.goto(server.url + "/#/")
    page.wait_for_selector("#experiments")
    page.goto(shared)
    page.wait_for_selector("body[data-compare-ready='1']")
    assert _curves(page) == {identities[1]: 3, identities[2]: 3}
    assert page.locator("#compare-metric").input_value() == "eval/valid/loss"
    assert page.locator("#compare-smooth").input_value() == "0.6"
    raw = [loss_of(1, s) + 0.5 for s in (0, 10, 20)]  # run 1's eval loss; smoothed as TensorBoard does
    avg = 0.0
    for value in raw:
        avg = 0.6 * avg + 0.4 * value
    cells = page.locator("#last-values tbody tr").first.locator("td").all_inner_texts()
    assert abs(float(cells[1]) - avg / (1 - 0.6**3)) < 1e-4 and float(cells[2]) == raw[-1] and cells[3] == "20"
    assert [c.is_checked() for c in page.locator("#compare-runs input.run-choice").all()] == [False, True, True]

    # A run the experiment does not have is named, not silently dropped.
    page.goto(server.url + f"/#/compare/{EXP_ID}?run=train%2Fnope-00000000&run=train%2Ffp8")
    page.wait_for_selector("#compare-unknown")
    page.wait_for_selector("body[data-compare-ready='1']")
    assert "train/nope-00000000" in page.locator("#compare-unknown").inner_text()
    assert _curves(page) == {identities[1]: 30}  # a run can be named by its step name, too
    assert not page.errors, page.errors
