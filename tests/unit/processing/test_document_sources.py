"""Documents from what downloads bring: Parquet tables and plain text files (besides our JSON lines)."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marin_lab.io.documents import SOURCE_PATTERNS, BadRecordError, ReadStats, list_shards, read_documents


def _parquet(path, **columns):
    pq.write_table(pa.table(columns), str(path))
    return str(path)


def test_parquet_rows_are_documents(tmp_path):
    with_ids = _parquet(tmp_path / "a.parquet", text=["one", "two"], id=[7, 8], extra=[1, 2])
    without = _parquet(tmp_path / "b.parquet", text=["three"])
    assert list(read_documents(with_ids)) == [{"id": "7", "text": "one"}, {"id": "8", "text": "two"}]
    assert list(read_documents(without)) == [{"id": "b.parquet:1", "text": "three"}]


def test_parquet_null_text_is_a_bad_record(tmp_path):
    path = _parquet(tmp_path / "n.parquet", text=["ok", None, "also ok"])
    with pytest.raises(BadRecordError, match=r"n\.parquet:2: bad record \(missing_text\)"):
        list(read_documents(path))
    stats = ReadStats()
    assert [d["text"] for d in read_documents(path, on_bad_record="skip", stats=stats)] == ["ok", "also ok"]
    assert stats.skip_reasons == {"missing_text": 1}


def test_parquet_without_text_column_names_the_columns(tmp_path):
    path = _parquet(tmp_path / "c.parquet", content=["x"])
    with pytest.raises(BadRecordError, match="no 'text' column \\(columns: content\\)"):
        list(read_documents(path, on_bad_record="skip"))


def test_damaged_parquet_is_one_clear_line(tmp_path):
    path = tmp_path / "d.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(BadRecordError, match=r"d\.parquet:1: bad record \(bad_parquet\).*re-create or re-download"):
        list(read_documents(str(path)))


def test_text_files_are_one_document_each(tmp_path):
    (tmp_path / "story.txt").write_text("Once upon a time.\n\nThe end.\n")
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    shards = list_shards(str(tmp_path), SOURCE_PATTERNS)
    assert [s.rsplit("/", 1)[-1] for s in shards] == ["empty.txt", "latin1.txt", "story.txt"]
    stats = ReadStats()
    docs = [d for s in shards for d in read_documents(s, on_bad_record="skip", stats=stats)]
    assert docs == [{"id": "story.txt", "text": "Once upon a time.\n\nThe end.\n"}]
    assert stats.skip_reasons == {"bad_utf8": 1}


def test_tokenize_and_train_tokenizer_read_parquet_and_text(tmp_path):
    from marin_lab.processing.tokenize import TokenizeConfig, TrainTokenizerConfig, tokenize, train_tokenizer
    from tests.data_fixtures import make_documents

    docs = make_documents(60)
    src = tmp_path / "download" / "data"
    src.mkdir(parents=True)
    _parquet(src / "train-00000.parquet", text=[d["text"] for d in docs[:50]])
    for d in docs[50:]:
        (src / f"{d['id']}.txt").write_text(d["text"])
    tok = train_tokenizer(TrainTokenizerConfig(input_path=str(src), output_path=str(tmp_path / "tok"), vocab_size=300))
    assert tok["documents"] == 60
    summary = tokenize(
        TokenizeConfig(
            input_path=str(src),
            output_path=str(tmp_path / "cache"),
            tokenizer=str(tmp_path / "tok"),
            validation_fraction=0.2,
        )
    )
    assert summary["documents"] == 60 and summary["input_shards"] == 11
