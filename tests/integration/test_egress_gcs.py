"""The egress guard asks the GCS API (here the emulator) for bucket locations.

fake-gcs-server gives every bucket the same location whatever was asked at creation, so a
cross-region refusal is checked with an injected lookup (tests/unit/execution/test_egress.py); here the
real API call: the location comes back lower-cased, and reads within it pass the guard."""

from __future__ import annotations

import uuid

import pytest

from marin_lab.execution import ExecutorMainConfig
from marin_lab.execution.executor import Executor
from marin_lab.execution.review.regions import CrossRegionError, Regions
from marin_lab.io.conditional import gcs_bucket_location, reset_gcs_client
from tests.unit.execution.test_egress import _steps

pytestmark = pytest.mark.gcs


def _bucket(location: str) -> str:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    name = f"egress-{uuid.uuid4().hex[:8]}"
    storage.Client(credentials=AnonymousCredentials(), project="p").create_bucket(name, location=location)
    return name


def test_bucket_locations_come_from_the_api_and_same_region_reads_pass(gcs_emulator):
    reset_gcs_client()
    a, b = _bucket("us-central1"), _bucket("us-central1")
    location = gcs_bucket_location(a)
    assert location and location == location.lower() and location == gcs_bucket_location(b)
    ex = Executor(
        ExecutorMainConfig(prefix=f"gs://{a}/runs", backend="local"), script="x.py", regions=Regions(size=lambda url: 0)
    )
    assert len(ex.plan(_steps(f"gs://{b}/corpus")).steps) == 2 and ex.cross_region_reads == []
    with pytest.raises(CrossRegionError, match="cannot find the location of bucket 'no-such-bucket-"):
        ex.plan(_steps(f"gs://no-such-bucket-{uuid.uuid4().hex[:6]}/corpus"))
