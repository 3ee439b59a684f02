"""Extract: a folder of HTML files -> documents (JSON lines, `.jsonl.zst`).

The HTML files under `input_path` are sorted by path and cut into `num_shards` contiguous groups;
each group becomes one output shard `data/shard-00000.jsonl.zst`, written atomically with a completion
marker, so the output depends only on the input files and the versioned config, never on the
number of workers. A document's `id` is the file's path relative to `input_path` (stable across
reruns and readable in the browser); `metadata` keeps the title, the path, the URL when
`url_prefix` is set, and the method used.

Text comes from resiliparse (the default: fast, and its main-content mode drops navigation) or
trafilatura (slower, sometimes cleaner on news-like pages). A page that yields no text is counted
as `empty` and not written; a page the extractor fails on is a bad record (`on_bad_record`).
"""

from __future__ import annotations

import fnmatch
import logging
import re
from dataclasses import dataclass

from marin_lab.io import fs as mfs
from marin_lab.io.documents import write_documents
from marin_lab.processing.errors import ExtractError
from marin_lab.processing.quarantine import Quarantine, ShardPolicy
from marin_lab.processing.shards import mark_shard_done, read_shard_done
from marin_lab.versioning import field_hints, versioned_field

logger = logging.getLogger(__name__)

__all__ = ["ExtractConfig", "extract", "html_to_text", "normalize_whitespace", "METHODS"]

METHODS = ("resiliparse", "trafilatura", "text")
TEXT_PATTERNS = ("*.txt", "*.md", "*.rst", "*.html", "*.htm")
"""What `method="text"` documents by default (see `text_documents` in experiments/defaults.py)."""


@field_hints
@dataclass(frozen=True)
class ExtractConfig:
    input_path: str = versioned_field()
    """Folder of HTML files (searched recursively), e.g. the `data/` of a download step."""
    output_path: str  # type: ignore[misc]  # mypy takes versioned_field() for a default; it has none
    """The step's output; the document shards go to `{output_path}/data/shard-00000.jsonl.zst`..."""
    method: str = versioned_field("resiliparse")
    """HTML-to-text extractor: 'resiliparse' (fast) or 'trafilatura'; 'text' takes plain text files
    (.txt, .md, ...) as they are, one document each, and HTML files among them with resiliparse."""
    main_content: bool = versioned_field(True)
    """Keep only the main content (drop navigation, headers, footers) where the method can."""
    num_shards: int = versioned_field(8)
    """Number of output shards; the sorted HTML files are cut into this many contiguous groups."""
    patterns: tuple[str, ...] = versioned_field(("*.html", "*.htm", "*.xhtml"))
    """File-name patterns of the HTML files to extract."""
    min_chars: int = versioned_field(1)
    """Documents with fewer characters of text are counted as `empty` and not written."""
    url_prefix: str | None = versioned_field(None)
    """If set, `metadata.url` is this prefix joined with the file's relative path."""
    source: str | None = versioned_field(None)
    """The `source` field of every document (default: the last folder name of `input_path`)."""
    on_bad_record: str = versioned_field("raise")
    """'raise': a page the extractor fails on stops the step; 'skip': it is counted and skipped."""
    num_workers: int = 1
    """Processes (or Ray tasks) extracting shards in parallel; never changes the output."""
    shard_policy: ShardPolicy | None = None
    """Quarantine failing shards (retries, time limit, allowance, memory per shard; docs/data.md
    "Bad shards"); None: the first failing shard fails the step."""


def html_to_text(html: bytes, *, method: str = "resiliparse", main_content: bool = True) -> tuple[str, str | None]:
    """(text, title) of one HTML page; the encoding is detected from the bytes."""
    if method == "resiliparse":
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.encoding import bytes_to_str, detect_encoding
        from resiliparse.parse.html import HTMLTree

        tree = HTMLTree.parse(bytes_to_str(html, detect_encoding(html) or "utf-8"))
        title = tree.title.strip() if tree.title else None
        text = extract_plain_text(tree, main_content=main_content, alt_texts=False, links=False, comments=False)
        return normalize_whitespace(text), title or None
    if method == "trafilatura":
        try:
            import trafilatura
        except ImportError as err:  # it imports lxml_html_clean, which is easy to miss
            raise ExtractError(
                f"method='trafilatura' needs the packages trafilatura and lxml_html_clean: {err}"
            ) from err
        from resiliparse.parse.encoding import bytes_to_str, detect_encoding

        doc = trafilatura.bare_extraction(
            bytes_to_str(html, detect_encoding(html) or "utf-8"),
            with_metadata=True,
            include_comments=False,
            favor_recall=not main_content,
        )
        if doc is None:
            return "", None
        text = normalize_whitespace(getattr(doc, "text", None) or "")
        title = getattr(doc, "title", None)
        return text, (title.strip() or None) if title else None
    if method == "text":
        text = html.decode("utf-8", errors="replace")
        first = next((line.strip().lstrip("#").strip() for line in text.splitlines() if line.strip()), "")
        return normalize_whitespace(text), first[:200] or None
    raise ExtractError(f"ExtractConfig.method={method!r}: expected one of {METHODS}")


_BLANK_RUNS = re.compile(r"\n{3,}")


def normalize_whitespace(text: str) -> str:
    """Strip each line's surrounding whitespace and keep at most one blank line in a row."""
    lines = (line.strip() for line in text.splitlines())
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


@dataclass(frozen=True)
class _ShardTask:
    index: int
    files: tuple[str, ...]
    """Relative paths of the HTML files of this shard."""
    config: ExtractConfig

    @property
    def label(self) -> str:
        return f"{_shard_name(self.index)} ({len(self.files)} files from {self.files[0]!r})"


def _shard_name(index: int) -> str:
    return f"shard-{index:05d}.jsonl.zst"


def _extract_shard(task: _ShardTask) -> dict:
    cfg = task.config
    out_file = mfs.join(cfg.output_path, "data", _shard_name(task.index))
    previous = read_shard_done(out_file)
    if previous is not None:
        return {**previous, "reused": True}
    source = cfg.source or cfg.input_path.rstrip("/").rsplit("/", 1)[-1]
    docs: list[dict] = []
    examples: list[str] = []
    empty, skipped = 0, 0
    for rel in task.files:
        url = mfs.join(cfg.input_path, rel)
        html = mfs.read_bytes(url)
        try:
            method = cfg.method
            if method == "text" and rel.lower().endswith((".html", ".htm", ".xhtml")):
                method = "resiliparse"  # a folder of text files may hold a few pages too
            text, title = html_to_text(html, method=method, main_content=cfg.main_content)
        except ExtractError:
            raise
        except Exception as err:
            if cfg.on_bad_record == "raise":
                raise ExtractError(
                    f"extract: {url}: {cfg.method} failed: {type(err).__name__}: {err}. Remove the "
                    f"file or set on_bad_record='skip'."
                ) from err
            skipped += 1
            if len(examples) < 5:
                examples.append(f"{url}: {type(err).__name__}")
            continue
        if len(text) < cfg.min_chars:
            empty += 1
            continue
        metadata = {"title": title, "path": rel, "method": cfg.method, "html_bytes": len(html)}
        if cfg.url_prefix:
            metadata["url"] = mfs.join(cfg.url_prefix, rel)
        docs.append({"id": rel, "text": text, "source": source, "metadata": metadata})
    written = write_documents(out_file, docs)
    info = {
        "shard": _shard_name(task.index),
        "files": len(task.files),
        "documents": written,
        "empty": empty,
        "skipped": skipped,
        "skip_examples": examples,
        "chars": sum(len(d["text"]) for d in docs),
    }
    mark_shard_done(out_file, info)
    return {**info, "reused": False}


def _html_files(cfg: ExtractConfig) -> list[str]:
    files = [
        rel
        for rel, _size in mfs.list_files(cfg.input_path)
        if not any(part.startswith(".") for part in rel.split("/"))
        and any(fnmatch.fnmatch(rel.rsplit("/", 1)[-1].lower(), p) for p in cfg.patterns)
    ]
    if not files:
        raise ExtractError(
            f"extract: no files matching {list(cfg.patterns)} under {cfg.input_path!r}; check "
            f"ExtractConfig.input_path (the download step writes its files under 'data/')."
        )
    return files


def _group(files: list[str], num_shards: int) -> list[tuple[str, ...]]:
    n = max(1, min(num_shards, len(files)))
    return [tuple(files[i * len(files) // n : (i + 1) * len(files) // n]) for i in range(n)]


def extract(config: ExtractConfig) -> dict:
    """Extract text from every HTML file under `config.input_path` into document shards."""
    if config.method not in METHODS:
        raise ExtractError(f"ExtractConfig.method={config.method!r}: expected one of {METHODS}")
    if config.on_bad_record not in ("raise", "skip"):
        raise ExtractError(f"ExtractConfig.on_bad_record={config.on_bad_record!r}: expected 'raise' or 'skip'")
    files = _html_files(config)
    groups = _group(files, config.num_shards)
    tasks = [_ShardTask(i, g, config) for i, g in enumerate(groups)]
    shards = Quarantine("extract", config.output_path, config.shard_policy)
    results = [
        r for r in shards.map(_extract_shard, tasks, num_workers=config.num_workers, desc="extract") if r is not None
    ]
    bad = shards.finish()
    left_out = sum(len(tasks[b["task"]].files) for b in bad)
    summary = {
        "input_files": len(files),
        "documents": sum(r["documents"] for r in results),
        "empty": sum(r["empty"] for r in results),
        "skipped": sum(r["skipped"] for r in results),
        "skip_examples": [e for r in results for e in r["skip_examples"]][:5],
        "chars": sum(r["chars"] for r in results),
        "shards": len(results),
        "shards_reused": sum(1 for r in results if r["reused"]),
        "method": config.method,
    }
    if config.shard_policy is not None:
        # Within the allowance: the record says what the output lacks, and why.
        summary["bad_shards"] = bad
        summary["files_left_out"] = left_out
    accounted = summary["documents"] + summary["empty"] + summary["skipped"] + left_out
    if accounted != len(files):
        # Only possible when completion markers come from a different input under the same path.
        raise ExtractError(
            f"extract: {config.output_path}: shards account for {accounted} files but the input "
            f"has {len(files)}; the completion markers are stale. Delete the output folder and rerun."
        )
    logger.info(
        "extract: %d HTML files -> %d documents (%d empty, %d skipped) in %d shards (%d reused)",
        len(files),
        summary["documents"],
        summary["empty"],
        summary["skipped"],
        len(results),
        summary["shards_reused"],
    )
    return summary
