"""Instruction data: section questions from HTML manuals, a masked token cache, bad records."""

import dataclasses
import gzip
import json

import numpy as np
import pytest
from tokenizers import Tokenizer

from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.instruction import ChatTemplate, TokenizeInstructionsConfig, tokenize_instructions
from marin_lab.processing.section_qa import ManualSource, SectionQaConfig, make_section_qa, sections_of_html
from marin_lab.processing.tokenize import TrainTokenizerConfig, train_tokenizer
from marin_lab.training.token_cache import TokenCache
from tests.data_fixtures import make_document_shards

PAGE = """<html><body><div role="main">
<h1>3.2. Packing windows</h1><p>short</p>
<p>Conversations are packed end to end like any documents, and the trainer cuts fixed windows.</p>
<h2>Masks</h2><p>The loss counts response tokens only, never the prompt, nor the role markers of the template.</p>
</div></body></html>"""


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    make_document_shards(root / "docs", shards=1, per_shard=40)
    train_tokenizer(TrainTokenizerConfig(input_path=str(root / "docs"), output_path=str(root / "t"), vocab_size=400))
    return str(root / "t")


def test_section_questions_from_headings_and_first_paragraphs(tmp_path):
    assert sections_of_html(PAGE) == [
        (
            "Packing windows",
            "Conversations are packed end to end like any documents, and the trainer cuts fixed windows.",
        ),
        ("Masks", "The loss counts response tokens only, never the prompt, nor the role markers of the template."),
    ]
    (tmp_path / "html").mkdir()
    (tmp_path / "html" / "a.html").write_text(PAGE)
    out = make_section_qa(
        SectionQaConfig(
            sources=(ManualSource("m", "Test manual", str(tmp_path / "html")),), output_path=str(tmp_path / "qa")
        )
    )
    assert out["records"] == 4
    with gzip.open(tmp_path / "qa" / "data" / "qa-00000.jsonl.gz", "rt") as f:
        records = [json.loads(line) for line in f]
    assert records[0]["id"] == "m/a.html#0/title" and records[0]["response"] == "Packing windows"
    assert records[1]["response"] == "The Test manual."
    with pytest.raises(ProcessingError, match=r"sources\['m'\]: no page matching '\*.en.html'"):
        make_section_qa(
            SectionQaConfig(
                sources=(ManualSource("m", "T", str(tmp_path / "html"), "*.en.html"),),
                output_path=str(tmp_path / "none"),
            )
        )


def _write(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


def test_loss_mask_covers_responses_and_final_eos_only(tokenizer, tmp_path):
    records = [{"id": f"r{i}", "prompt": f"What is item {i}?", "response": f"It is the number {i}."} for i in range(30)]
    records.append(
        {
            "id": "chat",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello there"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Again"},
                {"role": "assistant", "content": "Hello again."},
            ],
        }
    )
    _write(tmp_path / "in" / "a.jsonl", records)
    out = str(tmp_path / "cache")
    summary = tokenize_instructions(
        TokenizeInstructionsConfig(
            input_path=str(tmp_path / "in"), output_path=out, tokenizer=tokenizer, validation_fraction=0.2
        )
    )
    assert summary["records"] == 31 and sum(summary["records_by_split"].values()) == 31
    cache = TokenCache(out)
    tok = Tokenizer.from_file(f"{tokenizer}/tokenizer.json")
    texts = []
    for split in ("train", "validation"):
        tokens = np.load(f"{out}/{split}/shard-00000.tokens.npy")
        mask = np.load(f"{out}/{split}/shard-00000.loss_mask.npy")
        offsets = np.load(f"{out}/{split}/shard-00000.offsets.npy")
        assert len(mask) == len(tokens) and set(np.unique(mask)) == {0, 1}
        for lo, hi in zip(offsets[:-1], offsets[1:], strict=True):
            doc, m = tokens[lo:hi], mask[lo:hi]
            assert doc[-1] == cache.ledger["eos_id"] and m[-1] == 1 and m[0] == 0
            texts.append((tok.decode(doc[:-1][m[:-1] == 1].tolist()), tok.decode(doc[m == 0].tolist())))
    answers = {a.replace(" ", "") for a, _ in texts}
    assert "Itisthenumber7." in answers
    chat = next((a, q) for a, q in texts if "Be" in q.replace(" ", ""))
    # Both replies (and the separator after the first) are in the loss; system, user and markers are not.
    assert chat[0].replace(" ", "").replace("\n", "") == "Hello.Helloagain."
    assert ChatTemplate().assistant.strip().replace(" ", "") in chat[1].replace(" ", "")
    assert "Again" in chat[1].replace(" ", "") and "Hello." not in chat[1]
    # A window's masks come with its tokens; a cache without a mask file counts every token.
    split = cache.split("train", 16)
    assert split.has_loss_mask and split.loss_masks(np.arange(2)).shape == (2, 17)


def test_bad_record_names_file_and_line_or_is_skipped(tokenizer, tmp_path):
    _write(
        tmp_path / "in" / "a.jsonl",
        [{"id": "ok", "prompt": "q", "response": "a"}, "{not json", {"id": "x", "prompt": "q", "response": ""}],
    )
    cfg = TokenizeInstructionsConfig(
        input_path=str(tmp_path / "in"), output_path=str(tmp_path / "c"), tokenizer=tokenizer
    )
    with pytest.raises(ProcessingError, match=r"a.jsonl:2.*malformed JSON"):
        tokenize_instructions(cfg)
    summary = tokenize_instructions(dataclasses.replace(cfg, output_path=str(tmp_path / "d"), on_bad_record="skip"))
    assert summary["records"] == 1 and summary["skipped"] == 2
    assert set(summary["skip_reasons"]) == {"bad_json", "no_response"}
