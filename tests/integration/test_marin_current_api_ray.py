"""Marin's name@version artifacts on the executor's Ray backend (marin_lab.marin.step_runner)."""

from __future__ import annotations

import os

import pytest

from marin_lab.marin.artifact import read_record
from marin_lab.marin.lazy import ArtifactStep, run
from marin_lab.marin.remote import remote
from marin_lab.marin.resources import ResourceConfig
from marin_lab.store.step_record import read_step_record
from tests.marin_current_api_steps import Where, where_it_ran

V = "2026.06.28"


@pytest.mark.ray
def test_artifacts_run_as_ray_tasks_with_their_records(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path))
    monkeypatch.setenv("MARIN_LAB_BACKEND", "ray")
    first = ArtifactStep(
        name="ray/first",
        version=V,
        artifact_type=Where,
        run=where_it_ran,
        build_config=lambda ctx: {"out": ctx.output_path},
    )
    second = ArtifactStep(
        name="ray/second",
        version=V,
        artifact_type=Where,
        run=remote(where_it_ran, resources=ResourceConfig.with_cpu(cpu=1)),
        build_config=lambda ctx: {"out": ctx.output_path, "after": ctx.artifact_path(first)},
        deps=(first,),
    )
    (built,) = run(second)
    assert built.pid not in (0, os.getpid())  # a Ray worker ran it, not the driver
    for name in ("first", "second"):
        out = tmp_path / "ray" / name / V
        assert (out / "ok").read_text() == "ok"
        assert read_record(str(out)).name == f"ray/{name}"
        record = read_step_record(str(out))
        assert record is not None and record.status == "SUCCESS" and record.backend == "ray"
