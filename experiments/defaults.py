"""Shared recipe helpers: each `default_*` wires one data step into an `ExecutorStep`.

The helpers decide which fields are part of a step's identity (`versioned`): whatever changes the
bytes a step writes (the source, the extraction method, the tokenizer, the validation share) is
versioned; tuning knobs that never change the output (worker counts, batch sizes, retry budgets)
are not, so turning them does not rerun anything. Inputs are other steps (their documents live
under `data/` in their output) or fixed paths, which are versioned as written.

    raw = default_download("python-docs", source="/path/to/html", revision="3.11.2-6")
    docs = default_extract("python-docs", raw)
    tok = default_train_tokenizer("python-docs", docs, vocab_size=8192)
    cache = default_tokenize("python-docs", docs, tokenizer=tok)

Training and evaluation helpers (`default_train`, `default_eval`) live in
experiments/train_defaults.py and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence

from marin_lab.execution import ExecutorStep, InputName, output_path_of, this_output_path, versioned
from marin_lab.processing.download import DownloadConfig, download
from marin_lab.processing.extract import ExtractConfig, extract
from marin_lab.processing.tokenize import TokenizeConfig, TrainTokenizerConfig, tokenize, train_tokenizer

DocumentsInput = ExecutorStep | InputName | str
"""Where a step reads documents: a step (its `data/` folder), an `output_path_of(...)`, or a path."""


def documents_of(source: DocumentsInput) -> str:
    """The config value for reading documents from `source` (a dependency, or a versioned path)."""
    if isinstance(source, ExecutorStep):
        return output_path_of(source, "data")
    if isinstance(source, InputName):
        return source  # type: ignore[return-value]
    if isinstance(source, str):
        return versioned(source)
    raise TypeError(f"expected an ExecutorStep, output_path_of(...) or a path, got {type(source).__name__}")


def _documents_list(sources: DocumentsInput | Sequence[DocumentsInput]) -> str | list[str]:
    if isinstance(sources, (ExecutorStep, InputName, str)):
        return documents_of(sources)
    return [documents_of(s) for s in sources]


def default_download(
    name: str,
    *,
    source: str | None = None,
    hf_dataset: str | None = None,
    revision: str | None = None,
    include: Sequence[str] | None = None,
    expected: dict[str, dict] | None = None,
    num_workers: int = 4,
) -> ExecutorStep:
    """Fetch raw files (an fsspec URL/folder/glob, or a pinned Hugging Face dataset) -> `raw/{name}`."""
    return ExecutorStep(
        name=f"raw/{name}",
        fn=download,
        config=DownloadConfig(
            output_path=this_output_path(),
            source=versioned(source),
            hf_dataset=versioned(hf_dataset),
            revision=versioned(revision),
            include=versioned(tuple(include) if include else None),
            expected=versioned(expected),
            num_workers=num_workers,
        ),
        description=f"download {hf_dataset or source}" + (f" @ {revision}" if revision else ""),
    )


def default_extract(
    name: str,
    html: ExecutorStep | InputName | str,
    *,
    method: str = "resiliparse",
    main_content: bool = True,
    num_shards: int = 8,
    url_prefix: str | None = None,
    source: str | None = None,
    on_bad_record: str = "raise",
    num_workers: int = 2,
) -> ExecutorStep:
    """HTML -> documents with resiliparse (or trafilatura) -> `documents/{name}`."""
    return ExecutorStep(
        name=f"documents/{name}",
        fn=extract,
        config=ExtractConfig(
            input_path=documents_of(html),
            output_path=this_output_path(),
            method=versioned(method),
            main_content=versioned(main_content),
            # The grouping of files into shards shapes the output files, so it is versioned.
            num_shards=versioned(num_shards),
            url_prefix=versioned(url_prefix),
            source=versioned(source or name),
            on_bad_record=versioned(on_bad_record),
            num_workers=num_workers,
        ),
        description=f"extract text from HTML with {method}",
    )


def default_train_tokenizer(
    name: str,
    documents: DocumentsInput | Sequence[DocumentsInput],
    *,
    vocab_size: int = 8192,
    max_chars: int = 20_000_000,
    sample_fraction: float = 1.0,
    min_frequency: int = 2,
    special_tokens: Sequence[str] = ("<|endoftext|>",),
) -> ExecutorStep:
    """Byte-level BPE trained on a deterministic sample of `documents` -> `tokenizers/{name}`."""
    return ExecutorStep(
        name=f"tokenizers/{name}",
        fn=train_tokenizer,
        config=TrainTokenizerConfig(
            input_path=_documents_list(documents),
            output_path=this_output_path(),
            vocab_size=versioned(vocab_size),
            max_chars=versioned(max_chars),
            sample_fraction=versioned(sample_fraction),
            min_frequency=versioned(min_frequency),
            special_tokens=versioned(tuple(special_tokens)),
        ),
        description=f"train a byte-level BPE tokenizer, vocabulary {vocab_size}",
    )


def default_tokenize(
    name: str,
    documents: DocumentsInput | Sequence[DocumentsInput],
    tokenizer: str | ExecutorStep,
    *,
    tokenizer_revision: str | None = None,
    validation_fraction: float = 0.01,
    split_salt: str = "",
    eos_token: str | None = None,
    bos_token: str | None = None,
    on_bad_record: str = "raise",
    batch_size: int = 512,
    num_workers: int = 2,
) -> ExecutorStep:
    """Documents -> the token cache read by the trainer -> `tokenized/{name}`.

    `tokenizer` is a `train_tokenizer` step, a tokenizer.json path or folder, or a hub model id.
    """
    tok = output_path_of(tokenizer) if isinstance(tokenizer, ExecutorStep) else versioned(tokenizer)
    return ExecutorStep(
        name=f"tokenized/{name}",
        fn=tokenize,
        config=TokenizeConfig(
            input_path=_documents_list(documents),
            output_path=this_output_path(),
            tokenizer=tok,
            tokenizer_revision=versioned(tokenizer_revision),
            validation_fraction=versioned(validation_fraction),
            split_salt=versioned(split_salt),
            eos_token=versioned(eos_token),
            bos_token=versioned(bos_token),
            on_bad_record=versioned(on_bad_record),
            batch_size=batch_size,
            num_workers=num_workers,
        ),
        description="tokenize documents into a token cache",
    )


# --- dedup and quality filtering (below this line: owned by engineer B) ---

from marin_lab.processing.classify import (  # noqa: E402
    ClassifyFilterConfig,
    TrainClassifierConfig,
    classify_filter,
    train_quality_classifier,
)
from marin_lab.processing.dedup import DedupConfig, dedup_exact, dedup_fuzzy  # noqa: E402
from marin_lab.processing.quality import HeuristicFilterConfig, QualityRules, filter_heuristics  # noqa: E402


def default_exact_dedup(
    name: str,
    documents: DocumentsInput,
    *,
    paragraph_level: bool = False,
    normalize: bool = True,
    on_bad_record: str = "raise",
    num_workers: int = 2,
) -> ExecutorStep:
    """Drop documents (and optionally lines) seen earlier in the corpus -> `dedup-exact/{name}`."""
    return ExecutorStep(
        name=f"dedup-exact/{name}",
        fn=dedup_exact,
        config=DedupConfig(
            input_path=documents_of(documents),
            output_path=this_output_path(),
            paragraph_level=versioned(paragraph_level),
            normalize=versioned(normalize),
            on_bad_record=versioned(on_bad_record),
            num_workers=num_workers,
        ),
        description="exact dedup" + (" (documents and paragraphs)" if paragraph_level else ""),
    )


def default_fuzzy_dedup(
    name: str,
    documents: DocumentsInput,
    *,
    ngram_size: int = 5,
    num_bands: int = 14,
    rows_per_band: int = 8,
    threshold: float | None = None,
    seed: int = 1,
    on_bad_record: str = "raise",
    num_workers: int = 2,
) -> ExecutorStep:
    """MinHash-LSH near-duplicate removal across all shards (FineWeb's 5-grams, 14 x 8) -> `dedup/{name}`."""
    return ExecutorStep(
        name=f"dedup/{name}",
        fn=dedup_fuzzy,
        config=DedupConfig(
            input_path=documents_of(documents),
            output_path=this_output_path(),
            ngram_size=versioned(ngram_size),
            num_bands=versioned(num_bands),
            rows_per_band=versioned(rows_per_band),
            threshold=versioned(threshold),
            seed=versioned(seed),
            on_bad_record=versioned(on_bad_record),
            num_workers=num_workers,
        ),
        description=f"fuzzy dedup, MinHash {num_bands}x{rows_per_band} on {ngram_size}-word shingles",
    )


def default_quality_filter(
    name: str,
    documents: DocumentsInput,
    *,
    rules: QualityRules = QualityRules(),
    on_bad_record: str = "raise",
    num_workers: int = 2,
) -> ExecutorStep:
    """Gopher/C4/FineWeb heuristic rules, each removal tagged with its rule -> `quality/{name}`."""
    return ExecutorStep(
        name=f"quality/{name}",
        fn=filter_heuristics,
        config=HeuristicFilterConfig(
            input_path=documents_of(documents),
            output_path=this_output_path(),
            rules=versioned(rules),
            on_bad_record=versioned(on_bad_record),
            num_workers=num_workers,
        ),
        description="heuristic quality filter",
    )


def default_train_quality_classifier(
    name: str,
    positive: DocumentsInput | Sequence[DocumentsInput],
    negative: DocumentsInput | Sequence[DocumentsInput],
    *,
    max_documents_per_class: int | None = None,
    seed: int = 0,
    epoch: int = 5,
    dim: int = 64,
    word_ngrams: int = 2,
) -> ExecutorStep:
    """A fastText classifier, positive vs negative documents -> `classifiers/{name}/model.bin`."""

    def paths(sources) -> tuple:
        out = _documents_list(sources)
        return tuple(out) if isinstance(out, list) else (out,)

    return ExecutorStep(
        name=f"classifiers/{name}",
        fn=train_quality_classifier,
        config=TrainClassifierConfig(
            positive_paths=paths(positive),
            negative_paths=paths(negative),
            output_path=this_output_path(),
            max_documents_per_class=versioned(max_documents_per_class),
            seed=versioned(seed),
            epoch=versioned(epoch),
            dim=versioned(dim),
            word_ngrams=versioned(word_ngrams),
        ),
        description="train a fastText quality classifier",
    )


def default_classify_filter(
    name: str,
    documents: DocumentsInput,
    model: ExecutorStep | str,
    *,
    label: str = "__label__hq",
    threshold: float = 0.5,
    attribute: str = "quality",
    rule: str = "classifier_below_threshold",
    on_bad_record: str = "raise",
    num_workers: int = 2,
) -> ExecutorStep:
    """Keep documents a fastText model scores >= threshold for `label` -> `classified/{name}`.

    `model` is a `default_train_quality_classifier` step or a model file path (e.g. lid.176.ftz).
    """
    model_path = output_path_of(model, "model.bin") if isinstance(model, ExecutorStep) else versioned(model)
    return ExecutorStep(
        name=f"classified/{name}",
        fn=classify_filter,
        config=ClassifyFilterConfig(
            input_path=documents_of(documents),
            output_path=this_output_path(),
            model_path=model_path,
            label=versioned(label),
            threshold=versioned(threshold),
            attribute=versioned(attribute),
            rule=versioned(rule),
            on_bad_record=versioned(on_bad_record),
            num_workers=num_workers,
        ),
        description=f"fastText filter: {label} >= {threshold}",
    )


def default_language_filter(
    name: str,
    documents: DocumentsInput,
    lid_model: str,
    *,
    language: str = "en",
    threshold: float = 0.65,
    num_workers: int = 2,
) -> ExecutorStep:
    """Keep documents in `language` per fastText's lid.176 (FineWeb: en >= 0.65) -> `classified/{name}`."""
    return default_classify_filter(
        name, documents, lid_model, label=f"__label__{language}", threshold=threshold,
        attribute="language", rule="language", num_workers=num_workers,
    )


# --- training and evaluation (experiments/train_defaults.py) ---

from experiments.train_defaults import default_eval, default_train  # noqa: E402,F401
