"""Heuristic quality filters in the style of Gopher (Rae et al. 2021), C4 and FineWeb.

Each rule looks at one property of a document -- its length, word shapes, symbols, list-like or
truncated lines, repeated lines and n-grams, the presence of stop words -- and compares it with a
threshold from `QualityRules`. A document is removed by the FIRST rule it fails, in the order of
`RULES`, and its removal record names that rule and the measured value, so a threshold can be
tuned by reading `removed/`. Setting a threshold to None turns its rule off.

The defaults are the published ones (Gopher's quality and repetition filters, FineWeb's line
filters) and suit English web text; for other languages turn `min_stop_words` off or give
`stop_words` for the language.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from marin_lab.processing.filtering import (
    Decision,
    check_on_bad_record,
    filter_shard,
    plan_shards,
    summarize,
)
from marin_lab.processing.quarantine import Quarantine, ShardPolicy
from marin_lab.versioning import field_hints, versioned_field

logger = logging.getLogger(__name__)

__all__ = [
    "QualityRules",
    "HeuristicFilterConfig",
    "RULES",
    "check_document",
    "filter_heuristics",
]

# Gopher's stop words: a real English sentence has some of them.
GOPHER_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
BULLETS = ("\u2022", "\u2023", "\u25b6", "\u25cf", "\u25e6", "\u2013", "-", "*", "\u00b7")
ELLIPSES = ("...", "\u2026")
TERMINAL_PUNCTUATION = (".", "!", "?", '"', "\u201d", "'", ":", ";")


@dataclass(frozen=True)
class QualityRules:
    """Thresholds of the heuristic rules; None turns a rule off."""

    min_words: int | None = 50
    """Gopher: fewer words than this is not a document."""
    max_words: int | None = 100_000
    """Gopher: more words than this is usually a dump, not prose."""
    min_mean_word_length: float | None = 3.0
    """Gopher: shorter mean word length (characters) suggests tables or code."""
    max_mean_word_length: float | None = 10.0
    """Gopher: longer mean word length suggests hashes, URLs or binary junk."""
    max_symbol_word_ratio: float | None = 0.1
    """Gopher: '#' and ellipses per word."""
    max_bullet_lines_ratio: float | None = 0.9
    """Gopher: fraction of lines that start with a bullet."""
    max_ellipsis_lines_ratio: float | None = 0.3
    """Gopher: fraction of lines that end with an ellipsis (truncated snippets)."""
    min_alpha_words_ratio: float | None = 0.8
    """Gopher: fraction of words with at least one letter."""
    min_stop_words: int | None = 2
    """Gopher: at least this many occurrences of `stop_words`."""
    stop_words: tuple[str, ...] = GOPHER_STOP_WORDS
    """The stop words counted by `min_stop_words` (lower case)."""
    max_duplicate_lines_ratio: float | None = 0.3
    """Gopher: fraction of lines that repeat an earlier line."""
    max_duplicate_line_chars_ratio: float | None = 0.2
    """Gopher: fraction of characters in repeated lines."""
    max_duplicate_paragraphs_ratio: float | None = 0.3
    """Gopher: fraction of paragraphs (blank-line separated) that repeat an earlier one."""
    max_top_ngram_chars_ratio: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    """Gopher: (n, ratio): characters covered by the most frequent n-gram, over all word
    characters."""
    max_duplicate_ngram_chars_ratio: tuple[tuple[int, float], ...] = (
        (5, 0.15),
        (6, 0.14),
        (7, 0.13),
        (8, 0.12),
        (9, 0.11),
        (10, 0.10),
    )
    """Gopher: (n, ratio): characters covered by repeated n-grams, over all word characters."""
    min_terminal_punctuation_lines_ratio: float | None = 0.12
    """FineWeb: fraction of lines ending in terminal punctuation."""
    max_short_lines_ratio: float | None = 0.67
    """FineWeb: fraction of lines of at most `short_line_chars` characters."""
    short_line_chars: int = 30
    """FineWeb: what counts as a short line."""
    forbid_lorem_ipsum: bool = True
    """C4: remove placeholder text."""
    forbid_curly_braces: bool = False
    """C4: remove anything with '{' (code); off by default, it removes all code."""


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if line.strip()]


def _duplicate_stats(items: list[str]) -> tuple[float, float]:
    """(fraction of items that repeat an earlier one, fraction of characters in those items)."""
    if not items:
        return 0.0, 0.0
    seen: set[str] = set()
    dup_items = dup_chars = total_chars = 0
    for item in items:
        total_chars += len(item)
        if item in seen:
            dup_items += 1
            dup_chars += len(item)
        else:
            seen.add(item)
    return dup_items / len(items), (dup_chars / total_chars if total_chars else 0.0)


def _top_ngram_ratio(words: list[str], n: int, total_chars: int) -> float:
    if len(words) < n or not total_chars:
        return 0.0
    counts = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    gram, count = counts.most_common(1)[0]
    if count < 2:
        return 0.0
    return sum(len(w) for w in gram) * count / total_chars


def _duplicate_ngram_ratio(words: list[str], n: int, total_chars: int) -> float:
    if len(words) < n or not total_chars:
        return 0.0
    seen: set[tuple[str, ...]] = set()
    covered = [False] * len(words)
    for i in range(len(words) - n + 1):
        gram = tuple(words[i : i + n])
        if gram in seen:
            for j in range(i, i + n):
                covered[j] = True
        else:
            seen.add(gram)
    return sum(len(w) for w, c in zip(words, covered, strict=True) if c) / total_chars


def _over(value: float, limit: float | None) -> bool:
    return limit is not None and value > limit


def _under(value: float, limit: float | None) -> bool:
    return limit is not None and value < limit


def check_document(text: str, rules: QualityRules = QualityRules()) -> tuple[str, float] | None:
    """(first failed rule, measured value), or None when the document passes every rule."""
    words = text.split()
    n_words = len(words)
    if _under(n_words, rules.min_words):
        return "min_words", n_words
    if _over(n_words, rules.max_words):
        return "max_words", n_words
    if n_words == 0:
        return "no_words", 0  # every later rule divides by the word count
    word_chars = sum(len(w) for w in words)
    mean_len = word_chars / n_words
    if _under(mean_len, rules.min_mean_word_length):
        return "min_mean_word_length", round(mean_len, 4)
    if _over(mean_len, rules.max_mean_word_length):
        return "max_mean_word_length", round(mean_len, 4)
    symbols = text.count("#") + sum(text.count(e) for e in ELLIPSES)
    if _over(symbols / n_words, rules.max_symbol_word_ratio):
        return "max_symbol_word_ratio", round(symbols / n_words, 4)
    lines = _lines(text)
    n_lines = max(1, len(lines))
    bullets = sum(line.startswith(BULLETS) for line in lines) / n_lines
    if _over(bullets, rules.max_bullet_lines_ratio):
        return "max_bullet_lines_ratio", round(bullets, 4)
    ellipsis = sum(line.endswith(ELLIPSES) for line in lines) / n_lines
    if _over(ellipsis, rules.max_ellipsis_lines_ratio):
        return "max_ellipsis_lines_ratio", round(ellipsis, 4)
    alpha = sum(any(c.isalpha() for c in w) for w in words) / n_words
    if _under(alpha, rules.min_alpha_words_ratio):
        return "min_alpha_words_ratio", round(alpha, 4)
    if rules.min_stop_words is not None:
        stop = set(rules.stop_words)
        found = sum(w.lower().strip(".,;:!?\"'()") in stop for w in words)
        if found < rules.min_stop_words:
            return "min_stop_words", found
    dup_lines, dup_line_chars = _duplicate_stats(lines)
    if _over(dup_lines, rules.max_duplicate_lines_ratio):
        return "max_duplicate_lines_ratio", round(dup_lines, 4)
    if _over(dup_line_chars, rules.max_duplicate_line_chars_ratio):
        return "max_duplicate_line_chars_ratio", round(dup_line_chars, 4)
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
    dup_paras, _ = _duplicate_stats(paragraphs)
    if _over(dup_paras, rules.max_duplicate_paragraphs_ratio):
        return "max_duplicate_paragraphs_ratio", round(dup_paras, 4)
    lowered = [w.lower() for w in words]
    for n, limit in rules.max_top_ngram_chars_ratio:
        ratio = _top_ngram_ratio(lowered, n, word_chars)
        if ratio > limit:
            return f"max_top_{n}gram_chars_ratio", round(ratio, 4)
    for n, limit in rules.max_duplicate_ngram_chars_ratio:
        ratio = _duplicate_ngram_ratio(lowered, n, word_chars)
        if ratio > limit:
            return f"max_duplicate_{n}gram_chars_ratio", round(ratio, 4)
    punct = sum(line.endswith(TERMINAL_PUNCTUATION) for line in lines) / n_lines
    if _under(punct, rules.min_terminal_punctuation_lines_ratio):
        return "min_terminal_punctuation_lines_ratio", round(punct, 4)
    short = sum(len(line) <= rules.short_line_chars for line in lines) / n_lines
    if _over(short, rules.max_short_lines_ratio):
        return "max_short_lines_ratio", round(short, 4)
    if rules.forbid_lorem_ipsum and "lorem ipsum" in text.lower():
        return "lorem_ipsum", 1
    if rules.forbid_curly_braces and "{" in text:
        return "curly_braces", 1
    return None


# The rule names `check_document` can return, in the order they are checked.
RULES = (
    "min_words",
    "max_words",
    "no_words",
    "min_mean_word_length",
    "max_mean_word_length",
    "max_symbol_word_ratio",
    "max_bullet_lines_ratio",
    "max_ellipsis_lines_ratio",
    "min_alpha_words_ratio",
    "min_stop_words",
    "max_duplicate_lines_ratio",
    "max_duplicate_line_chars_ratio",
    "max_duplicate_paragraphs_ratio",
    "max_top_{n}gram_chars_ratio",
    "max_duplicate_{n}gram_chars_ratio",
    "min_terminal_punctuation_lines_ratio",
    "max_short_lines_ratio",
    "lorem_ipsum",
    "curly_braces",
)


@field_hints
@dataclass(frozen=True)
class HeuristicFilterConfig:
    """Configuration of `filter_heuristics`."""

    input_path: str = versioned_field()
    """Folder (or single shard) of input documents."""
    output_path: str  # type: ignore[misc]  # mypy takes versioned_field() for a default; it has none
    """Where `data/` (kept documents) and `removed/` (records naming the rule) go."""
    rules: QualityRules = versioned_field(default_factory=QualityRules)
    """The thresholds."""
    num_workers: int = 1
    """Shards processed in parallel (Ray tasks under Ray, else processes)."""
    on_bad_record: str = versioned_field("raise")
    """'raise' stops at the first bad line; 'skip' counts and skips it."""
    shard_policy: ShardPolicy | None = None
    """Quarantine failing shards (retries, time limit, allowance, memory per shard; docs/data.md
    "Bad shards"); None: the first failing shard fails the step."""


def _decider(rules: QualityRules) -> Callable[[list[dict]], list[Decision]]:
    def decide_one(doc: dict) -> Decision:
        failed = check_document(doc["text"], rules)
        if failed is None:
            return doc, None
        return None, {"rule": failed[0], "value": failed[1]}

    return lambda docs: [decide_one(d) for d in docs]


def _heuristic_task(task) -> dict:
    plan, rules, on_bad_record = task
    return filter_shard(plan, _decider(rules), on_bad_record=on_bad_record)


def filter_heuristics(config: HeuristicFilterConfig) -> dict:
    """Keep documents passing every heuristic rule; record each removal with its rule."""
    step = "filter_heuristics"
    check_on_bad_record(config.on_bad_record, step)
    plans = plan_shards(config.input_path, config.output_path)
    shards = Quarantine(step, config.output_path, config.shard_policy)
    infos = shards.map(
        _heuristic_task,
        [(p, config.rules, config.on_bad_record) for p in plans],
        num_workers=config.num_workers,
        desc=step,
        labels=[p.input_file for p in plans],
    )
    left_out = shards.finish()
    return summarize(step, infos, left_out=left_out if config.shard_policy is not None else None)
