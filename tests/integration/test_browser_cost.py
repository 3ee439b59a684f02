"""The cost in headless Chromium: the experiment page's Cost section and a step page's cost line say
what `marin-lab status --cost` prints for the same prefix, a hostile step name stays text, and the
page logs no console error."""

from __future__ import annotations

import pytest

from marin_lab.browser.server import start_in_thread
from marin_lab.cli import main as cli_main
from tests.cost_fixtures import EXPECTED_STEPS, EXPECTED_TOTAL, HOSTILE, build_costed_prefix
from tests.integration.test_browser_e2e import chromium, wait_ready  # noqa: F401 (a fixture)

pytestmark = pytest.mark.browser


@pytest.fixture
def costed_prefix(tmp_path):
    return build_costed_prefix(tmp_path)


def test_the_cost_section_shows_what_the_cli_prints(chromium, costed_prefix, capsys):  # noqa: F811
    assert cli_main(["status", str(costed_prefix), "--cost"]) == 0
    cli_lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert EXPECTED_TOTAL in cli_lines
    with start_in_thread(str(costed_prefix)) as server:
        context = chromium.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.set_default_timeout(15_000)
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.goto(f"{server.url}/#/experiment/costed-abcdef12")
        wait_ready(page)
        page.wait_for_selector("body[data-cost-ready='1']")
        assert page.inner_text("#cost-total") == EXPECTED_TOTAL
        assert page.inner_text("#cost-prices") == cli_lines[0]
        rows = page.locator("#cost-table tbody tr")
        shown = {
            rows.nth(i).locator("td").nth(0).inner_text(): rows.nth(i).locator("td").nth(3).inner_text()
            for i in range(rows.count())
        }
        assert shown == EXPECTED_STEPS  # the hostile name included, as text
        assert page.evaluate("window.__xss") is None
        page.goto(f"{server.url}/#/step?path={costed_prefix / 'train/big-11111111'}")
        wait_ready(page)
        assert (
            page.locator("dl.kv dd", has_text="accelerator-hours").inner_text() == EXPECTED_STEPS["train/big-11111111"]
        )
        assert errors == [], errors
        context.close()
    assert HOSTILE in EXPECTED_STEPS
