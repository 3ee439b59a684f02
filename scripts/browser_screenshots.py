"""The screenshots in docs/browser.md, made from the test fixtures in headless Chromium.

    .venv/bin/python scripts/browser_screenshots.py      # writes docs/images/browser_*.png

Needs the test extra (Playwright) and Chromium (`make system-deps`).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from browser_fixtures import EXPERIMENT_ID, build_prefix  # noqa: E402

from marin_lab.browser.server import start_in_thread  # noqa: E402
from tests.integration.test_browser_e2e import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

OUT = ROOT / "docs" / "images"


def overlay_experiment(prefix: Path) -> str:
    """A small pipeline with reused, executed and failed steps under shared name prefixes."""
    deps = {
        "raw/en": [],
        "raw/de": [],
        "raw/fr": [],
        "documents/en": ["raw/en"],
        "documents/de": ["raw/de"],
        "documents/fr": ["raw/fr"],
        "tokenized/en": ["documents/en"],
        "tokenized/de": ["documents/de"],
        "tokenized/fr": ["documents/fr"],
        "train/tiny": ["tokenized/en", "tokenized/de", "tokenized/fr"],
    }
    steps = []
    for i, (name, parents) in enumerate(deps.items()):
        out = prefix / name
        out.mkdir(parents=True)
        if name == "tokenized/fr":
            status = {
                "status": "FAILED",
                "duration_s": 4.2,
                "error": "TokenizerError: shard 2 line 17: text is not a string",
            }
        elif name == "train/tiny":
            status = {"status": "DEP_FAILED"}
        else:
            status = {
                "status": "SUCCESS",
                "duration_s": 20.0 + 37 * i,
                "files": 4 + i,
                "bytes": (3 + i) * 1024**2,
                "driver": "host:1:earlier" if name.startswith("raw/") else "host:2:latest",
            }
        (out / ".executor_status").write_text(json.dumps(status))
        steps.append(
            {
                "name": name,
                "identity": name,
                "output_path": str(out),
                "fn": "experiments.languages:step",
                "dependencies": parents,
            }
        )
    (prefix / "experiments").mkdir(exist_ok=True)
    exp_id = "languages-0000beef"
    (prefix / "experiments" / f"{exp_id}.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": "languages",
                "created": "2026-11-28T00:00:00Z",
                "driver": "host:2:latest",
                "steps": steps,
            }
        )
    )
    return exp_id


def main() -> None:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fx = build_prefix(Path(tmp) / "fixture")
        exp_id = overlay_experiment(fx.prefix)
        with start_in_thread(str(fx.prefix)) as server, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{server.url}/#/step?path={quote(str(fx.train))}&exp={EXPERIMENT_ID}")
            page.wait_for_selector("#plots svg.chart")
            page.select_option("#metrics .chart-smoothing", "0.8")
            loss = page.locator("#plots svg.chart[data-metric='loss']")
            box = loss.bounding_box()
            page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
            page.locator("#metrics").screenshot(path=str(OUT / "browser_step_charts.png"))
            page.goto(f"{server.url}/#/experiment/{exp_id}")
            page.wait_for_selector("body[data-ready='1'] #dag")
            page.locator("#dag").screenshot(path=str(OUT / "browser_graph_overlay.png"))
            page.check("#graph-group")
            page.wait_for_selector("#dag .node.group")
            page.locator("#dag").screenshot(path=str(OUT / "browser_graph_grouped.png"))
            browser.close()
    for name in ("browser_step_charts.png", "browser_graph_overlay.png", "browser_graph_grouped.png"):
        print(OUT / name)


if __name__ == "__main__":
    main()
