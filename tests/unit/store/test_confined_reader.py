"""marin_lab.io.confined, the one reader of files others wrote: links out of the roots, named pipes,
sockets and devices, files too large, each refused without being opened or followed."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from marin_lab.browser.errors import ForbiddenPathError
from marin_lab.browser.paths import Roots
from marin_lab.io import confined


@pytest.fixture
def tree(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET")
    (root / "linked.txt").symlink_to(outside / "secret.txt")
    (root / "plain.txt").write_text("plain")
    os.mkfifo(root / "pipe")
    return root, Roots.of([str(root)])


def _returns_within(fn, timeout_s: float = 10):
    """fn() on a thread; fails (instead of hanging) when it blocks, as opening a FIFO would."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as err:  # handed back to the test
            out["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), "the reader blocked"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("confinement", [None, "roots"])
def test_a_named_pipe_is_refused_from_its_stat(tree, confinement):
    root, roots = tree
    where = roots if confinement else None
    for fn in (confined.open_file, confined.file_info):
        with pytest.raises(confined.SpecialFileError, match="named pipe"):
            _returns_within(lambda fn=fn: fn(str(root / "pipe"), where))
    assert _returns_within(lambda: confined.exists(str(root / "pipe"), where)) is False
    with pytest.raises(PermissionError, match="not read: .*named pipe"):
        _returns_within(lambda: confined.read_record(str(root / "pipe"), where))


def test_a_socket_and_a_device_are_refused(tree, tmp_path):
    root, _ = tree
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(root / "sock"))
        with pytest.raises(confined.SpecialFileError, match="a socket"):
            confined.open_file(str(root / "sock"))
    finally:
        sock.close()
    with pytest.raises(confined.SpecialFileError, match="a device"):
        confined.open_file("/dev/zero")  # endless: read whole, it would never end


def test_a_link_out_of_the_roots_is_refused_there_and_followed_elsewhere(tree):
    root, roots = tree
    with pytest.raises(ForbiddenPathError, match="outside the browser's roots") as err:
        confined.read_bounded(str(root / "linked.txt"), 100, roots)
    assert isinstance(err.value, confined.RefusedPathError)
    with pytest.raises(PermissionError, match="outside"):
        confined.read_record(str(root / "linked.txt"), roots)
    assert confined.read_bounded(str(root / "linked.txt"), 100) == b"SECRET"  # unconfined: the command line
    assert confined.read_bounded(str(root / "plain.txt"), 100, roots) == b"plain"


def test_a_folder_swapped_for_a_link_after_the_check_is_caught_on_the_descriptor(tree, tmp_path):
    root, roots = tree
    (root / "sub").mkdir()
    (root / "sub" / "secret.txt").write_text("inside")

    class SwapAfterResolve:
        """The roots, with the folder replaced by a link out between the check and the open."""

        def resolve(self, requested):
            target = roots.resolve(requested)
            os.rename(root / "sub", tmp_path / "sub-moved")
            (root / "sub").symlink_to(tmp_path / "outside")
            return target

        def check_real(self, real, original):
            roots.check_real(real, original)

    with pytest.raises(ForbiddenPathError, match="outside"):
        confined.open_file(str(root / "sub" / "secret.txt"), SwapAfterResolve())


def test_missing_large_and_folder(tree):
    root, roots = tree
    with pytest.raises(FileNotFoundError):
        confined.open_file(str(root / "nope.txt"), roots)
    assert confined.read_record(str(root / "nope.txt"), roots) is None
    with pytest.raises(IsADirectoryError):
        confined.open_file(str(root), roots)
    with pytest.raises(confined.FileTooLargeError):
        confined.read_bounded(str(root / "plain.txt"), 3, roots)
    assert confined.file_info(str(root), roots) == {"type": "directory", "size": 0}
    assert confined.file_info(str(root / "plain.txt"), roots) == {"type": "file", "size": 5}
