"""One very long document costs bounded memory in tokenize and train_tokenizer, and the same tokens.

A 50 MB document used to take 8.9 GB in tokenize and 4.5 GB in train_tokenizer: the tokenizer
held about 100 bytes per character of the whole text. Long texts are now handled in pieces cut
between words (`text_chunks`), which leaves the tokens and the trained vocabulary unchanged.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from marin_lab.io.documents import text_chunks
from marin_lab.processing import tokenize as tok_mod
from marin_lab.processing.tokenize import TokenizeConfig, TrainTokenizerConfig, tokenize, train_tokenizer
from tests.data_fixtures import paragraph

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "text",
    [
        "a b c d e f g h",
        "abcdefghijklmnop",
        "aa  bb   cc dd\n\nee ff",
        "x" * 30 + " y",
        "",
        "Grüße, ünïcode — ok.",
    ],
)
@pytest.mark.parametrize("size", [2, 3, 7])
def test_text_chunks_join_back_within_the_size(text, size):
    pieces = list(text_chunks(text, size))
    assert "".join(pieces) == text and all(len(p) <= size for p in pieces)


def test_text_chunks_cut_before_a_single_space_between_words():
    pieces = list(text_chunks("alpha beta gamma delta epsilon", 12))
    assert pieces == ["alpha beta", " gamma delta", " epsilon"]


def _long_corpus(folder: Path) -> None:
    rng = random.Random(7)
    folder.mkdir(parents=True)
    long_text = "\n\n".join(paragraph(rng, 6) + "  Spaces,   tabs\tand ünïcode — “quotes”!" for _ in range(60))
    docs = [{"id": f"d{i}", "text": paragraph(rng)} for i in range(20)]
    docs.insert(7, {"id": "long", "text": long_text})
    (folder / "docs.jsonl").write_text("\n".join(json.dumps(d, ensure_ascii=False) for d in docs) + "\n")


def test_chunked_training_and_encoding_give_the_same_bytes(tmp_path, monkeypatch):
    _long_corpus(tmp_path / "in")

    def run(tag: str) -> tuple[bytes, dict[str, bytes]]:
        train_tokenizer(
            TrainTokenizerConfig(
                input_path=str(tmp_path / "in"), output_path=str(tmp_path / f"tok-{tag}"), vocab_size=400
            )
        )
        out = tmp_path / f"cache-{tag}"
        tokenize(
            TokenizeConfig(
                input_path=str(tmp_path / "in"),
                output_path=str(out),
                tokenizer=str(tmp_path / "tok-whole"),
                bos_token="<|endoftext|>",
            )
        )
        files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.npy"))}
        return (tmp_path / f"tok-{tag}" / "tokenizer.json").read_bytes(), files

    whole = run("whole")
    monkeypatch.setattr(tok_mod, "LONG_TEXT_CHARS", 300)
    monkeypatch.setattr(tok_mod, "TEXT_CHUNK_CHARS", 120)
    monkeypatch.setattr(tok_mod, "CHUNKS_PER_CALL", 3)
    assert run("pieces") == whole


def test_a_long_document_is_encoded_a_few_bounded_pieces_at_a_time(tmp_path, monkeypatch):
    _long_corpus(tmp_path / "in")
    train_tokenizer(
        TrainTokenizerConfig(input_path=str(tmp_path / "in"), output_path=str(tmp_path / "tok"), vocab_size=400)
    )
    monkeypatch.setattr(tok_mod, "LONG_TEXT_CHARS", 1000)
    monkeypatch.setattr(tok_mod, "TEXT_CHUNK_CHARS", 200)
    from tokenizers import Tokenizer

    real = Tokenizer.from_file(str(tmp_path / "tok" / "tokenizer.json"))
    seen: list[int] = []

    class Recording:
        def encode_batch(self, texts, add_special_tokens):
            seen.append(sum(len(t) for t in texts if len(t) > 0))
            return real.encode_batch(texts, add_special_tokens=add_special_tokens)

    text = " ".join(["word"] * 5000)
    flat, lengths = tok_mod.encode_texts(
        Recording(), ["short one", text, "short two"], eos_id=0, bos_id=None, dtype=tok_mod.np.dtype("<u4")
    )
    assert lengths.tolist()[1] == len(real.encode(text).ids) + 1
    assert len(seen) > 5 and max(seen[1:-1]) <= tok_mod.TEXT_CHUNK_CHARS * tok_mod.CHUNKS_PER_CALL


@pytest.mark.slow
def test_memory_for_one_large_document_stays_a_small_multiple_of_its_size(tmp_path):
    # A fresh process, so that its peak resident size is this run's alone.
    code = textwrap.dedent(f"""
        import json, random, resource, sys
        sys.path.insert(0, {str(REPO)!r})
        from tests.data_fixtures import paragraph
        from marin_lab.processing import tokenize as tok_mod
        from marin_lab.processing.tokenize import TokenizeConfig, TrainTokenizerConfig, tokenize, train_tokenizer
        # Smaller pieces than the defaults, so that the part of the peak that grows with the
        # document's size (the reader's copies) is not hidden under the fixed part (the pieces).
        tok_mod.LONG_TEXT_CHARS, tok_mod.TEXT_CHUNK_CHARS = 100_000, 25_000
        rng = random.Random(0)
        text = " ".join(paragraph(rng, 20) for _ in range(3000))
        small = [json.dumps({{"id": f"s{{i}}", "text": paragraph(rng)}}) for i in range(50)]
        with open({str(tmp_path / "in.jsonl")!r}, "w") as f:
            f.write("\\n".join(small + [json.dumps({{"id": "big", "text": text}})]) + "\\n")
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        train_tokenizer(TrainTokenizerConfig(input_path={str(tmp_path / "in.jsonl")!r},
                                             output_path={str(tmp_path / "tok")!r}, vocab_size=500))
        tokenize(TokenizeConfig(input_path={str(tmp_path / "in.jsonl")!r}, output_path={str(tmp_path / "cache")!r},
                                tokenizer={str(tmp_path / "tok")!r}))
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
        print(json.dumps({{"chars": len(text), "grown_kb": grown}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    assert measured["chars"] > 3_000_000
    # Encoding whole held ~100 bytes per character; reading a line costs ~4 (bytes, text, JSON).
    assert measured["grown_kb"] * 1024 < 20 * measured["chars"], measured
