"""Tokenize: document shards -> the token cache read memory-mapped by the trainer.

The format is in docs/token_cache.md. In short: per input shard and split, a flat token array
`{split}/shard-00000.tokens.npy` and document offsets `{split}/shard-00000.offsets.npy` (EOS ends
every document), plus `ledger.json` with counts and checksums and a copy of `tokenizer.json`.

Why it is deterministic: output shard i comes from input shard i alone (input shards in sorted
order), a document's split is a hash of its id (not of its position or of a random draw), and
documents keep their input order within a shard. So the bytes do not depend on the number of
workers or on which shard finished first. The ledger is assembled from the per-shard completion
markers, so a rerun that reuses finished shards writes the same ledger as a fresh run.

The tokenizer is a `tokenizer.json` path (local or any fsspec URL), a folder holding one (such as
the output of `train_tokenizer`), or a Hugging Face hub model id (with `tokenizer_revision`); it is
looked up and loaded, once per process, by `processing/tokenizers.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice

import numpy as np

from marin_lab.io import fs as mfs
from marin_lab.io.documents import SOURCE_PATTERNS, ReadStats, list_shards, read_documents, text_chunks
from marin_lab.processing.errors import TokenizeError
from marin_lab.processing.quarantine import Quarantine, ShardPolicy
from marin_lab.processing.shards import (
    input_sizes,
    mark_shard_done,
    prefetch,
    read_shard_done,
)
from marin_lab.processing.tokenizers import find_eos_id, resolve_tokenizer_bytes, tokenizer_at, tokenizer_from_bytes
from marin_lab.store.token_cache import (
    TOKENIZER_FILE,
    add_split,
    new_ledger,
    shard_name,
    token_dtype,
    write_ledger,
    write_shard,
)
from marin_lab.versioning import field_hints, versioned_field

logger = logging.getLogger(__name__)

__all__ = [
    "TokenizeConfig",
    "TrainTokenizerConfig",
    "encode_texts",
    "ledger_left_out",
    "split_of",
    "tokenize",
    "train_tokenizer",
]

SPLITS = ("train", "validation")
# Memory per document is bounded by encoding long texts in pieces (see `text_chunks`): a piece
# costs about 100 bytes per character while it is encoded, so CHUNKS_PER_CALL pieces of
# TEXT_CHUNK_CHARS hold about 100 MB whatever the document's size.
LONG_TEXT_CHARS = 1_000_000
TEXT_CHUNK_CHARS = 250_000
CHUNKS_PER_CALL = 4


@field_hints
@dataclass(frozen=True)
class TokenizeConfig:
    input_path: str | list[str] = versioned_field()
    """Folder(s) of documents (.jsonl, .jsonl.gz, .jsonl.zst, .parquet, .txt), read in sorted order."""
    output_path: str  # type: ignore[misc]  # mypy takes versioned_field() for a default; it has none
    """Where the token cache goes (ledger.json, tokenizer.json, train/, validation/)."""
    tokenizer: str = versioned_field()
    """A tokenizer.json path or URL, a folder holding tokenizer.json, or a hub model id."""
    tokenizer_revision: str | None = versioned_field(None)
    """Hub revision (a commit sha) when `tokenizer` is a hub id; ignored for paths."""
    validation_fraction: float = versioned_field(0.01)
    """Share of documents (chosen by a hash of their id) that go to the validation split."""
    split_salt: str = versioned_field("")
    """Mixed into the split hash; change it to draw a different validation set."""
    eos_token: str | None = versioned_field(None)
    """The token appended to every document; None picks the first of <|endoftext|>, </s>, ...
    that the tokenizer knows."""
    bos_token: str | None = versioned_field(None)
    """If set, this token is prepended to every document."""
    on_bad_record: str = versioned_field("raise")
    """'raise': a bad line in an input shard stops the step; 'skip': it is counted and skipped."""
    batch_size: int = 512
    """Documents per encode_batch call."""
    num_workers: int = 1
    """Processes (or Ray tasks) tokenizing shards in parallel; never changes the output."""
    shard_policy: ShardPolicy | None = None
    """Quarantine failing shards (retries, time limit, allowance, memory per shard; docs/data.md
    "Bad shards"); None: the first failing shard fails the step."""


def _id_below(doc_id: str, fraction: float, salt: str) -> bool:
    """Whether `doc_id` falls in a stable `fraction` of all ids (a 64-bit hash, salted)."""
    digest = hashlib.blake2b(f"{salt}\x00{doc_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


def split_of(doc_id: str, validation_fraction: float, salt: str = "") -> str:
    """'validation' for a stable `validation_fraction` share of ids, else 'train'."""
    return "validation" if _id_below(doc_id, validation_fraction, salt) else "train"


def encode_texts(
    tokenizer, texts: Sequence[str], *, eos_id: int, bos_id: int | None, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of `texts` (BOS?, ids, EOS per text) as one flat array, and each text's length.

    A text longer than LONG_TEXT_CHARS is encoded piece by piece (`text_chunks`): encoding holds
    about 100 bytes per character, so a 50 MB document encoded whole would need gigabytes.
    """
    if all(len(text) <= LONG_TEXT_CHARS for text in texts):
        return _encode_short(tokenizer, texts, eos_id=eos_id, bos_id=bos_id, dtype=dtype)
    flats, lengths, run = [], [], []
    for text in [*texts, None]:
        if text is not None and len(text) <= LONG_TEXT_CHARS:
            run.append(text)
            continue
        if run:
            flat, lens = _encode_short(tokenizer, run, eos_id=eos_id, bos_id=bos_id, dtype=dtype)
            flats.append(flat)
            lengths.append(lens)
            run = []
        if text is not None:
            flats.append(_encode_long(tokenizer, text, eos_id=eos_id, bos_id=bos_id, dtype=dtype))
            lengths.append(np.array([len(flats[-1])], dtype=np.int64))
    return np.concatenate(flats), np.concatenate(lengths)


def _encode_long(tokenizer, text: str, *, eos_id: int, bos_id: int | None, dtype: np.dtype) -> np.ndarray:
    """One long text's tokens (BOS?, ids, EOS), holding the encodings of a few pieces at a time."""
    encode = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch
    parts = [np.array([bos_id], dtype=dtype)] if bos_id is not None else []
    pieces = text_chunks(text, TEXT_CHUNK_CHARS)
    while group := list(islice(pieces, CHUNKS_PER_CALL)):
        parts.extend(np.array(enc.ids, dtype=dtype) for enc in encode(group, add_special_tokens=False))
    parts.append(np.array([eos_id], dtype=dtype))
    return np.concatenate(parts)


def _encode_short(
    tokenizer, texts: Sequence[str], *, eos_id: int, bos_id: int | None, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    encode = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch
    ids = [enc.ids for enc in encode(list(texts), add_special_tokens=False)]
    for doc in ids:
        doc.append(eos_id)
    if bos_id is not None:
        ids = [[bos_id, *doc] for doc in ids]
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum()))
    return flat, lengths


@dataclass(frozen=True)
class _ShardTask:
    index: int
    input_file: str
    output_path: str
    validation_fraction: float
    split_salt: str
    eos_id: int
    bos_id: int | None
    dtype: str
    on_bad_record: str
    batch_size: int
    single_process: bool
    tokenizer_sha256: str

    @property
    def label(self) -> str:
        return f"{shard_name(self.index)} from {self.input_file}"


def _progress_key(output_path: str, index: int) -> str:
    return mfs.join(output_path, "progress", shard_name(index))


@contextlib.contextmanager
def _tokenizer_threads(enabled: bool):
    """Let tokenizers use its own thread pool only when no other worker shares the machine.

    With several workers each one is a core already; a thread pool per worker would only
    oversubscribe. Restored afterwards because the calling process is one of the workers."""
    if enabled:
        yield
        return
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def _batches(task: _ShardTask, stats: ReadStats) -> Iterator[tuple[str, list[str]]]:
    """(split, texts) batches of at most `batch_size` documents, in input order within a split."""
    pending: dict[str, list[str]] = {split: [] for split in SPLITS}
    for doc in read_documents(task.input_file, on_bad_record=task.on_bad_record, stats=stats):
        split = split_of(doc["id"], task.validation_fraction, task.split_salt)
        pending[split].append(doc["text"])
        if len(pending[split]) >= task.batch_size:
            yield split, pending[split]
            pending[split] = []
    for split, texts in pending.items():
        if texts:
            yield split, texts


def _tokenize_shard(task: _ShardTask) -> dict:
    key = _progress_key(task.output_path, task.index)
    previous = read_shard_done(key)
    if previous is not None:
        return {**previous, "reused": True}
    with _tokenizer_threads(task.single_process):
        return _tokenize_new_shard(task, key)


def _tokenize_new_shard(task: _ShardTask, key: str) -> dict:
    # The cache's copy, loaded once per process (the caller's own tasks use the one it loaded).
    tokenizer = tokenizer_at(mfs.join(task.output_path, TOKENIZER_FILE), sha256=task.tokenizer_sha256)
    dtype = np.dtype(task.dtype).newbyteorder("<")
    tokens: dict[str, list[np.ndarray]] = {split: [] for split in SPLITS}
    lengths: dict[str, list[np.ndarray]] = {split: [] for split in SPLITS}
    stats = ReadStats()
    # Reading and decompressing the next batch overlaps encoding this one (encode_batch releases
    # the GIL), so a slow store or a large compressed shard costs little wall time.
    for split, texts in prefetch(_batches(task, stats), depth=2):
        flat, lens = encode_texts(tokenizer, texts, eos_id=task.eos_id, bos_id=task.bos_id, dtype=dtype)
        tokens[split].append(flat)
        lengths[split].append(lens)
    splits = {}
    name = shard_name(task.index)
    for split in SPLITS:
        if not lengths[split]:
            continue  # no document of this shard fell in this split: no files, no ledger entry
        splits[split] = write_shard(task.output_path, split, name, dtype, tokens[split], np.concatenate(lengths[split]))
        tokens[split] = []  # let the arrays go before the next split is written
    info = {"index": task.index, "input": task.input_file, "stats": stats.to_dict(), "splits": splits}
    mark_shard_done(key, info)
    return {**info, "reused": False}


def _input_shards(input_path: str | Iterable[str]) -> list[str]:
    paths = [input_path] if isinstance(input_path, str) else list(input_path)
    if not paths:
        raise TokenizeError("TokenizeConfig.input_path is empty: give at least one folder of documents")
    return [shard for p in paths for shard in list_shards(p, SOURCE_PATTERNS)]


def _check_config(config: TokenizeConfig) -> None:
    if not 0.0 <= config.validation_fraction < 1.0:
        raise TokenizeError(f"TokenizeConfig.validation_fraction={config.validation_fraction}: expected 0 <= x < 1")
    if config.on_bad_record not in ("raise", "skip"):
        raise TokenizeError(f"TokenizeConfig.on_bad_record={config.on_bad_record!r}: expected 'raise' or 'skip'")
    if config.batch_size < 1:
        raise TokenizeError(f"TokenizeConfig.batch_size={config.batch_size}: expected >= 1")


def tokenize(config: TokenizeConfig) -> dict:
    """Tokenize every document shard under `config.input_path` into a token cache."""
    _check_config(config)
    shards = _input_shards(config.input_path)
    tok_bytes, origin = resolve_tokenizer_bytes(config.tokenizer, config.tokenizer_revision)
    tokenizer = tokenizer_from_bytes(tok_bytes, origin)
    eos_id = find_eos_id(tokenizer, config.eos_token)
    bos_id = None
    if config.bos_token is not None:
        bos_id = tokenizer.token_to_id(config.bos_token)
        if bos_id is None:
            raise TokenizeError(f"TokenizeConfig.bos_token={config.bos_token!r} is not in the tokenizer")
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    dtype = token_dtype(vocab_size)
    # Written before the shards: every worker loads the exact bytes the ledger points to.
    mfs.atomic_write_bytes(mfs.join(config.output_path, TOKENIZER_FILE), tok_bytes)
    tok_sha = hashlib.sha256(tok_bytes).hexdigest()

    tasks = [
        _ShardTask(
            index=i,
            input_file=path,
            output_path=config.output_path,
            validation_fraction=config.validation_fraction,
            split_salt=config.split_salt,
            eos_id=eos_id,
            bos_id=bos_id,
            dtype=dtype,
            on_bad_record=config.on_bad_record,
            batch_size=config.batch_size,
            single_process=config.num_workers <= 1,
            tokenizer_sha256=tok_sha,
        )
        for i, path in enumerate(shards)
    ]
    quarantine = Quarantine("tokenize", config.output_path, config.shard_policy)
    results = [
        r
        for r in quarantine.map(
            _tokenize_shard, tasks, num_workers=config.num_workers, desc="tokenize", costs=input_sizes(shards)
        )
        if r is not None
    ]
    left_out = quarantine.finish()

    stats = ReadStats()
    for r in results:
        stats.merge(ReadStats(**r["stats"]))
    if stats.read == 0:
        raise TokenizeError(
            f"tokenize: no documents in {len(shards)} input shard(s) under {config.input_path!r} "
            f"({stats.skipped} bad records skipped); an empty token cache cannot be trained on."
        )
    ledger = new_ledger(
        dtype=dtype,
        vocab_size=vocab_size,
        eos_id=eos_id,
        bos_id=bos_id,
        tokenizer={
            "file": TOKENIZER_FILE,
            "sha256": tok_sha,
            "source": config.tokenizer,
            "revision": config.tokenizer_revision,
        },
        split={
            "validation_fraction": config.validation_fraction,
            "salt": config.split_salt,
            "rule": "blake2b-64(salt NUL id) < fraction * 2**64",
        },
        # Only when the step's allowance let shards go: a reader of the cache sees what it lacks.
        **({"left_out": ledger_left_out(left_out)} if left_out else {}),
    )
    for split in SPLITS:
        add_split(ledger, split, [r["splits"][split] for r in results if split in r["splits"]])
    write_ledger(config.output_path, ledger)
    if config.validation_fraction > 0 and ledger["splits"]["validation"]["documents"] == 0:
        logger.warning(
            "tokenize %s: validation_fraction=%s held out 0 of %d documents; training on this cache runs "
            "without validation (raise validation_fraction to hold some out)",
            config.output_path,
            config.validation_fraction,
            stats.read,
        )
    empty_shards = [r["input"] for r in results if r["stats"]["read"] == 0]
    if empty_shards:
        logger.warning("tokenize: %d input shard(s) hold no documents, e.g. %s", len(empty_shards), empty_shards[0])
    summary = {
        "documents_in": stats.read + stats.skipped,
        "documents": stats.read,
        "skipped": stats.skipped,
        "skip_reasons": stats.to_dict()["skip_reasons"],
        "skip_examples": stats.examples,
        "tokens": {s: ledger["splits"][s]["tokens"] for s in SPLITS},
        "documents_by_split": {s: ledger["splits"][s]["documents"] for s in SPLITS},
        "input_shards": len(shards),
        "empty_input_shards": len(empty_shards),
        "shards_reused": sum(1 for r in results if r["reused"]),
        "vocab_size": vocab_size,
        "dtype": dtype,
    }
    if config.shard_policy is not None:
        summary["bad_shards"] = left_out
    logger.info(
        "tokenize: %d documents (%d skipped) -> %d train / %d validation tokens in %d shards (%d reused)",
        stats.read,
        stats.skipped,
        summary["tokens"]["train"],
        summary["tokens"]["validation"],
        len(shards),
        summary["shards_reused"],
    )
    return summary


def ledger_left_out(bad: list[dict]) -> list[dict]:
    """The ledger's note of input shards a tokenize step left out (within its allowance)."""
    return [{"shard": b["shard"], "error": b["attempts"][-1]["error"]} for b in bad]


# --- train_tokenizer -------------------------------------------------------------------------


@field_hints
@dataclass(frozen=True)
class TrainTokenizerConfig:
    input_path: str | list[str] = versioned_field()
    """Folder(s) of document shards to learn the vocabulary from."""
    output_path: str  # type: ignore[misc]  # mypy takes versioned_field() for a default; it has none
    """Where tokenizer.json goes."""
    vocab_size: int = versioned_field(8192)
    """Size of the vocabulary, special tokens included."""
    max_chars: int = versioned_field(20_000_000)
    """Train on at most this many characters (documents in sorted shard order)."""
    sample_fraction: float = versioned_field(1.0)
    """Use only documents whose id hashes below this fraction (spreads the sample over shards)."""
    min_frequency: int = versioned_field(2)
    """A merge must occur at least this often in the sample."""
    special_tokens: tuple[str, ...] = versioned_field(("<|endoftext|>",))
    """Added first, with ids 0, 1, ...; the first is the end-of-text token."""
    on_bad_record: str = versioned_field("raise")
    """'raise' or 'skip' bad lines in the input shards (skips are counted in the result)."""


def train_tokenizer(config: TrainTokenizerConfig) -> dict:
    """Train a byte-level BPE tokenizer on a deterministic sample; writes `tokenizer.json`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if config.vocab_size < 256 + len(config.special_tokens):
        raise TokenizeError(
            f"TrainTokenizerConfig.vocab_size={config.vocab_size}: a byte-level BPE needs at least "
            f"{256 + len(config.special_tokens)} (256 bytes + special tokens)"
        )
    shards = _input_shards(config.input_path)
    stats = ReadStats()
    used = {"documents": 0, "chars": 0}

    def sample():
        for shard in shards:
            for doc in read_documents(shard, on_bad_record=config.on_bad_record, stats=stats):
                if used["chars"] >= config.max_chars:
                    return
                if config.sample_fraction < 1.0 and not _id_below(doc["id"], config.sample_fraction, "sample"):
                    continue
                used["documents"] += 1
                used["chars"] += len(doc["text"])
                # The trainer pre-tokenizes each item whole; pieces keep that bounded and, cut
                # between words, leave the word counts (and so the merges) unchanged.
                yield from text_chunks(doc["text"], TEXT_CHUNK_CHARS)

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        special_tokens=list(config.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(sample(), trainer=trainer)
    if used["documents"] == 0:
        raise TokenizeError(f"train_tokenizer: no documents to train on under {config.input_path!r}")
    data = tokenizer.to_str().encode("utf-8")
    mfs.atomic_write_bytes(mfs.join(config.output_path, TOKENIZER_FILE), data)
    result = {
        "documents": used["documents"],
        "chars": used["chars"],
        "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
        "sha256": hashlib.sha256(data).hexdigest(),
        "skipped": stats.skipped,
        "skip_reasons": stats.to_dict()["skip_reasons"],
    }
    logger.info(
        "train_tokenizer: %d documents, %d chars -> vocab %d",
        result["documents"],
        result["chars"],
        result["vocab_size"],
    )
    return result
