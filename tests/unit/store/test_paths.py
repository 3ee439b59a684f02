"""The one containment rule (`marin_lab.io.paths`): both sides resolved before comparing."""

from __future__ import annotations

import os

import pytest

from marin_lab.io.paths import PathOutsideError, canonical, confine, contain_links, is_within, overlaps


@pytest.fixture()
def tree(tmp_path, monkeypatch):
    (tmp_path / "prefix" / "step").mkdir(parents=True)
    (tmp_path / "prefix-old").mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "prefix", tmp_path / "link")
    os.symlink(tmp_path / "outside", tmp_path / "prefix" / "step" / "escape")
    os.symlink("../step", tmp_path / "prefix" / "step" / "loop-back")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "child",
    [
        "{t}/prefix/step",
        "{t}/link/step",
        "file://{t}/link/step",
        "local://{t}/prefix",
        "prefix/step",
        "./link/../prefix/step",
        "{t}/prefix/step/loop-back/x",
        "{t}/prefix/not-yet/made",
    ],
)
def test_every_spelling_of_a_location_inside_is_inside(tree, child):
    assert is_within(child.format(t=tree), f"{tree}/prefix")


@pytest.mark.parametrize("parent", ["{t}/link", "file://{t}/link/", "link", "./prefix/step/.."])
def test_the_parent_is_resolved_too(tree, parent):
    assert is_within(f"{tree}/prefix/step", parent.format(t=tree))


@pytest.mark.parametrize(
    "child",
    [
        "{t}/prefix-old",
        "{t}/prefix/step/escape",
        "{t}/prefix/step/escape/secret",
        "{t}/outside",
        "{t}/prefix/../outside",
        "memory://{t}/prefix/step",
        "gs://bucket{t}/prefix",
    ],
)
def test_siblings_symlinks_out_and_other_protocols_are_outside(tree, child):
    assert not is_within(child.format(t=tree), f"{tree}/prefix")


def test_overlap_is_either_way_and_through_symlinks(tree):
    assert overlaps(f"{tree}/link", f"{tree}/prefix/step") and overlaps(str(tree), f"file://{tree}/link")
    assert not overlaps(f"{tree}/prefix-old", f"{tree}/link")


def test_urls_compare_by_protocol_and_normalised_path():
    assert canonical("gcs://bucket/a//b/./c/") == "gs://bucket/a/b/c"
    assert canonical("memory:///x/y") == canonical("memory://x/y") == "memory://x/y"
    assert is_within("gcs://bucket/prefix/step", "gs://bucket/prefix/")
    assert not is_within("gs://bucket/prefix2/step", "gs://bucket/prefix")
    assert not is_within("gs://other/prefix/step", "gs://bucket/prefix")
    assert is_within("memory://anything", "memory://")
    assert is_within("https://host/a/b", "https://host/a") and not is_within("https://host/ab", "https://host/a")


@pytest.mark.parametrize("url", ["gs://bucket/prefix/../other", "memory://a/../../b"])
def test_a_remote_dot_dot_is_refused_not_guessed(url):
    with pytest.raises(PathOutsideError, match="'..' segment"):
        canonical(url)


def test_confine_returns_the_resolved_path_or_names_what_left(tree):
    assert confine(f"{tree}/link/step", f"{tree}/prefix") == f"{tree}/prefix/step"
    with pytest.raises(PathOutsideError, match=r"stored script .*/escape/x \(resolves to .*/outside/x\) lies outside"):
        confine(f"{tree}/prefix/step/escape/x", f"{tree}/prefix", what="stored script")


def test_contain_links_keeps_a_tree_read_as_its_own_root_inside_itself(tmp_path):
    tree, host = tmp_path / "tree", tmp_path / "host"
    (tree / "usr/share/doc").mkdir(parents=True)
    (tree / "usr/share/doc/own.txt").write_text("own")
    host.mkdir()
    (host / "secret.txt").write_text("HOST")
    links = {
        "usr/share/doc/abs-own": "/usr/share/doc/own.txt",  # absolute, the tree's own file: rewritten
        "usr/share/doc/abs-dir": "/usr/share",  # absolute folder inside: rewritten
        "usr/share/doc/abs-host": str(host / "secret.txt"),  # absolute, a file the tree lacks: dangling inside
        "usr/share/doc/climb": "../../../../host/secret.txt",  # relative, out of the tree: removed
        "usr/share/doc/via": "abs-dir/doc/own.txt",  # through a rewritten link: kept
        "usr/share/doc/via-climb": "climb",  # through a removed one: removed
        "usr/share/doc/abs-climb": "/../../host",  # '..' above the tree's root: removed
        "usr/share/doc/loop-a": "loop-b",
        "usr/share/doc/loop-b": "loop-a",  # never ends: removed
    }
    for rel, target in links.items():
        os.symlink(target, tree / rel)
    removed = contain_links(str(tree))
    assert [r["path"] for r in removed] == [
        f"usr/share/doc/{n}" for n in ("abs-climb", "climb", "loop-a", "loop-b", "via-climb")
    ]
    doc = tree / "usr/share/doc"
    assert (doc / "abs-own").read_text() == (doc / "via").read_text() == "own"
    assert not os.readlink(doc / "abs-own").startswith("/") and (doc / "abs-dir" / "doc" / "own.txt").exists()
    assert not (doc / "abs-host").exists() and is_within(str(doc / "abs-host"), str(tree))
    leaving = [p for p in doc.iterdir() if p.is_symlink() and not is_within(str(p), str(tree))]
    assert leaving == []
