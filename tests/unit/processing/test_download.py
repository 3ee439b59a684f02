"""download: fsspec sources (folder, glob, file), retries, checksums, HF datasets offline."""

from __future__ import annotations

import hashlib
import json

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from marin_lab.io.sources import content_digest
from marin_lab.processing.download import DownloadConfig, download
from marin_lab.processing.errors import DownloadError, ShardTaskError


def make_source(root, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


FILES = {"a.html": b"<p>a</p>", "sub/b.html": b"<p>bb</p>", "sub/deeper/c.txt": b"ccc" * 1000}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("prefix", ["", "file://"])
def test_folder_copy_and_provenance(tmp_path, prefix):
    make_source(tmp_path / "src", FILES)
    out = tmp_path / "out"
    result = download(
        DownloadConfig(source=prefix + str(tmp_path / "src"), output_path=str(out), revision="v1", num_workers=1)
    )
    assert result["files"] == 3 and result["total_bytes"] == sum(map(len, FILES.values()))
    for rel, data in FILES.items():
        assert (out / "data" / rel).read_bytes() == data
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["source"] == prefix + str(tmp_path / "src") and prov["revision"] == "v1"
    assert [f["path"] for f in prov["files"]] == sorted(FILES)
    assert {f["path"]: f["sha256"] for f in prov["files"]} == {r: sha(d) for r, d in FILES.items()}
    assert {f["path"]: f["size"] for f in prov["files"]} == {r: len(d) for r, d in FILES.items()}
    assert not list((out / "data").rglob(".tmp*"))


def test_glob_include_and_single_file(tmp_path):
    make_source(tmp_path / "src", FILES)
    r = download(
        DownloadConfig(source=str(tmp_path / "src" / "**" / "*.html"), output_path=str(tmp_path / "g"), num_workers=1)
    )
    assert r["files"] == 2 and (tmp_path / "g" / "data" / "sub" / "b.html").exists()
    r = download(
        DownloadConfig(
            source=str(tmp_path / "src"), output_path=str(tmp_path / "i"), include=("sub/*.html",), num_workers=1
        )
    )
    assert r["files"] == 1 and (tmp_path / "i" / "data" / "sub" / "b.html").exists()
    r = download(
        DownloadConfig(source=str(tmp_path / "src" / "a.html"), output_path=str(tmp_path / "f"), num_workers=1)
    )
    assert (tmp_path / "f" / "data" / "a.html").read_bytes() == FILES["a.html"]


def test_parallel_workers(tmp_path):
    make_source(tmp_path / "src", {f"f{i:02d}.txt": bytes([i]) * 10 for i in range(12)})
    r = download(DownloadConfig(source=str(tmp_path / "src"), output_path=str(tmp_path / "o"), num_workers=2))
    assert r["files"] == 12
    assert [(tmp_path / "o" / "data" / f"f{i:02d}.txt").read_bytes() for i in range(12)] == [
        bytes([i]) * 10 for i in range(12)
    ]


def test_object_store_destination(tmp_path):
    # memory:// lives in this process only, so the copy runs inline (num_workers=1).
    make_source(tmp_path / "src", {f"f{i:02d}.txt": bytes([i]) * 10 for i in range(12)})
    r = download(DownloadConfig(source=str(tmp_path / "src"), output_path="memory://dl-test/out", num_workers=1))
    assert r["files"] == 12
    fs = fsspec.filesystem("memory")
    assert fs.cat_file("/dl-test/out/data/f07.txt") == bytes([7]) * 10
    assert json.loads(fs.cat_file("/dl-test/out/provenance.json"))["count"] == 12


def test_expected_checksums(tmp_path):
    make_source(tmp_path / "src", FILES)
    good = {"a.html": {"sha256": sha(FILES["a.html"]), "size": len(FILES["a.html"])}}
    download(
        DownloadConfig(source=str(tmp_path / "src"), output_path=str(tmp_path / "ok"), expected=good, num_workers=1)
    )
    bad = {"sub/b.html": {"sha256": "0" * 64}}
    with pytest.raises(ShardTaskError, match=r"b.html failed after 2 attempts \(checksum mismatch\)") as info:
        download(
            DownloadConfig(
                source=str(tmp_path / "src"),
                output_path=str(tmp_path / "bad"),
                expected=bad,
                max_retries=1,
                backoff_s=0.001,
                num_workers=1,
            )
        )
    assert isinstance(info.value.__cause__, DownloadError)
    assert not (tmp_path / "bad" / "data" / "sub" / "b.html").exists()
    with pytest.raises(DownloadError, match="expected names files the source lacks"):
        download(
            DownloadConfig(
                source=str(tmp_path / "src"), output_path=str(tmp_path / "x"), expected={"nope.txt": {"size": 1}}
            )
        )


class FlakyFS(MemoryFileSystem):
    """A memory filesystem whose reads fail the first `failures` times (a flaky network)."""

    protocol = "flakytest"
    failures = 0
    opened = 0

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(path.replace("flakytest://", "memory://", 1))

    def _open(self, path, mode="rb", **kwargs):
        if "r" in mode:
            type(self).opened += 1
            if type(self).opened <= type(self).failures:
                raise ConnectionResetError("connection reset by peer")
        return super()._open(path, mode, **kwargs)


def test_retries_with_backoff(tmp_path, monkeypatch):
    fsspec.register_implementation("flakytest", FlakyFS, clobber=True)
    FlakyFS().pipe_file("/flaky/data.bin", b"payload")
    sleeps = []
    monkeypatch.setattr("marin_lab.processing.download.time.sleep", sleeps.append)
    monkeypatch.setattr(FlakyFS, "failures", 2)
    monkeypatch.setattr(FlakyFS, "opened", 0)
    r = download(
        DownloadConfig(
            source="flakytest://flaky/data.bin", output_path=str(tmp_path / "o"), backoff_s=0.5, num_workers=1
        )
    )
    assert r["files"] == 1 and (tmp_path / "o" / "data" / "data.bin").read_bytes() == b"payload"
    assert sleeps == [0.5, 1.0]
    monkeypatch.setattr(FlakyFS, "failures", 10)
    monkeypatch.setattr(FlakyFS, "opened", 0)
    with pytest.raises(ShardTaskError, match="failed after 3 attempts .ConnectionResetError"):
        download(
            DownloadConfig(
                source="flakytest://flaky/data.bin",
                output_path=str(tmp_path / "p"),
                max_retries=2,
                backoff_s=0.0,
                num_workers=1,
            )
        )


def test_rerun_fetches_only_missing(tmp_path):
    make_source(tmp_path / "src", FILES)
    cfg = DownloadConfig(source=str(tmp_path / "src"), output_path=str(tmp_path / "o"), num_workers=1)
    download(cfg)
    (tmp_path / "o" / "progress" / "a.html.done").unlink()
    assert download(cfg)["reused"] == 2


def test_missing_source_and_bad_config(tmp_path):
    with pytest.raises(DownloadError, match="no files found"):
        download(DownloadConfig(source=str(tmp_path / "nothing"), output_path=str(tmp_path / "o")))
    with pytest.raises(DownloadError, match="exactly one of"):
        download(DownloadConfig(output_path=str(tmp_path / "o")))
    with pytest.raises(DownloadError, match="exactly one of"):
        download(DownloadConfig(source=str(tmp_path), hf_dataset="org/name", output_path=str(tmp_path / "o")))
    with pytest.raises(DownloadError, match="needs DownloadConfig.revision"):
        download(DownloadConfig(hf_dataset="org/name", output_path=str(tmp_path / "o")))


def make_hub_dataset_cache(cache, repo_id: str, commit: str, files: dict[str, bytes]) -> None:
    """A Hugging Face hub cache holding one dataset snapshot, as snapshot_download leaves it."""
    repo = cache / ("datasets--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    make_source(repo / "snapshots" / commit, files)


def test_hf_dataset_offline_from_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    commit = "a" * 40
    files = {"data/train-00000.jsonl": b'{"id": "1", "text": "hi"}\n', "README.md": b"# card\n"}
    make_hub_dataset_cache(tmp_path / "hub", "example-org/tiny-docs", commit, files)
    out = tmp_path / "out"
    r = download(
        DownloadConfig(
            hf_dataset="example-org/tiny-docs",
            revision=commit,
            output_path=str(out),
            hf_cache_dir=str(tmp_path / "hub"),
            num_workers=1,
        )
    )
    assert r["files"] == 2 and r["resolved_revision"] == commit
    assert (out / "data" / "data" / "train-00000.jsonl").read_bytes() == files["data/train-00000.jsonl"]
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["source"] == "hf://datasets/example-org/tiny-docs" and prov["kind"] == "huggingface"
    r = download(
        DownloadConfig(
            hf_dataset="example-org/tiny-docs",
            revision="main",
            include=("data/*",),
            output_path=str(tmp_path / "out2"),
            hf_cache_dir=str(tmp_path / "hub"),
            num_workers=1,
        )
    )
    assert r["files"] == 1 and r["resolved_revision"] == commit
    with pytest.raises(DownloadError, match="could not be fetched"):
        download(
            DownloadConfig(
                hf_dataset="example-org/absent",
                revision=commit,
                output_path=str(tmp_path / "o3"),
                hf_cache_dir=str(tmp_path / "hub"),
            )
        )


def test_datasets_save_to_disk_folder(tmp_path):
    import datasets

    ds = datasets.Dataset.from_dict({"id": ["1", "2"], "text": ["one", "two"]})
    ds.save_to_disk(str(tmp_path / "saved"))
    r = download(DownloadConfig(source=str(tmp_path / "saved"), output_path=str(tmp_path / "o"), num_workers=1))
    assert r["files"] >= 2
    assert datasets.load_from_disk(str(tmp_path / "o" / "data"))["text"] == ["one", "two"]


@pytest.fixture()
def http_server(tmp_path):
    """A local HTTP server over `tmp_path/www` (no network beyond 127.0.0.1)."""
    import functools
    import http.server
    import threading

    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_source(tmp_path, http_server):
    root, url = http_server
    (root / "page.html").write_bytes(b"<p>served over http</p>" * 100)
    r = download(
        DownloadConfig(
            source=f"{url}/page.html",
            output_path=str(tmp_path / "o"),
            num_workers=1,
            expected={"page.html": {"size": 2300}},
        )
    )
    assert r["files"] == 1
    assert (tmp_path / "o" / "data" / "page.html").read_bytes() == b"<p>served over http</p>" * 100
    with pytest.raises(ShardTaskError, match="does not exist"):
        download(DownloadConfig(source=f"{url}/missing.html", output_path=str(tmp_path / "m"), num_workers=1))


def test_broken_symlinks_are_named_in_the_result_and_provenance(tmp_path):
    # Unpacked packages hold links to files of other packages; a dangling one cannot be copied,
    # but it must not vanish without a trace.
    make_source(tmp_path / "src", FILES)
    (tmp_path / "src" / "sub" / "jquery.js").symlink_to("../../elsewhere/jquery.js")
    result = download(DownloadConfig(source=str(tmp_path / "src"), output_path=str(tmp_path / "out"), num_workers=1))
    assert result["files"] == 3
    assert result["skipped_broken_symlinks"] == 1 and result["broken_symlink_examples"] == ["sub/jquery.js"]
    prov = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert prov["skipped_broken_symlinks"] == [{"path": "sub/jquery.js", "link": "../../elsewhere/jquery.js"}]


def test_a_source_of_only_broken_symlinks_says_so(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "gone.txt").symlink_to(tmp_path / "missing.txt")
    with pytest.raises(DownloadError, match=r"1 broken symlink\(s\), e.g. gone.txt ->"):
        download(DownloadConfig(source=str(tmp_path / "src"), output_path=str(tmp_path / "out"), num_workers=1))


def test_a_linked_folder_is_listed_not_entered_and_never_fails_the_copy(tmp_path):
    # Debian's documentation packages hold links such as `docs -> ../../debian-reference`: fsspec
    # lists a linked folder as one entry, which was copied as a file and failed the step after
    # every retry (and failed identifying the source by content too).
    make_source(tmp_path / "src", FILES)
    (tmp_path / "src" / "docs").symlink_to("sub")
    (tmp_path / "src" / "sub" / "up").symlink_to("..")  # a folder above itself: entering it would never end
    result = download(
        DownloadConfig(source=str(tmp_path / "src"), output_path=str(tmp_path / "out"), num_workers=1, max_retries=0)
    )
    assert result["files"] == 3 and result["skipped_linked_folders"] == 2
    prov = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert prov["skipped_linked_folders"] == [{"path": "docs", "link": "sub"}, {"path": "sub/up", "link": ".."}]
    assert content_digest(str(tmp_path / "src"))["files"] == 3
