"""The bad-shard report has one parser (`marin_lab.store.bad_shards`); damage is one line naming
the file and what to do, for `marin-lab rerun-shards` and the step's next run alike."""

from __future__ import annotations

import pytest

from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.quarantine import read_report
from marin_lab.store.bad_shards import BadShardsReportError, parse_bad_shards, read_bad_shards
from marin_lab.store.layout import BAD_SHARDS_FILE


def test_a_sound_report_and_none():
    raw = b'{"bad": [{"shard": "s-00001", "error": "boom"}], "total": 4}'
    assert parse_bad_shards(raw, "r.json")["bad"] == [{"shard": "s-00001", "error": "boom"}]


@pytest.mark.parametrize(
    "raw, why",
    [
        (b"{torn", "JSONDecodeError"),
        (b"\xff", "UnicodeDecodeError"),
        (b'{"bad": {}}', "not an object with a `bad` list"),
        (b'{"bad": ["s-1"]}', "bad[0] is str, not an object naming a shard"),
    ],
)
def test_damage_is_one_line_naming_the_file(tmp_path, raw, why):
    (tmp_path / BAD_SHARDS_FILE).write_bytes(raw)
    url = str(tmp_path / BAD_SHARDS_FILE)
    with pytest.raises(BadShardsReportError) as err:
        read_bad_shards(str(tmp_path))
    text = str(err.value)
    assert text.startswith(f"{url} is damaged (") and why in text and "\n" not in text
    assert text.endswith("delete it and rerun the experiment with --force_run_failed true")
    with pytest.raises(ProcessingError) as err2:  # what rerun-shards and the step's next run get
        read_report(str(tmp_path))
    assert str(err2.value) == text


def test_no_report_is_none(tmp_path):
    assert read_bad_shards(str(tmp_path)) is None and read_report(str(tmp_path)) is None
