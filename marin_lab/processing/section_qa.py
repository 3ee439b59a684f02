"""An instruction task made from real manuals: questions about their sections' titles.

For every heading of an HTML manual (h1-h4) followed by a paragraph of prose, the step writes
instruction records (docs: marin_lab/processing/instruction.py) such as

    {"id": "python-docs/library/ast.html#3/title",
     "prompt": "Here is how a section of the Python 3.11 manual begins:\\n\\n<paragraph>\\n\\nWhat is the section's title?",
     "response": "Node classes"}
    {"id": "python-docs/library/ast.html#3/manual",
     "prompt": "Which manual has a section titled \\"Node classes\\"?", "response": "The Python 3.11 manual."}

Answers are determined by the prompt and the manual (a title is usually named in its first
paragraph; the manuals' vocabularies differ), so a model can learn the task from examples and be
scored on sections it never saw. Record ids name the page and heading, so the split (a hash of
the id) keeps every question about one section on the same side.
"""  # noqa: E501 (an example record, one JSON object a line)

from __future__ import annotations

import dataclasses
import logging
import os
import re

from marin_lab.io import fs as mfs
from marin_lab.io.documents import write_documents
from marin_lab.processing.errors import ProcessingError
from marin_lab.versioning import field_hints

logger = logging.getLogger(__name__)

__all__ = ["SectionQaConfig", "ManualSource", "make_section_qa", "sections_of_html"]

TASKS = ("title", "manual")
_SPACE = re.compile(r"\s+")
_NUMBERING = re.compile(r"^(?:[A-Z]|\d+)(?:\.\d+)*\.?\s+")


@dataclasses.dataclass(frozen=True)
class ManualSource:
    """One HTML manual."""

    name: str
    """Short name used in record ids (e.g. 'python-docs')."""
    title: str
    """How questions and answers call it (e.g. 'Python 3.11 manual')."""
    html_path: str
    """Folder of its HTML pages."""
    pattern: str = "*.html"
    """Which pages to read (e.g. '*.en.html' for one language of a multilingual manual)."""


@field_hints
@dataclasses.dataclass(frozen=True)
class SectionQaConfig:
    """Build title/manual questions from the sections of HTML manuals."""

    sources: tuple[ManualSource, ...]
    """The manuals."""
    output_path: str
    """Where `data/qa-00000.jsonl.gz` goes."""
    tasks: tuple[str, ...] = TASKS
    """Which questions to ask per section: 'title' and/or 'manual'."""
    min_paragraph_chars: int = 80
    """A section counts only if its first paragraph has at least this many characters."""
    max_paragraph_chars: int = 600
    """Longer first paragraphs are cut at a word boundary."""
    max_sections_per_manual: int | None = None
    """Keep at most this many sections per manual (evenly spaced); None keeps all."""


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text.replace("¶", "")).strip()


def sections_of_html(html: str, *, min_chars: int = 80) -> list[tuple[str, str]]:
    """(heading, first paragraph) of each section of one page, in page order."""
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(html)
    document = tree.document
    if document is None:
        return []
    root = document.query_selector("[role=main]") or document.query_selector("div.body") or tree.body
    if root is None:
        return []
    out, heading = [], None
    for el in root.query_selector_all("h1, h2, h3, h4, p"):
        if el.tag != "p":
            heading = _NUMBERING.sub("", _clean(el.text or "")) or None
            continue
        text = _clean(el.text or "")
        if heading and len(text) >= min_chars:
            out.append((heading, text))
            heading = None  # only the first prose paragraph of a section
    return out


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def _records(
    source: ManualSource, page: str, index: int, heading: str, paragraph: str, tasks: tuple[str, ...]
) -> list[dict]:
    base = f"{source.name}/{page}#{index}"
    out = []
    if "title" in tasks:
        out.append(
            {
                "id": f"{base}/title",
                "response": heading,
                "prompt": f"Here is how a section of the {source.title} begins:\n\n{paragraph}\n\n"
                "What is the section's title?",
            }
        )
    if "manual" in tasks:
        out.append(
            {
                "id": f"{base}/manual",
                "response": f"The {source.title}.",
                "prompt": f'Which manual has a section titled "{heading}"?',
            }
        )
    return out


def make_section_qa(config: SectionQaConfig) -> dict:
    """Write the questions of every section of every manual; returns counts per manual."""
    unknown = set(config.tasks) - set(TASKS)
    if unknown or not config.tasks:
        raise ProcessingError(f"SectionQaConfig.tasks={list(config.tasks)}: expected some of {list(TASKS)}")
    records, counts = [], {}
    for source in config.sources:
        fs, root = mfs.fs_and_path(source.html_path)
        pages = sorted(p for p in fs.glob(f"{root.rstrip('/')}/**/{source.pattern}"))
        if not pages:
            raise ProcessingError(
                f"SectionQaConfig.sources[{source.name!r}]: no page matching {source.pattern!r} under "
                f"{source.html_path}; check the path (is the corpus fetched?) and the pattern"
            )
        sections = []
        for page in pages:
            html = fs.cat_file(page).decode("utf-8", errors="replace")
            rel = os.path.relpath(page, root)
            sections += [
                (rel, i, h, p) for i, (h, p) in enumerate(sections_of_html(html, min_chars=config.min_paragraph_chars))
            ]
        if config.max_sections_per_manual and len(sections) > config.max_sections_per_manual:
            step = len(sections) / config.max_sections_per_manual
            sections = [sections[int(i * step)] for i in range(config.max_sections_per_manual)]
        for rel, i, heading, paragraph in sections:
            records += _records(source, rel, i, heading, _cut(paragraph, config.max_paragraph_chars), config.tasks)
        counts[source.name] = {"pages": len(pages), "sections": len(sections)}
    n = write_documents(mfs.join(config.output_path, "data", "qa-00000.jsonl.gz"), records)
    logger.info("make_section_qa: %d records from %s", n, counts)
    return {"records": n, "manuals": counts}
