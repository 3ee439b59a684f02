"""Egress guard: a step reading across regions is refused at plan time, unless allowed per step or
within an experiment-wide transfer budget; allowed reads are recorded."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from marin_lab.execution import ExecutorMainConfig, ExecutorStep, output_path_of, this_output_path, versioned
from marin_lab.execution.executor import Executor
from marin_lab.execution.review.regions import CrossRegionError, Regions

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


def _executor(prefix="gs://us-data/runs", **settings):
    return Executor(
        ExecutorMainConfig(prefix=prefix, backend="local", **settings),
        script="x.py",
        regions=Regions(BUCKETS.__getitem__, size=SIZES.get),
    )


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
    assert (read.step, read.input_region, read.output_region, read.bytes) == (
        "raw/corpus",
        "europe-west4",
        "us-central1",
        3_000,
    )
    assert len(_executor(transfer_budget_bytes=3_000).plan(_steps("gs://eu-data/corpus")).steps) == 2
    with pytest.raises(CrossRegionError, match="transfer budget of 2999 bytes would be exceeded"):
        _executor(transfer_budget_bytes=2_999).plan(_steps("gs://eu-data/corpus"))
    # The experiment record lists what was allowed.
    local = Executor(
        ExecutorMainConfig(prefix=str(tmp_path), backend="local", allow_cross_region=["^raw/"]),
        script="x.py",
        regions=Regions(BUCKETS.__getitem__, size=SIZES.get),
    )
    plan = local.plan(_steps("gs://eu-data/corpus"))
    record = json.loads(Path(local._write_experiment(plan)).read_text())
    assert record["cross_region_reads"][0]["input"] == "gs://eu-data/corpus"
    assert record["cross_region_reads"][0]["output_region"] == "local"


def test_a_bucket_whose_location_cannot_be_read_is_a_plan_error():
    def lookup(bucket):
        raise PermissionError("403")

    with pytest.raises(CrossRegionError, match="cannot find the location of bucket 'us-data'"):
        Executor(
            ExecutorMainConfig(prefix="gs://us-data/runs", backend="local"), script="x.py", regions=Regions(lookup)
        ).plan(_steps("gs://us-data/corpus"))


# --- one lookup per bucket, input URLs from the identity walk, nothing for a plan without buckets ------


class _Counting:
    """A bucket-location lookup that counts its calls."""

    def __init__(self, table=BUCKETS):
        self.table, self.calls = table, []

    def __call__(self, bucket):
        self.calls.append(bucket)
        return self.table[bucket]


def _fan(n: int, source: str):
    """n readers of `source` below one writer: n + 1 steps, each with a bucket input."""
    raw = ExecutorStep(name="raw/corpus", fn=copy, config=CopyConfig(this_output_path(), versioned(source)))
    return [
        ExecutorStep(name=f"tok/{i}", fn=copy, config=CopyConfig(this_output_path(), output_path_of(raw)))
        for i in range(n)
    ] + [raw]


def test_each_bucket_is_asked_once_whatever_the_number_of_steps_and_spellings():
    lookup = _Counting()
    regions = Regions(lookup, size=SIZES.get)
    ex = Executor(
        ExecutorMainConfig(prefix="gs://us-data/runs", backend="local", allow_cross_region=["^raw/"]),
        script="x.py",
        regions=regions,
    )
    ex.plan(_fan(50, "gs://eu-data/corpus"))
    assert sorted(lookup.calls) == ["eu-data", "us-data"] and regions.lookups == 2
    assert [r.input for r in ex.cross_region_reads] == ["gs://eu-data/corpus"]
    # gcs:// names the same bucket; a second plan with the same Regions asks nothing again.
    ex.plan(_fan(5, "gcs://eu-data/corpus"))
    assert sorted(lookup.calls) == ["eu-data", "us-data"]


@dataclasses.dataclass(frozen=True)
class Nested:
    output_path: str
    sources: dict
    knobs: tuple = ()


def test_a_plan_without_bucket_paths_asks_nothing(tmp_path):
    def lookup(bucket):
        raise AssertionError(f"asked for {bucket}")

    regions = Regions(lookup)
    raw = ExecutorStep(
        name="raw",
        fn=copy,
        config=Nested(
            this_output_path(),
            {"web": versioned("https://example.com/data.jsonl"), "hub": "hf://datasets/x", "local": str(tmp_path)},
        ),
    )
    tok = ExecutorStep(name="tok", fn=copy, config=CopyConfig(this_output_path(), output_path_of(raw)))
    ex = Executor(ExecutorMainConfig(prefix=str(tmp_path / "store"), backend="local"), script="x.py", regions=regions)
    ex.plan([tok])
    assert regions.lookups == 0 and ex.cross_region_reads == [] and ex.unchecked_reads == []


def _reference_urls(value):
    """The egress guard's input URLs as its own second walk found them before they came from the
    identity walk: every `scheme://` string, inside versioned values too, placeholders excluded."""
    import re

    from marin_lab.execution.plan.step import InputName, OutputName, VersionedValue

    if isinstance(value, VersionedValue):
        value = value.value
    if isinstance(value, InputName | OutputName):
        return []
    if isinstance(value, str):
        return [value] if re.match(r"^[a-z][a-z0-9+.-]*://", value) else []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [u for f in dataclasses.fields(value) for u in _reference_urls(getattr(value, f.name))]
    if isinstance(value, dict):
        return [u for v in value.values() for u in _reference_urls(v)]
    if isinstance(value, list | tuple):
        return [u for v in value for u in _reference_urls(v)]
    return []


@pytest.mark.parametrize(
    "sources",
    [
        {"a": "gs://eu-data/corpus"},
        {"a": versioned("gs://eu-data/corpus")},
        {"a": versioned(["gs://us-data/x", {"deep": "gs://eu-data/corpus"}])},
        {"a": [("gs://eu-data/corpus", 3)], "b": "not a url", "c": "gs:/almost"},
        {"a": {"b": {"c": versioned({"d": "gcs://eu-data/corpus"})}}},
    ],
)
def test_the_identity_walk_finds_the_urls_the_second_walk_found_and_refuses_the_same_reads(sources):
    from marin_lab.execution.plan.hashing import scan_config

    cfg = Nested(this_output_path(), sources, knobs=(versioned(1), "http://x/y"))
    assert scan_config(cfg, step_label="s").urls == _reference_urls(cfg)
    step = ExecutorStep(name="raw/nested", fn=copy, config=cfg)
    with pytest.raises(CrossRegionError, match=r"would read gc?s://eu-data/corpus \(europe-west4\)"):
        _executor().plan([step])


def test_a_fixed_url_input_is_an_input_too():
    from marin_lab.execution.plan.step import InputName

    step = ExecutorStep(
        name="raw/fixed", fn=copy, config=CopyConfig(this_output_path(), InputName.hardcoded("gs://eu-data/corpus"))
    )
    with pytest.raises(CrossRegionError, match=r"would read gs://eu-data/corpus \(europe-west4\)"):
        _executor().plan([step])


# --- a plan never needs credentials ---------------------------------------------------------------


def _no_credentials(bucket):
    from google.auth.exceptions import DefaultCredentialsError

    raise DefaultCredentialsError("Your default credentials were not found.")


def test_a_plan_without_credentials_leaves_regions_unchecked_and_the_run_refuses(tmp_path, capsys, monkeypatch):
    import marin_lab.execution.executor as executor_module

    listed = []  # the prefix cannot be read: the plan never waits on the client's credential retries there

    def no_listing(url):
        listed.append(url)
        raise OSError(f"the plan listed {url}, which it cannot read")

    monkeypatch.setattr(executor_module, "fs_and_path", no_listing)
    regions = Regions(_no_credentials, size=SIZES.get)
    ex = Executor(ExecutorMainConfig(prefix="gs://us-data/runs", backend="local"), script="x.py", regions=regions)
    report = ex.run(_steps("gs://eu-data/corpus"), dry_run=True)
    out = capsys.readouterr().out
    assert report.outcomes == {} and len(report.decisions) == 2
    assert "egress: region of gs://us-data unchecked (DefaultCredentialsError" in out
    assert "the run checks them before it starts" in out
    # Nothing under the prefix was read (it would need the same credentials): each step says so.
    assert all(
        d.action == "run" and d.reason.startswith("status not read: cannot reach gs://us-data/runs")
        for d in report.decisions
    )
    # Bounded: after the first "cannot ask", no other bucket is asked.
    assert regions.lookups == 1 and set(regions.unchecked) == {"us-data", "eu-data"}
    # JSON and Markdown say it too.
    ex.run(_steps("gs://eu-data/corpus"), dry_run=True, plan_format="json")
    doc = json.loads(capsys.readouterr().out)
    assert {e["bucket"] for e in doc["unchecked_regions"]} == {"gs://us-data", "gs://eu-data"}
    assert doc["unchecked_regions"][0]["region"] == "unchecked"
    ex.run(_steps("gs://eu-data/corpus"), dry_run=True, plan_format="markdown")
    assert "**Egress:** region of gs://us-data unchecked" in capsys.readouterr().out
    assert listed == []
    # The real run checks before anything runs, and refuses what it cannot check.
    with pytest.raises(
        CrossRegionError,
        match="cannot find the location of bucket 'us-data' "
        r"\(DefaultCredentialsError",
    ):
        ex.run(_steps("gs://eu-data/corpus"))


def test_a_run_with_credentials_refuses_the_read_a_plan_left_unchecked():
    answers = {"ok": False}

    def lookup(bucket):
        if not answers["ok"]:
            _no_credentials(bucket)
        return BUCKETS[bucket]

    ex = Executor(
        ExecutorMainConfig(prefix="gs://us-data/runs", backend="local"),
        script="x.py",
        regions=Regions(lookup, size=SIZES.get),
    )
    ex.plan(_steps("gs://eu-data/corpus"))
    # Reading within the prefix's own bucket is never cross-region, checked or not.
    assert [r.input for r in ex.unchecked_reads] == ["gs://eu-data/corpus"]
    answers["ok"] = True
    with pytest.raises(CrossRegionError, match=r"gs://eu-data/corpus \(europe-west4\)"):
        ex.run(_steps("gs://eu-data/corpus"))


def test_a_definite_answer_is_still_an_error_in_a_plan():
    from google.api_core.exceptions import NotFound

    def lookup(bucket):
        raise NotFound("no such bucket")

    with pytest.raises(CrossRegionError, match="cannot find the location of bucket 'us-data' .NotFound"):
        Executor(
            ExecutorMainConfig(prefix="gs://us-data/runs", backend="local"), script="x.py", regions=Regions(lookup)
        ).plan(_steps("gs://eu-data/corpus"))


def test_a_lookup_that_never_answers_is_given_up_within_the_bound(monkeypatch):
    import threading
    import time

    from marin_lab.execution.review import regions as regions_module

    monkeypatch.setattr(regions_module, "PLAN_TIMEOUT_S", 0.2)
    release = threading.Event()

    def hang(bucket):
        release.wait(30)
        return "us-central1"

    regions = Regions(hang)
    t0 = time.monotonic()
    ex = Executor(ExecutorMainConfig(prefix="gs://us-data/runs", backend="local"), script="x.py", regions=regions)
    ex.plan(_steps("gs://eu-data/corpus"))
    release.set()
    assert time.monotonic() - t0 < 5
    assert regions.lookups == 1 and "TimeoutError: no answer within 0.2 s" in regions.unchecked["us-data"]


def test_same_identities_under_two_bucket_prefixes_as_a_dry_run_without_credentials(monkeypatch, capsys):
    """Marin's "the version is the same under two gs:// prefixes", as a dry run with no credentials and
    no network: the client's own lookup, against a closed port."""
    from marin_lab.io.conditional import reset_gcs_client
    from tests.conftest import free_port

    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    reset_gcs_client()
    try:
        identities = []
        for prefix in ("gs://bucket-a/prefix", "gs://bucket-b/other/prefix"):
            ex = Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script="x.py")
            ex.run(_steps("gs://bucket-c/corpus"), dry_run=True, plan_format="json")
            doc = json.loads(capsys.readouterr().out)
            identities.append([s["identity"] for s in doc["steps"]])
            assert doc["unchecked_regions"] and doc["unchecked_regions"][0]["reason"].startswith("ConnectionError")
            assert all(s["output_path"].startswith(prefix + "/") for s in doc["steps"])
        assert identities[0] == identities[1] and len(identities[0]) == 2
    finally:
        reset_gcs_client()


EXPERIMENT = """
import dataclasses
from marin_lab.execution import ExecutorStep, executor_main, output_path_of, this_output_path, versioned

@dataclasses.dataclass(frozen=True)
class C:
    output_path: str
    source: str

def f(c):
    raise AssertionError("a dry run runs nothing")

raw = ExecutorStep(name="raw/corpus", fn=f, config=C(this_output_path(), versioned("gs://eu-data/corpus")))
tok = ExecutorStep(name="tok/corpus", fn=f, config=C(this_output_path(), output_path_of(raw)))
if __name__ == "__main__":
    executor_main([tok])
"""


@pytest.mark.slow
def test_the_dry_run_and_explain_commands_need_no_credentials(tmp_path):
    """As a CI job without credentials runs them: no key file, no gcloud config, no metadata server."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    script = tmp_path / "exp.py"
    script.write_text(EXPERIMENT)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "MARIN_PREFIX")
    }
    env.update(HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), NO_GCE_CHECK="true", PYTHONPATH=REPO_ROOT)
    dry = subprocess.run(
        [sys.executable, str(script), "--prefix", "gs://us-data/runs", "--dry_run", "true", "--format", "markdown"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "**Egress:** region of gs://eu-data unchecked (DefaultCredentialsError" in dry.stdout
    assert "status not read: cannot reach gs://us-data/runs without credentials or network" in dry.stdout
    explain = subprocess.run(
        [sys.executable, "-m", "marin_lab.cli", "explain", str(script), "--prefix", "gs://us-data/runs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert explain.returncode == 0, explain.stderr[-2000:]
    assert "egress: bucket regions not checked (DefaultCredentialsError" in explain.stdout
    assert "tok/corpus-" in explain.stdout and "Traceback" not in explain.stderr
    # The real run refuses: the region cannot be checked.
    run = subprocess.run(
        [sys.executable, str(script), "--prefix", "gs://us-data/runs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0 and "cannot find the location of bucket" in run.stderr + run.stdout
    assert "Traceback" not in run.stderr


def test_pinned_bucket_outputs_in_a_local_plan_are_still_checked():
    """Under a local prefix only a pinned output path can be a bucket path: the plan lists the steps
    that may pin one (`Plan.uncommon`), and the guard checks those among many common local steps."""
    local = [
        ExecutorStep(name=f"local/{i}", fn=copy, config=CopyConfig(this_output_path(), versioned(str(i))))
        for i in range(50)
    ]
    raw = ExecutorStep(
        name="raw/corpus",
        fn=copy,
        config=CopyConfig(this_output_path(), output_path_of(local[3])),
        override_output_path="gs://eu-data/raw",
    )
    tok = ExecutorStep(
        name="tokenized/corpus",
        fn=copy,
        config=CopyConfig(this_output_path(), output_path_of(raw)),
        override_output_path="gs://us-data/tok",
    )
    with pytest.raises(CrossRegionError, match=r"would read gs://eu-data/raw \(europe-west4\)"):
        _executor(prefix="/tmp/local-runs").plan([*local, tok])
    ex = _executor(prefix="/tmp/local-runs")
    plan = ex.plan(local)
    assert plan.uncommon == [] and not plan.names_urls and ex.cross_region_reads == []
