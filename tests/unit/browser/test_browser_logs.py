"""The browser's log reader: a tail of whole lines, then only what was added."""

import pytest

from marin_lab.browser.errors import BadRequestError, ForbiddenPathError, NotFoundError
from marin_lab.browser.logs import read_log
from marin_lab.browser.paths import Roots


@pytest.fixture
def step_dir(tmp_path):
    (tmp_path / "step" / "logs").mkdir(parents=True)
    return tmp_path / "step"


def test_tail_then_only_new_whole_lines(step_dir):
    roots = Roots.of([str(step_dir.parent)])
    log = step_dir / "logs" / "attempt-1.log"
    log.write_bytes(b"".join(f"line {i}\n".encode() for i in range(100)))
    tail = read_log(roots, str(step_dir), max_bytes=64)
    assert tail["state"] == "ok" and tail["attempt"] == 1 and tail["text"].endswith("line 99\n")
    assert tail["text"].startswith("line ")  # the tail starts at a line's beginning
    assert read_log(roots, str(step_dir), offset=tail["next_offset"])["text"] == ""
    with open(log, "ab") as f:
        f.write(b"line 100\npartial")
    more = read_log(roots, str(step_dir), offset=tail["next_offset"], max_bytes=12)
    assert more["text"] == "line 100\n"  # not the unfinished "partial" while more is to come
    assert read_log(roots, str(step_dir), offset=more["next_offset"])["text"] == "partial"


def test_latest_attempt_by_default_and_errors(step_dir, tmp_path):
    roots = Roots.of([str(step_dir.parent)])
    assert read_log(roots, str(step_dir))["state"] == "missing"
    (step_dir / "logs" / "attempt-1.log").write_text("first\n")
    (step_dir / "logs" / "attempt-2.log").write_text("second\n")
    assert read_log(roots, str(step_dir))["text"] == "second\n"
    assert read_log(roots, str(step_dir), attempt=1)["attempts"] == [1, 2]
    with pytest.raises(NotFoundError, match="attempt 3"):
        read_log(roots, str(step_dir), attempt=3)
    with pytest.raises(BadRequestError):
        read_log(roots, str(step_dir), offset=-1)
    with pytest.raises(ForbiddenPathError):
        read_log(Roots.of([str(step_dir / "logs")]), str(tmp_path))
