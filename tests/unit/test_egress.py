"""Egress guard: a step reading across regions is refused at plan time, unless allowed per step or
within an experiment-wide transfer budget; allowed reads are recorded."""

from __future__ import annotations

import dataclasses
import json

import pytest

from marin_lab.execution import ExecutorStep, output_path_of, this_output_path, versioned
from marin_lab.execution.executor import Executor
from marin_lab.execution.regions import CrossRegionError, Regions

BUCKETS = {"us-data": "us-central1", "eu-data": "europe-west4"}
SIZES = {"gs://eu-data/corpus": 3_000, "gs://us-data/corpus": 5_000}


@dataclasses.dataclass(frozen=True)
class CopyConfig:
    output_path: str
    source: str


def copy(cfg: CopyConfig) -> None:
    raise AssertionError("never runs: these tests plan only")


def _steps(source: str):
    raw = ExecutorStep(name="raw/corpus", fn=copy, config=CopyConfig(this_output_path(), versioned(source)))
    tok = ExecutorStep(name="tokenized/corpus", fn=copy, config=CopyConfig(this_output_path(), output_path_of(raw)))
    return [tok]


def _executor(prefix="gs://us-data/runs", **kw):
    return Executor(prefix=prefix, backend="local", script="x.py",
                    regions=Regions(BUCKETS.__getitem__, size=SIZES.get), **kw)


def test_a_cross_region_read_is_refused_naming_the_input_both_regions_and_the_way_out():
    with pytest.raises(CrossRegionError) as info:
        _executor().plan(_steps("gs://eu-data/corpus"))
    text = str(info.value)
    assert text.count("\n") == 0
    assert "step 'raw/corpus-" in text and "gs://eu-data/corpus (europe-west4)" in text
    assert "(us-central1)" in text and "--allow_cross_region '^raw/corpus$'" in text
    assert "--transfer_budget_bytes" in text


def test_same_region_and_local_reads_pass():
    assert _executor().plan(_steps("gs://us-data/corpus")) is not None
    assert _executor().cross_region_reads == []


def test_allowed_per_step_or_within_the_budget_and_recorded(tmp_path):
    ex = _executor(allow_cross_region=["^raw/"])
    ex.plan(_steps("gs://eu-data/corpus"))
    (read,) = ex.cross_region_reads
    assert (read.step, read.input_region, read.output_region, read.bytes) == \
        ("raw/corpus", "europe-west4", "us-central1", 3_000)
    assert len(_executor(transfer_budget_bytes=3_000).plan(_steps("gs://eu-data/corpus")).steps) == 2
    with pytest.raises(CrossRegionError, match="transfer budget of 2999 bytes would be exceeded"):
        _executor(transfer_budget_bytes=2_999).plan(_steps("gs://eu-data/corpus"))
    # The experiment record lists what was allowed.
    local = Executor(prefix=str(tmp_path), backend="local", script="x.py", allow_cross_region=["^raw/"],
                     regions=Regions(BUCKETS.__getitem__, size=SIZES.get))
    plan = local.plan(_steps("gs://eu-data/corpus"))
    record = json.loads(open(local._write_experiment(plan)).read())
    assert record["cross_region_reads"][0]["input"] == "gs://eu-data/corpus"
    assert record["cross_region_reads"][0]["output_region"] == "local"


def test_a_bucket_whose_location_cannot_be_read_is_a_plan_error():
    def lookup(bucket):
        raise PermissionError("403")

    with pytest.raises(CrossRegionError, match="cannot find the location of bucket 'us-data'"):
        Executor(prefix="gs://us-data/runs", backend="local", script="x.py", regions=Regions(lookup)).plan(
            _steps("gs://us-data/corpus"))
