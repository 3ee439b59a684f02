"""The browser while work runs, in headless Chromium: statuses and the log tail change without a reload."""

from __future__ import annotations

import threading
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from marin_lab.browser.server import start_in_thread
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from tests.integration.test_browser_e2e import chromium  # noqa: F401 - the shared Chromium fixture
from tests.waiting import wait_for_status
from tests.watch_steps import ChattyConfig, chatty

pytestmark = pytest.mark.browser


@pytest.fixture
def running_step(tmp_path, monkeypatch):
    """A step that runs until released, under a prefix with its experiment record written."""
    monkeypatch.setenv("MARIN_STATUS_HEARTBEAT_S", "0.2")
    release, finish = tmp_path / "release", tmp_path / "finish"
    prefix = str(tmp_path / "store")
    first = ExecutorStep("live/first", chatty, ChattyConfig(this_output_path(), versioned("first")))
    step = ExecutorStep(
        "live/slow",
        chatty,
        ChattyConfig(this_output_path(), versioned("slow"), release_path=str(release), finish_path=str(finish)),
    )
    executor = Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script="experiments/live.py")
    Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script="experiments/live.py").run(
        [first]
    )  # reused by the run below
    output_path = executor.plan([first, step]).steps[1].output_path
    done: dict = {}
    thread = threading.Thread(target=lambda: done.update(report=executor.run([first, step])), daemon=True)
    thread.start()
    yield prefix, output_path, release, finish, executor
    release.touch()
    finish.touch()
    thread.join(timeout=120)


def test_graph_and_step_page_follow_a_run_without_reload(chromium, running_step):  # noqa: F811
    prefix, output_path, release, finish, executor = running_step
    wait_for_status(output_path, "RUNNING")
    with start_in_thread(prefix) as server:
        context = chromium.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.set_default_timeout(60_000)
        exp_id = executor.executor_info_path.rsplit("/", 1)[1].removesuffix(".json")
        page.goto(f"{server.url}/#/experiment/{quote(exp_id)}")
        slow = page.locator("#dag .node[data-key^='live/slow']")
        slow.wait_for()
        assert slow.get_attribute("data-status") == "RUNNING"
        first_row = page.locator("#steps tr[data-key^='live/first'] .run-cell")
        assert "reused" in first_row.inner_text()

        step_page = context.new_page()
        step_page.set_default_timeout(60_000)
        step_page.goto(f"{server.url}/#/step?path={quote(output_path)}&exp={quote(exp_id)}")
        log = step_page.locator("#log")
        expect(log).to_contain_text("waiting for release", timeout=60_000)
        assert "released" not in log.inner_text()
        step_page.evaluate("window.stillTheSamePage = true")

        release.touch()
        # The log grows in place while the step still runs; then the page turns to SUCCESS by itself.
        expect(log).to_contain_text("released", timeout=60_000)
        assert step_page.locator("h1 .badge").get_attribute("data-status") == "RUNNING"
        finish.touch()
        expect(step_page.locator("h1 .badge")).to_have_attribute("data-status", "SUCCESS", timeout=60_000)
        assert step_page.evaluate("window.stillTheSamePage") is True
        page.wait_for_selector("#dag .node[data-key^='live/slow'][data-status='SUCCESS']")
        run = page.locator("#steps tr[data-key^='live/slow'] .run-cell").inner_text()
        assert "executed in this run" in run and " s" in run
        # A deep link from the step (its whole log) keeps the way back: experiment / step / file.
        step_page.click("text=open the whole log")
        crumbs = step_page.locator("#crumbs")
        expect(crumbs).to_contain_text("logs/attempt-1.log")
        assert [a.get_attribute("href") for a in crumbs.locator("a").all()][1:] == [
            f"#/experiment/{quote(exp_id)}",
            f"#/step?path={quote(output_path, safe='')}&exp={quote(exp_id)}",
        ]
        context.close()
