"""Valid JSON that would break a later stage is a bad record in every data step (one reader).

A deeply nested line used to raise RecursionError, and a lone-surrogate escape UnicodeEncodeError,
from inside dedup, quality filtering, tokenize and train_tokenizer: with 'raise' there was no
file:line, with 'skip' the step crashed instead of skipping. They are now caught where documents
are read (`marin_lab.io.documents`), so `on_bad_record` covers them everywhere.
"""

from __future__ import annotations

import json
import random

import pytest

from marin_lab.io.documents import MAX_NESTING, BadRecordError, ReadStats, read_documents
from marin_lab.processing.dedup import DedupConfig, dedup_exact, dedup_fuzzy
from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.quality import HeuristicFilterConfig, filter_heuristics
from marin_lab.processing.tokenize import TokenizeConfig, TrainTokenizerConfig, tokenize, train_tokenizer
from tests.data_fixtures import paragraph

DEEP = '{"id": "deep", "text": "x", "meta": ' + "[" * 50_000 + "]" * 50_000 + "}"
SLIGHTLY_DEEP = '{"id": "deep2", "text": "x", "meta": ' + "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1) + "}"
SURROGATE = '{"id": "lone", "text": "broken \\ud800 half"}'
PAIR = '{"id": "pair", "text": "emoji \\ud83d\\ude00 ok"}'


@pytest.mark.parametrize("line, reason", [(DEEP, "too_deep"), (SLIGHTLY_DEEP, "too_deep"), (SURROGATE, "bad_unicode")])
def test_hostile_valid_json_is_a_bad_record_with_file_and_line(tmp_path, line, reason):
    path = tmp_path / "hostile.jsonl"
    path.write_text(PAIR + "\n" + line + "\n")
    with pytest.raises(BadRecordError, match=rf"hostile\.jsonl:2: bad record \({reason}\)"):
        list(read_documents(str(path)))
    stats = ReadStats()
    docs = list(read_documents(str(path), on_bad_record="skip", stats=stats))
    assert [d["id"] for d in docs] == ["pair"] and docs[0]["text"] == "emoji \U0001f600 ok"
    assert stats.skip_reasons == {reason: 1}


def test_nesting_up_to_the_limit_is_accepted(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text('{"id": "a", "text": "x", "m": ' + "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1) + "}\n")
    assert [d["id"] for d in read_documents(str(path))] == ["a"]


def _shard(folder, rng: random.Random) -> None:
    folder.mkdir(parents=True)
    good = [json.dumps({"id": f"g{i}", "text": "\n\n".join(paragraph(rng) for _ in range(3))}) for i in range(6)]
    (folder / "hostile.jsonl").write_text("\n".join([good[0], DEEP, *good[1:3], SURROGATE, *good[3:]]) + "\n")


def _tokenizer(tmp_path) -> str:
    train_tokenizer(
        TrainTokenizerConfig(
            input_path=str(tmp_path / "in"), output_path=str(tmp_path / "tok"), vocab_size=300, on_bad_record="skip"
        )
    )
    return str(tmp_path / "tok")


STEPS = {
    "dedup_exact": lambda tmp, inp, out, mode: dedup_exact(
        DedupConfig(input_path=inp, output_path=out, on_bad_record=mode)
    ),
    "dedup_fuzzy": lambda tmp, inp, out, mode: dedup_fuzzy(
        DedupConfig(input_path=inp, output_path=out, on_bad_record=mode)
    ),
    "filter_heuristics": lambda tmp, inp, out, mode: filter_heuristics(
        HeuristicFilterConfig(input_path=inp, output_path=out, on_bad_record=mode)
    ),
    "tokenize": lambda tmp, inp, out, mode: tokenize(
        TokenizeConfig(input_path=inp, output_path=out, tokenizer=_tokenizer(tmp), on_bad_record=mode)
    ),
    "train_tokenizer": lambda tmp, inp, out, mode: train_tokenizer(
        TrainTokenizerConfig(input_path=inp, output_path=out, vocab_size=300, on_bad_record=mode)
    ),
}


@pytest.mark.parametrize("step", sorted(STEPS))
def test_every_data_step_raises_with_file_line_or_skips_and_counts_hostile_lines(tmp_path, step):
    _shard(tmp_path / "in", random.Random(3))
    run = STEPS[step]
    with pytest.raises((BadRecordError, ProcessingError), match=r"hostile\.jsonl:2: bad record \(too_deep\)"):
        run(tmp_path, str(tmp_path / "in"), str(tmp_path / "raise"), "raise")
    result = run(tmp_path, str(tmp_path / "in"), str(tmp_path / "skip"), "skip")
    assert result["skip_reasons"] == {"bad_unicode": 1, "too_deep": 1}


def test_a_bad_line_in_a_worker_process_reports_its_file_and_line(tmp_path):
    # With two workers the shards run in a process pool: the error must cross back intact
    # (it used to arrive as "BrokenProcessPool: terminated abruptly").
    rng = random.Random(4)
    (tmp_path / "in").mkdir()
    for name in ("a", "b"):
        (tmp_path / "in" / f"{name}.jsonl").write_text(
            json.dumps({"id": name, "text": paragraph(rng)}) + "\n" + ("{broken\n" if name == "b" else "")
        )
    with pytest.raises(ProcessingError, match=r"b\.jsonl:2: bad record \(bad_json\)") as info:
        dedup_exact(DedupConfig(input_path=str(tmp_path / "in"), output_path=str(tmp_path / "out"), num_workers=2))
    assert "BrokenProcessPool" not in str(info.value)
