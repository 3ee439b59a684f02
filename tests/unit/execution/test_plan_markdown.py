"""A Markdown plan is safe to post: whatever an experiment's values hold, the rendered plan has its
table and text as built, shows each value exactly, and carries no HTML of its own.

Rendered with markdown-it (CommonMark plus GitHub's table rule, which splits cells on `|` before
reading code spans, as GitHub does), then read back with the standard HTML parser.
"""

from __future__ import annotations

import dataclasses
import json
from html.parser import HTMLParser

from markdown_it import MarkdownIt

from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from marin_lab.execution.review.plan_report import to_markdown
from tests.executor_steps import WriteConfig, write_text

HOSTILE = (
    "<img src=x onerror=alert(1)> <!-- hidden --> | `tick` ``two`` a\\|b [ref]: http://evil.example\n"
    "# heading\r\n- item &amp; &lt; ![pixel](http://evil.example/p.png) <details><summary>x</summary>"
)
ALLOWED_TAGS = {"h2", "h3", "p", "table", "thead", "tbody", "tr", "th", "td", "code", "strong", "ul", "li"}


def one_line(text: str) -> str:
    return text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


class Rendered(HTMLParser):
    """The tags, table rows (cell texts) and list items of rendered HTML; comments are kept to be refused."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.comments: list[str] = []
        self.rows: list[list[str]] = []
        self.items: list[str] = []
        self.paragraphs: list[str] = []
        self._cell: list[str] | None = None
        self._text: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag in ("li", "p"):
            self._text = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "li" and self._text is not None:
            self.items.append("".join(self._text))
            self._text = None
        elif tag == "p" and self._text is not None:
            self.paragraphs.append("".join(self._text))
            self._text = None

    def handle_data(self, data):
        for sink in (self._cell, self._text):
            if sink is not None:
                sink.append(data)

    def handle_comment(self, data):
        self.comments.append(data)


def render(markdown: str) -> Rendered:
    return Rendered(MarkdownIt("commonmark").enable("table").render(markdown))


def test_hostile_values_in_every_field_are_shown_exactly_and_carry_no_html():
    prefix = "/data/pre`fix|<b>"
    pinned = "pinned|`odd`/<b>x</b>\\|\nnext"
    report = {
        "script": "experiments/a`b|<i>.py",
        "prefix": prefix,
        "backend": "local",
        "counts": {"run": 2},
        "totals": {"tokens": 10},
        "steps": [
            {
                "name": "raw/a",
                "identity": "raw/a-1234abcd",
                "action": "run",
                "reason": HOSTILE,
                "changes": [HOSTILE],
                "output_path": f"{prefix}/{pinned}",
                "resources": {"label": HOSTILE},
                "estimate": {HOSTILE: 1.5},
            },
            {
                "name": "raw/b",
                "identity": "raw/b-1234abcd",
                "action": "run",
                "reason": "no output yet",
                "changes": [],
                "output_path": f"{prefix}/raw/b-1234abcd",
                "resources": {},
                "estimate": None,
            },
        ],
    }
    page = render(to_markdown(report))
    assert page.tags <= ALLOWED_TAGS and not page.comments, (page.tags, page.comments)
    header, *rows = page.rows
    assert header == ["Action", "Step", "Why", "Resources", "Estimate"]
    assert [len(r) for r in rows] == [5, 5]  # no cell split by a value's `|`, no row ended by its newline
    assert rows[0] == [
        "run",
        f"raw/a-1234abcd (at {one_line(pinned)})",
        one_line(HOSTILE),
        f"label={one_line(HOSTILE)}",
        f"{one_line(HOSTILE)}=1.5",
    ]
    assert rows[1] == ["run", "raw/b-1234abcd", "no output yet", "", ""]
    assert page.items == [one_line(HOSTILE)]  # a list item: no heading, quote or nested list of its own
    assert page.paragraphs[0] == f"Prefix {prefix}, backend local. Output paths are {{prefix}}/{{step}}."
    assert page.paragraphs[-1].startswith(f"raw/a-1234abcd (run: {one_line(HOSTILE)}")


@dataclasses.dataclass(frozen=True)
class EstimatedConfig(WriteConfig):
    def plan_estimate(self) -> dict:
        return {"note": HOSTILE, "tokens": 7}


def test_a_pinned_path_with_a_pipe_keeps_the_table_and_the_json_plan_stays_exact(tmp_path, capsys):
    prefix = str(tmp_path / "store")
    pinned = f"{prefix}/pinned|`odd` <b>dir</b>"
    step = ExecutorStep(
        "raw/a", write_text, EstimatedConfig(this_output_path(), versioned(HOSTILE)), override_output_path=pinned
    )
    for fmt in ("markdown", "json"):
        Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run([step], dry_run=True, plan_format=fmt)
    markdown, plan = capsys.readouterr().out.split("\n{", 1)
    page = render(markdown)
    assert page.tags <= ALLOWED_TAGS and not page.comments
    (row,) = page.rows[1:]
    assert row[1].endswith("(at pinned|`odd` <b>dir</b>)") and row[4] == f"note={one_line(HOSTILE)}, tokens=7"
    plan = json.loads("{" + plan)
    assert plan["steps"][0]["output_path"] == pinned and plan["steps"][0]["estimate"]["note"] == HOSTILE
