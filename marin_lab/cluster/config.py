"""Cluster config files (`infra/clusters/*.yaml`) and rendering them into Ray cluster configs.

A cluster config names one region/zone: the GCP project, the container image, the head node, the
preemptible TPU worker types the Ray autoscaler may bring up (with how many slices of each), and
the queued resources `marin-lab cluster up` provisions directly. `render_ray_config` fills
`infra/marin-cluster-template.yaml` from it: `${name}` placeholders, plus one worker node type per
TPU type built from the template's `tpu_worker_pattern`. Every mistake is reported with the file
and the field before anything is created.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from marin_lab.cluster.errors import ClusterConfigError, TpuRequestError
from marin_lab.cluster.tpu_types import check_slice_count, parse_tpu_type

DEFAULT_TEMPLATE = Path(__file__).resolve().parents[2] / "infra" / "marin-cluster-template.yaml"
DEFAULT_RUNTIME_VERSION = "tpu-ubuntu2204-base"
_PLACEHOLDER = re.compile(r"^\$\{(\w+)\}$")


@dataclasses.dataclass(frozen=True)
class TpuWorkerType:
    """A preemptible TPU worker type the autoscaler may start."""

    tpu: str
    """TPU type, e.g. 'v5e-256'."""
    max_slices: int
    """The most slices of this type the cluster will ever hold."""
    min_slices: int = 0
    """Slices kept up even when idle."""
    preemptible: bool = True
    """Spot/preemptible capacity (cheaper, may be reclaimed)."""
    runtime_version: str | None = None
    """TPU VM runtime; default: the cluster's runtime_version."""


@dataclasses.dataclass(frozen=True)
class QueuedSlice:
    """Slices provisioned directly as one queued resource by `marin-lab cluster up`."""

    name: str
    """Queued resource id (also the node id, or the node id prefix for multislice)."""
    tpu: str
    """TPU type."""
    slices: int = 1
    """Number of slices (multislice when > 1)."""
    spot: bool = True
    """Spot capacity; False asks for guaranteed capacity (with `reservation` if given)."""
    reservation: str | None = None
    """Reservation resource name for guaranteed capacity."""
    runtime_version: str | None = None
    """TPU VM runtime; default: the cluster's runtime_version."""


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """One cluster in one zone."""

    cluster_name: str
    """Ray cluster name; also names the rendered file infra/<cluster_name>.yaml."""
    project: str
    """GCP project id."""
    region: str
    """GCP region, e.g. 'us-west4'."""
    zone: str
    """GCP zone inside the region, e.g. 'us-west4-a'; TPU slices and queued resources live here."""
    image: str
    """Container image every node runs (built from infra/Dockerfile.cluster)."""
    tpu_workers: tuple[TpuWorkerType, ...] = ()
    queued_resources: tuple[QueuedSlice, ...] = ()
    bucket: str | None = None
    """Default MARIN_PREFIX for jobs on this cluster, e.g. gs://marin-us-central2."""
    head_machine_type: str = "n2-standard-8"
    """Machine type of the (non-preemptible) head node, where the experiment driver runs."""
    head_disk_gb: int = 200
    """Boot disk of the head node."""
    runtime_version: str = DEFAULT_RUNTIME_VERSION
    """Default TPU VM runtime for worker types and queued resources."""
    source: str | None = None
    """The file this config was read from (for error messages)."""

    def max_slices(self, tpu: str) -> int:
        name = parse_tpu_type(tpu).name
        for worker in self.tpu_workers:
            if worker.tpu == name:
                return worker.max_slices
        for queued in self.queued_resources:
            if queued.tpu == name:
                return queued.slices
        known = sorted({w.tpu for w in self.tpu_workers} | {q.tpu for q in self.queued_resources})
        raise TpuRequestError(
            f"cluster {self.cluster_name!r} ({self.source or 'config'}) has no {name} workers; it offers "
            f"{', '.join(known) or 'no TPU types'}; pick one of those or add {name} to its tpu_workers"
        )


_REQUIRED = ("cluster_name", "project", "region", "zone", "image")
_OPTIONAL = {"bucket", "head", "runtime_version", "tpu_workers", "queued_resources"}


def _fail(source: str, message: str) -> ClusterConfigError:
    return ClusterConfigError(f"cluster config {source}: {message}")


def parse_cluster_config(raw: Mapping[str, Any], source: str = "<dict>") -> ClusterConfig:
    """Check a loaded cluster config and build a ClusterConfig; errors name the file and field."""
    if not isinstance(raw, Mapping):
        raise _fail(source, "must be a YAML mapping of fields (cluster_name, project, region, zone, image, ...)")
    unknown = set(raw) - set(_REQUIRED) - _OPTIONAL
    if unknown:
        raise _fail(source, f"unknown field(s) {sorted(unknown)}; known: {sorted(set(_REQUIRED) | _OPTIONAL)}")
    for field in _REQUIRED:
        if not raw.get(field) or not isinstance(raw[field], str):
            example = {"zone": "us-central2-b", "region": "us-central2"}.get(field, "...")
            raise _fail(source, f"missing or empty '{field}' (a string, e.g. {field}: {example})")
    if not raw["zone"].startswith(raw["region"] + "-"):
        raise _fail(source, f"zone {raw['zone']!r} is not in region {raw['region']!r}")
    head = raw.get("head") or {}
    workers = []
    if not isinstance(raw.get("tpu_workers") or {}, Mapping):
        raise _fail(
            source, "tpu_workers must map a TPU type to its fields, e.g. tpu_workers: {v4-128: {max_slices: 2}}"
        )
    if not isinstance(raw.get("queued_resources") or [], list):
        raise _fail(source, "queued_resources must be a list of slices, e.g. queued_resources: [{name: a, tpu: v4-8}]")
    for tpu, spec in (raw.get("tpu_workers") or {}).items():
        if spec is not None and not isinstance(spec, Mapping):
            raise _fail(source, f"tpu_workers.{tpu} must be a mapping of fields, e.g. {{max_slices: 2}}")
        spec = dict(spec or {})
        try:
            name = parse_tpu_type(tpu).name
            if "max_slices" not in spec:
                raise _fail(source, f"tpu_workers.{tpu}: missing 'max_slices'")
            worker = TpuWorkerType(tpu=name, **spec)
            check_slice_count(parse_tpu_type(name), worker.max_slices)
        except TypeError as err:
            raise _fail(source, f"tpu_workers.{tpu}: {err}") from err
        except TpuRequestError as err:
            raise _fail(source, f"tpu_workers.{tpu}: {err}") from err
        workers.append(worker)
    queued = []
    for i, spec in enumerate(raw.get("queued_resources") or []):
        try:
            item = QueuedSlice(**spec)
            tpu = parse_tpu_type(item.tpu)
            check_slice_count(tpu, item.slices)
            queued.append(dataclasses.replace(item, tpu=tpu.name))
        except (TypeError, TpuRequestError) as err:
            raise _fail(source, f"queued_resources[{i}]: {err}") from err
        if item.reservation and item.spot:
            raise _fail(source, f"queued_resources[{i}] ({item.name}): a reservation needs spot: false")
    return ClusterConfig(
        cluster_name=raw["cluster_name"],
        project=raw["project"],
        region=raw["region"],
        zone=raw["zone"],
        image=raw["image"],
        tpu_workers=tuple(workers),
        queued_resources=tuple(queued),
        bucket=raw.get("bucket"),
        head_machine_type=head.get("machine_type", "n2-standard-8"),
        head_disk_gb=int(head.get("disk_gb", 200)),
        runtime_version=raw.get("runtime_version", DEFAULT_RUNTIME_VERSION),
        source=source,
    )


def load_cluster_config(path: str | os.PathLike) -> ClusterConfig:
    """Read and check a cluster config file."""
    path = str(path)
    try:
        with open(path) as f:
            raw = yaml.safe_load(f)
    except FileNotFoundError as err:
        raise ClusterConfigError(f"cluster config {path} does not exist; see infra/clusters/ for examples") from err
    except yaml.YAMLError as err:
        raise ClusterConfigError(f"cluster config {path} is not valid YAML: {err}") from err
    return parse_cluster_config(raw, source=path)


def _substitute(node: Any, values: Mapping[str, Any], where: str) -> Any:
    """Fill ${name} placeholders; a lone placeholder keeps its value's type (ints stay ints)."""
    if isinstance(node, dict):
        return {k: _substitute(v, values, f"{where}.{k}") for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, values, f"{where}[{i}]") for i, v in enumerate(node)]
    if isinstance(node, str):
        match = _PLACEHOLDER.match(node)
        try:
            if match:
                return values[match[1]]
            return string.Template(node).substitute({k: str(v) for k, v in values.items()})
        except KeyError as err:
            raise ClusterConfigError(
                f"template field {where} uses ${{{err.args[0]}}}, which the cluster config does not provide"
            ) from err
    return node


def render_ray_config(config: ClusterConfig, template: str | os.PathLike = DEFAULT_TEMPLATE) -> dict:
    """The Ray cluster config (as a dict, dump it with yaml) for one cluster config."""
    with open(template) as f:
        raw = yaml.safe_load(f)
    pattern = raw.pop("tpu_worker_pattern")
    common = {
        "cluster_name": config.cluster_name,
        "project": config.project,
        "region": config.region,
        "zone": config.zone,
        "image": config.image,
        "bucket": config.bucket or "",
        "head_machine_type": config.head_machine_type,
        "head_disk_gb": config.head_disk_gb,
    }
    rendered = _substitute(raw, common, "template")
    for worker in config.tpu_workers:
        tpu = parse_tpu_type(worker.tpu)
        values = {
            **common,
            "tpu": tpu.name,
            "accelerator_type": tpu.accelerator_type,
            "chips_per_host": tpu.chips_per_host,
            "min_slices": worker.min_slices,
            "max_slices": worker.max_slices,
            "preemptible": worker.preemptible,
            "runtime_version": worker.runtime_version or config.runtime_version,
        }
        rendered["available_node_types"][f"tpu_worker_{tpu.name.replace('-', '_')}"] = _substitute(
            copy.deepcopy(pattern), values, f"tpu_worker_pattern({tpu.name})"
        )
    rendered["max_workers"] = sum(w.max_slices for w in config.tpu_workers)
    return rendered


def dump_ray_config(config: ClusterConfig, template: str | os.PathLike = DEFAULT_TEMPLATE) -> str:
    header = (
        f"# Rendered from {Path(template).name} and {config.source or 'a cluster config'} by "
        f"`marin-lab cluster render`; edit those, not this file.\n"
    )
    return header + yaml.safe_dump(render_ray_config(config, template), sort_keys=False, width=120)


__all__ = [
    "ClusterConfig",
    "QueuedSlice",
    "TpuWorkerType",
    "dump_ray_config",
    "load_cluster_config",
    "parse_cluster_config",
    "render_ray_config",
]
