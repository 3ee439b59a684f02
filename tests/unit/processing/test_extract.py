"""extract: HTML folder -> document shards."""

from __future__ import annotations

import pytest

from marin_lab.io.documents import list_shards, read_documents
from marin_lab.processing.errors import ExtractError, ShardTaskError
from marin_lab.processing.extract import ExtractConfig, extract, html_to_text, normalize_whitespace
from tests.data_fixtures import make_html_site

PAGE = (
    b"<html><head><title> A title </title></head><body><nav>Menu Home</nav>"
    b"<article><p>First paragraph of real text here.</p><p>Second one.</p></article></body></html>"
)


@pytest.mark.parametrize("method", ["resiliparse", "trafilatura"])
def test_html_to_text_keeps_title_and_text(method):
    text, title = html_to_text(PAGE, method=method)
    assert title == "A title"
    assert "First paragraph of real text here." in text
    assert "Second one." in text


def test_html_to_text_detects_non_utf8_encoding():
    html = (
        "<html><head><meta charset='iso-8859-1'><title>Caf\xe9</title></head>"
        "<body><p>Cr\xe8me br\xfbl\xe9e au caf\xe9.</p></body></html>"
    )
    text, title = html_to_text(html.encode("latin-1"))
    assert title == "Café"
    assert "Crème brûlée" in text


def test_unknown_method():
    with pytest.raises(ExtractError, match="method='regex'"):
        html_to_text(PAGE, method="regex")


def test_normalize_whitespace():
    assert normalize_whitespace(" a \n\t\n\n \n b \xa0\nc ") == "a\n\nb\nc"


def test_extract_folder(tmp_path):
    rels = make_html_site(tmp_path / "html", n=10)
    (tmp_path / "html" / "notes.txt").write_text("not html")
    (tmp_path / "html" / "empty.html").write_text("<html><body></body></html>")
    out = tmp_path / "out"
    result = extract(
        ExtractConfig(
            input_path=str(tmp_path / "html"), output_path=str(out), num_shards=3, url_prefix="https://docs.example/"
        )
    )
    assert result["input_files"] == 11
    assert result["documents"] == 10 and result["empty"] == 1 and result["skipped"] == 0
    shards = list_shards(str(out / "data"))
    assert [s.rsplit("/", 1)[-1] for s in shards] == [f"shard-0000{i}.jsonl.zst" for i in range(3)]
    docs = [d for s in shards for d in read_documents(s)]
    assert [d["id"] for d in docs] == sorted(rels)
    first = docs[0]
    assert first["source"] == "html"
    assert first["metadata"]["title"] == "Page 0 title"
    assert first["metadata"]["path"] == rels[0]
    assert first["metadata"]["url"] == "https://docs.example/" + rels[0]
    assert "Heading 0" in first["text"]
    for shard in shards:
        assert (tmp_path / "out" / "data" / (shard.rsplit("/", 1)[-1] + ".done")).exists()


def test_extract_is_deterministic_across_workers(tmp_path):
    make_html_site(tmp_path / "html", n=9)
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        extract(
            ExtractConfig(input_path=str(tmp_path / "html"), output_path=str(out), num_shards=3, num_workers=workers)
        )
        outs.append({p.name: p.read_bytes() for p in sorted((out / "data").iterdir()) if not p.name.endswith(".done")})
    assert outs[0] == outs[1] and len(outs[0]) == 3


def test_rerun_redoes_only_unfinished_shards(tmp_path):
    make_html_site(tmp_path / "html", n=6)
    cfg = ExtractConfig(input_path=str(tmp_path / "html"), output_path=str(tmp_path / "out"), num_shards=3)
    extract(cfg)
    before = (tmp_path / "out" / "data" / "shard-00001.jsonl.zst").read_bytes()
    # Simulate a crash after shard 1's data but before its marker.
    (tmp_path / "out" / "data" / "shard-00001.jsonl.zst.done").unlink()
    (tmp_path / "out" / "data" / "shard-00001.jsonl.zst").write_bytes(b"garbage")
    again = extract(cfg)
    assert again["shards_reused"] == 2
    assert again["documents"] == 6
    assert (tmp_path / "out" / "data" / "shard-00001.jsonl.zst").read_bytes() == before


def test_no_html_is_a_clear_error(tmp_path):
    (tmp_path / "in").mkdir()
    with pytest.raises(ExtractError, match="no files matching"):
        extract(ExtractConfig(input_path=str(tmp_path / "in"), output_path=str(tmp_path / "out")))


def test_extract_failure_raise_or_skip(tmp_path, monkeypatch):
    make_html_site(tmp_path / "html", n=4)
    import marin_lab.processing.extract as mod

    real = mod.html_to_text

    def flaky(html, **kw):
        if b"Page 2 title" in html:
            raise RuntimeError("parser exploded")
        return real(html, **kw)

    monkeypatch.setattr(mod, "html_to_text", flaky)
    with pytest.raises(ShardTaskError, match=r"page-002.html: resiliparse failed: RuntimeError") as info:
        extract(ExtractConfig(input_path=str(tmp_path / "html"), output_path=str(tmp_path / "a")))
    assert "task 3 shard-00003.jsonl.zst (1 files from 'section2/page-002.html')" in str(info.value)
    assert isinstance(info.value.__cause__, ExtractError)
    result = extract(
        ExtractConfig(input_path=str(tmp_path / "html"), output_path=str(tmp_path / "b"), on_bad_record="skip")
    )
    assert result["documents"] == 3 and result["skipped"] == 1
    assert "page-002.html" in result["skip_examples"][0]
