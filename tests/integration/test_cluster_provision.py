"""Provisioning queued resources against a fake Cloud TPU API that speaks the client's gRPC protocol."""

from __future__ import annotations

import json
import logging

import pytest

from marin_lab.cluster import ProvisioningError
from marin_lab.cluster.cli import main
from marin_lab.cluster.config import QueuedSlice
from marin_lab.cluster.provision import SlicePreempted, TpuProvisioner, make_tpu_client
from marin_lab.testing.fake_tpu_api import FakeTpuApi

SECRET = "ya29.SECRET-ACCESS-TOKEN-do-not-log"


@pytest.fixture
def api(monkeypatch):
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    with FakeTpuApi(secure=True) as fake:
        yield fake


def _provisioner(api, **kwargs) -> TpuProvisioner:
    client = make_tpu_client(channel=api.channel(token=SECRET))
    return TpuProvisioner("proj", "us-west4-a", client=client, sleep=lambda s: None, **kwargs)


def test_multislice_spot_request_shape_and_states(api):
    provisioner = _provisioner(api)
    provisioner.create(QueuedSlice(name="big", tpu="v5e-256", slices=2), runtime_version="v2-alpha-tpuv5-lite")
    request = api.requests[0]["request"]
    assert request["parent"] == "projects/proj/locations/us-west4-a"
    assert request["queued_resource_id"] == "big"
    spec = request["queued_resource"]["tpu"]["node_spec"][0]
    assert spec["multislice_params"] == {"node_count": 2, "node_id_prefix": "big"}
    assert spec["node"]["accelerator_type"] == "v5litepod-256"
    assert spec["node"]["runtime_version"] == "v2-alpha-tpuv5-lite"
    assert "spot" in request["queued_resource"]

    status = provisioner.wait_active("big", poll_s=0)
    assert status.state == "ACTIVE" and status.slices == 2 and status.tpu == "v5e-256" and status.spot
    assert status.nodes == (("big-0", "READY"), ("big-1", "READY"))
    gets = [r for r in api.requests if r["method"] == "GetQueuedResource"]
    assert len(gets) == 3  # ACCEPTED -> PROVISIONING -> ACTIVE, one poll each

    # `up` run twice (a rerun after a crash) reuses the queued resource instead of failing
    provisioner.create(QueuedSlice(name="big", tpu="v5e-256", slices=2), runtime_version="v2-alpha-tpuv5-lite")
    assert [s.name for s in provisioner.list()] == ["big"]


def test_single_slice_reserved_request(api):
    provisioner = _provisioner(api)
    provisioner.create(
        QueuedSlice(name="res", tpu="v6e-256", spot=False, reservation="projects/p/reservations/r"),
        runtime_version="v2-alpha-tpuv6e",
    )
    qr = api.requests[0]["request"]["queued_resource"]
    assert qr["reservation_name"] == "projects/p/reservations/r" and "guaranteed" in qr and "spot" not in qr
    assert qr["tpu"]["node_spec"][0]["node_id"] == "res"
    assert "multislice_params" not in qr["tpu"]["node_spec"][0]


def test_preempted_queued_resource_is_reported(api):
    provisioner = _provisioner(api)
    provisioner.create(QueuedSlice(name="spot", tpu="v4-8"), runtime_version="tpu-ubuntu2204-base")
    provisioner.wait_active("spot", poll_s=0)
    api.preempt("spot")
    status = provisioner.get("spot")
    assert status.preempted and status.state == "SUSPENDED" and status.nodes == (("spot", "PREEMPTED"),)
    with pytest.raises(SlicePreempted, match="queued resource spot .* was preempted"):
        provisioner.wait_active("spot", poll_s=0)


def test_failed_queued_resource_raises_with_the_api_reason(api):
    provisioner = _provisioner(api)
    provisioner.create(QueuedSlice(name="nope", tpu="v5p-128"), runtime_version="v2-alpha-tpuv5")
    api.fail("nope", "quota exceeded for TPUV5P in us-west4-a")
    with pytest.raises(ProvisioningError, match="nope .* FAILED: quota exceeded"):
        provisioner.wait_active("nope", poll_s=0)


def test_waiting_times_out_with_an_injected_clock(monkeypatch):
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    with FakeTpuApi(progression=("WAITING_FOR_RESOURCES",) * 100) as fake:
        ticks = iter(range(0, 10_000, 600))
        provisioner = TpuProvisioner(
            "proj",
            "us-west4-a",
            client=make_tpu_client(channel=fake.channel()),
            sleep=lambda s: None,
            clock=lambda: next(ticks),
        )
        provisioner.create(QueuedSlice(name="q", tpu="v4-8"), runtime_version="x")
        with pytest.raises(ProvisioningError, match="still WAITING_FOR_RESOURCES after 1800s"):
            provisioner.wait_active("q", timeout_s=1800, poll_s=60)


def test_cli_up_status_down_against_the_fake_api(api, tmp_path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    commands: list[list[str]] = []
    lines: list[str] = []
    client = make_tpu_client(channel=api.channel(token=SECRET))
    config = "infra/clusters/us-west4.yaml"
    common = {
        "client": client,
        "run": lambda cmd, **kw: commands.append(cmd),
        "emit": lines.append,
        "sleep": lambda s: None,
    }
    ray_config = str(tmp_path / "ray.yaml")

    assert main(["up", "--config", config, "--no_ray", "--ray_config", ray_config], **common) == 0
    assert lines[-1] == "tootsie-v5e: ACTIVE (2 x v5e-256)"
    assert main(["status", "--config", config, "--json"], **common) == 0
    assert json.loads(lines[-1])[0]["state"] == "ACTIVE"

    api.preempt("tootsie-v5e")
    assert main(["status", "--config", config], **common) == 3  # degraded: say so to scripts
    assert any("tootsie-v5e" in line and "PREEMPTED" in line for line in lines)

    assert main(["down", "--config", config, "--ray_config", ray_config], **common) == 0
    assert commands == [["ray", "down", "-y", ray_config]]
    assert api.queued == {}

    # the token went to the API (as the authorization header) and nowhere else
    assert any(r["metadata"].get("authorization") == f"Bearer {SECRET}" for r in api.requests)
    captured = capsys.readouterr()
    for text in ("\n".join(lines), caplog.text, captured.out, captured.err, (tmp_path / "ray.yaml").read_text()):
        assert SECRET not in text and "authorization" not in text.lower()


def test_dry_run_prints_exact_requests_without_credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no gcloud application-default credentials either
    lines: list[str] = []
    commands: list = []
    code = main(
        ["up", "--config", "infra/clusters/us-west4.yaml", "--dry_run"],
        emit=lines.append,
        run=lambda *a, **k: commands.append(a),
    )
    assert code == 0 and commands == []  # nothing executed
    assert "$ ray up -y --no-config-cache" in "\n".join(lines)
    request = json.loads(next(line for line in lines if line.startswith("{")))
    assert request["dry_run"] is True and request["method"] == "CreateQueuedResource"
    body = request["request"]
    assert body["queuedResourceId"] == "tootsie-v5e"
    assert body["queuedResource"]["tpu"]["nodeSpec"][0]["multisliceParams"] == {
        "nodeCount": 2,
        "nodeIdPrefix": "tootsie-v5e",
    }
    assert body["queuedResource"]["spot"] == {}
    assert (
        "ray start --address=<ray-head-ip>:6379"
        in body["queuedResource"]["tpu"]["nodeSpec"][0]["node"]["metadata"]["startup-script"]
    )

    lines.clear()
    assert main(["down", "--config", "infra/clusters/us-west4.yaml", "--dry_run"], emit=lines.append) == 0
    delete = json.loads(lines[0])
    assert delete["method"] == "DeleteQueuedResource" and delete["request"]["force"] is True
    assert lines[-1].startswith("$ ray down -y")


def test_cli_reports_a_bad_config_clearly(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("cluster_name: c\nproject: p\nregion: us-west4\nimage: i\n")
    lines: list[str] = []
    assert main(["status", "--config", str(bad)], emit=lines.append) == 2
    assert lines == [f"error: cluster config {bad}: missing or empty 'zone' (a string, e.g. zone: us-central2-b)"]
