"""Path confinement of the data browser: nothing outside the configured roots is ever opened."""

from __future__ import annotations

import os

import pytest

from marin_lab.browser.errors import BadRequestError, ForbiddenPathError
from marin_lab.browser.paths import Roots


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "prefix"
    (root / "step-1234abcd").mkdir(parents=True)
    (root / "step-1234abcd" / "data.jsonl").write_text("{}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    os.symlink(outside, root / "step-1234abcd" / "escape")
    os.symlink(root / "step-1234abcd", root / "inner-link")
    (tmp_path / "prefix-sibling").mkdir()
    return root, outside


def test_local_path_inside_root_is_returned_normalised(tree):
    root, _ = tree
    roots = Roots.of([str(root)])
    assert roots.resolve(str(root / "step-1234abcd" / "data.jsonl")) == str(root / "step-1234abcd" / "data.jsonl")
    assert roots.resolve(f"{root}//step-1234abcd/./data.jsonl") == str(root / "step-1234abcd" / "data.jsonl")
    assert roots.resolve(str(root)) == str(root)


def test_relative_path_is_taken_inside_the_first_root(tree):
    root, _ = tree
    assert Roots.of([str(root)]).resolve("step-1234abcd/data.jsonl") == str(root / "step-1234abcd" / "data.jsonl")


@pytest.mark.parametrize("suffix", ["../outside/secret.txt", "step-1234abcd/../../outside/secret.txt", ".."])
def test_dot_dot_segments_are_refused(tree, suffix):
    root, _ = tree
    with pytest.raises(ForbiddenPathError, match=r"'\.\.'"):
        Roots.of([str(root)]).resolve(f"{root}/{suffix}")


def test_symlink_leaving_the_root_is_refused_but_one_inside_is_followed(tree):
    root, outside = tree
    roots = Roots.of([str(root)])
    with pytest.raises(ForbiddenPathError, match="outside the browser's roots"):
        roots.resolve(str(root / "step-1234abcd" / "escape" / "secret.txt"))
    assert roots.resolve(str(root / "inner-link" / "data.jsonl")).endswith("inner-link/data.jsonl")


def test_sibling_folder_sharing_the_root_name_prefix_is_outside(tree):
    root, _ = tree
    with pytest.raises(ForbiddenPathError):
        Roots.of([str(root)]).resolve(str(root) + "-sibling")


@pytest.mark.parametrize("bad", ["", "   ", "a\x00b"])
def test_empty_or_nul_paths_are_bad_requests(tree, bad):
    root, _ = tree
    with pytest.raises(BadRequestError):
        Roots.of([str(root)]).resolve(bad)


def test_bucket_roots_confine_protocol_bucket_and_prefix():
    roots = Roots.of(["gs://bucket/prefix/"])
    assert roots.resolve("gs://bucket/prefix/a/b.jsonl") == "gs://bucket/prefix/a/b.jsonl"
    assert roots.resolve("gcs://bucket/prefix/a") == "gs://bucket/prefix/a"
    assert roots.resolve("a/b") == "gs://bucket/prefix/a/b"
    for bad in [
        "gs://other/prefix/a",
        "gs://bucket/prefix2/a",
        "gs://bucket/prefix/../x",
        "s3://bucket/prefix/a",
        "/etc/passwd",
        "file:///etc/passwd",
    ]:
        with pytest.raises(ForbiddenPathError):
            roots.resolve(bad)


def test_several_roots_each_allow_their_own_tree(tree):
    root, outside = tree
    roots = Roots.of([str(root), "memory://shared"])
    assert roots.contains(str(root / "step-1234abcd"))
    assert roots.contains("memory://shared/x")
    assert not roots.contains(str(outside / "secret.txt"))
    assert not roots.contains("memory://other/x")
