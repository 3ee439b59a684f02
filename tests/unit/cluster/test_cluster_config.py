"""Cluster configs: clear errors for bad ones, and rendering the Ray cluster template per zone."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from marin_lab.cluster import ClusterConfigError
from marin_lab.cluster.config import load_cluster_config, parse_cluster_config, render_ray_config

INFRA = Path(__file__).resolve().parents[3] / "infra"
BASE = {
    "cluster_name": "c",
    "project": "p",
    "region": "us-central2",
    "zone": "us-central2-b",
    "image": "img:1",
    "tpu_workers": {"v4-8": {"max_slices": 4}, "v4-32": {"max_slices": 2, "preemptible": False}},
}


def _without(key):
    return {k: v for k, v in BASE.items() if k != key}


@pytest.mark.parametrize(
    "raw, message",
    [
        (_without("zone"), "missing or empty 'zone' .a string, e.g. zone: us-central2-b"),
        ({**BASE, "zone": ""}, "missing or empty 'zone'"),
        (_without("project"), "missing or empty 'project'"),
        ({**BASE, "zone": "europe-west4-a"}, "zone 'europe-west4-a' is not in region 'us-central2'"),
        ({**BASE, "zones": ["a"]}, "unknown field.*'zones'"),
        ({**BASE, "tpu_workers": {"v4-9": {"max_slices": 1}}}, "tpu_workers.v4-9: TPU type 'v4-9' does not exist"),
        ({**BASE, "tpu_workers": {"v4-8": {}}}, "tpu_workers.v4-8: missing 'max_slices'"),
        ({**BASE, "tpu_workers": {"v4-8": {"max_slices": 1, "spot": True}}}, "tpu_workers.v4-8: .*spot"),
        (
            {**BASE, "queued_resources": [{"name": "q", "tpu": "v5e-4", "slices": 2}]},
            r"queued_resources\[0\]: v5e-4 cannot form a multislice job",
        ),
        (
            {**BASE, "queued_resources": [{"name": "q", "tpu": "v4-8", "reservation": "r"}]},
            r"queued_resources\[0\] \(q\): a reservation needs spot: false",
        ),
        ([1, 2], "must be a YAML mapping"),
        ({**BASE, "tpu_workers": [{"tpu": "v4-8", "max_slices": 1}]}, "tpu_workers must map a TPU type to its fields"),
        ({**BASE, "tpu_workers": {"v4-8": 2}}, "tpu_workers.v4-8 must be a mapping of fields"),
        ({**BASE, "queued_resources": {"q": {}}}, "queued_resources must be a list of slices"),
    ],
)
def test_bad_cluster_configs_fail_before_anything_runs(raw, message):
    with pytest.raises(ClusterConfigError, match=f"cluster config bad.yaml: {message}"):
        parse_cluster_config(raw, source="bad.yaml")


def test_missing_zone_in_a_file_names_the_file(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(_without("zone")))
    with pytest.raises(ClusterConfigError, match=f"cluster config {path}: missing or empty 'zone'"):
        load_cluster_config(path)
    with pytest.raises(ClusterConfigError, match="does not exist"):
        load_cluster_config(tmp_path / "nope.yaml")


def test_render_fills_the_template_per_zone():
    rendered = render_ray_config(parse_cluster_config(BASE, source="c.yaml"))
    assert rendered["provider"] == {
        "type": "gcp",
        "region": "us-central2",
        "availability_zone": "us-central2-b",
        "project_id": "p",
        "cache_stopped_nodes": False,
    }
    assert rendered["docker"]["image"] == "img:1"
    assert "tpu_worker_pattern" not in rendered
    v4_32 = rendered["available_node_types"]["tpu_worker_v4_32"]
    assert v4_32["max_workers"] == 2 and v4_32["min_workers"] == 0  # typed, not the string "2"
    assert v4_32["resources"]["TPU"] == 4
    assert v4_32["node_config"]["acceleratorType"] == "v4-32"
    assert v4_32["node_config"]["schedulingConfig"] == {"preemptible": False}
    assert rendered["available_node_types"]["tpu_worker_v4_8"]["node_config"]["schedulingConfig"]["preemptible"]
    assert rendered["max_workers"] == 6
    assert rendered["available_node_types"]["head_default"]["resources"] == {"CPU": 0}
    assert "$RAY_HEAD_IP" in rendered["worker_start_ray_commands"][-1]
    assert "${" not in yaml.safe_dump(rendered)


@pytest.mark.parametrize("name", ["us-central2", "us-west4", "us-east5"])
def test_shipped_cluster_configs_load_and_their_rendered_files_are_current(name):
    config = load_cluster_config(INFRA / "clusters" / f"{name}.yaml")
    rendered = yaml.safe_load((INFRA / f"{config.cluster_name}.yaml").read_text())
    assert rendered == render_ray_config(config), f"re-render with `marin-lab cluster render --config ...{name}.yaml`"


def test_a_template_placeholder_the_config_lacks_is_a_clear_error(tmp_path):
    template = tmp_path / "t.yaml"
    template.write_text(
        "cluster_name: ${cluster_name}\nnetwork: ${vpc}\ntpu_worker_pattern: {}\navailable_node_types: {}\n"
    )
    with pytest.raises(ClusterConfigError, match=r"template field template.network uses \$\{vpc\}"):
        render_ray_config(parse_cluster_config(BASE), template)
