"""Provisioning TPU slices as queued resources through the Cloud TPU API (`google-cloud-tpu`, v2).

A queued resource asks Google for one slice (or, with `multislice_params`, N identical slices)
and waits in a queue until capacity exists: spot (cheap, reclaimable) or guaranteed (from a
reservation). Its state moves CREATING/ACCEPTED/WAITING_FOR_RESOURCES -> PROVISIONING -> ACTIVE;
a reclaimed spot slice goes SUSPENDING -> SUSPENDED (its nodes PREEMPTED), a refused one FAILED.

`TpuProvisioner` builds the exact requests (so `--dry_run` can print them without credentials),
sends them with an injected `TpuClient` (tests point it at a fake server), and waits with an
injected clock. Credentials are handed to the client and never logged, printed or stored.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from marin_lab.cluster.config import ClusterConfig, QueuedSlice
from marin_lab.cluster.errors import PreemptedError, ProvisioningError
from marin_lab.cluster.tpu_types import parse_tpu_type

logger = logging.getLogger(__name__)

PENDING_STATES = {"STATE_UNSPECIFIED", "CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING"}
PREEMPTED_STATES = {"SUSPENDING", "SUSPENDED"}


class SlicePreempted(PreemptedError):
    """A queued resource's slices were reclaimed (state SUSPENDED or a node PREEMPTED)."""


def _tpu_v2():
    from google.cloud import tpu_v2

    return tpu_v2


def make_tpu_client(*, credentials: Any | None = None, channel: Any | None = None, anonymous: bool = False):
    """A TpuClient: over `channel` when given (tests, emulators), else Google's endpoint.

    `anonymous=True` builds one with AnonymousCredentials and no network, enough to build and
    print requests (`--dry_run`).
    """
    tpu_v2 = _tpu_v2()
    if channel is not None:
        from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport

        return tpu_v2.TpuClient(transport=TpuGrpcTransport(channel=channel))
    if anonymous:
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    return tpu_v2.TpuClient(credentials=credentials)


def request_to_dict(request: Any) -> dict:
    """A proto-plus request as the JSON the API receives (camelCase field names)."""
    cls = type(request)
    try:  # only what was set, as on the wire; the keyword was renamed in proto-plus 1.24
        text = cls.to_json(request, indent=None, always_print_fields_with_no_presence=False)
    except TypeError:  # pragma: no cover - older proto-plus
        text = cls.to_json(request, indent=None, including_default_value_fields=False)
    return json.loads(text)


@dataclasses.dataclass(frozen=True)
class QueuedResourceStatus:
    """What `status` reports for one queued resource."""

    name: str
    """Queued resource id."""
    state: str
    """Queued resource state name, e.g. ACTIVE, SUSPENDED, FAILED."""
    tpu: str | None
    slices: int
    spot: bool
    nodes: tuple[tuple[str, str], ...] = ()
    """(node id, node state) per slice, when the nodes exist."""
    error: str | None = None
    """The API's error message for a FAILED queued resource."""

    @property
    def preempted(self) -> bool:
        return self.state in PREEMPTED_STATES or any(state == "PREEMPTED" for _, state in self.nodes)

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "nodes": [list(n) for n in self.nodes], "preempted": self.preempted}


class TpuProvisioner:
    """Create, list, wait for and delete queued resources in one project/zone."""

    def __init__(
        self,
        project: str,
        zone: str,
        *,
        client: Any | None = None,
        dry_run: bool = False,
        emit: Callable[[str], None] = print,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.project = project
        self.zone = zone
        self.dry_run = dry_run
        self.emit = emit
        self.sleep = sleep
        self.clock = clock
        self._client = client

    @classmethod
    def for_cluster(cls, config: ClusterConfig, **kwargs: Any) -> TpuProvisioner:
        return cls(config.project, config.zone, **kwargs)

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}"

    @property
    def client(self):
        if self._client is None:
            # Dry runs never need real credentials; real runs use Application Default Credentials.
            self._client = make_tpu_client(anonymous=self.dry_run)
        return self._client

    def qualified(self, queued_id: str) -> str:
        return f"{self.parent}/queuedResources/{queued_id}"

    # -- requests --------------------------------------------------------------------------------
    def create_request(
        self,
        spec: QueuedSlice,
        *,
        runtime_version: str,
        labels: dict[str, str] | None = None,
        startup_script: str | None = None,
    ):
        tpu_v2 = _tpu_v2()
        tpu = parse_tpu_type(spec.tpu)
        qr = tpu_v2.QueuedResource
        node = tpu_v2.Node(
            accelerator_type=tpu.accelerator_type,
            runtime_version=spec.runtime_version or runtime_version,
            network_config=tpu_v2.NetworkConfig(enable_external_ips=True),
            labels={"marin-queued-resource": spec.name, **(labels or {})},
            metadata={"startup-script": startup_script} if startup_script else {},
        )
        node_spec = qr.Tpu.NodeSpec(parent=self.parent, node=node)
        if spec.slices > 1:
            node_spec.multislice_params = qr.Tpu.NodeSpec.MultisliceParams(
                node_count=spec.slices, node_id_prefix=spec.name
            )
        else:
            node_spec.node_id = spec.name
        resource = qr(tpu=qr.Tpu(node_spec=[node_spec]))
        if spec.spot:
            resource.spot = qr.Spot()
        else:
            resource.guaranteed = qr.Guaranteed()
            if spec.reservation:
                resource.reservation_name = spec.reservation
        return tpu_v2.CreateQueuedResourceRequest(
            parent=self.parent, queued_resource_id=spec.name, queued_resource=resource
        )

    def _show(self, verb: str, request: Any) -> None:
        self.emit(
            json.dumps(
                {"dry_run": self.dry_run, "method": verb, "request": request_to_dict(request)}, indent=2, sort_keys=True
            )
        )

    # -- operations ------------------------------------------------------------------------------
    def create(
        self,
        spec: QueuedSlice,
        *,
        runtime_version: str,
        labels: dict[str, str] | None = None,
        startup_script: str | None = None,
    ) -> None:
        request = self.create_request(
            spec, runtime_version=runtime_version, labels=labels, startup_script=startup_script
        )
        if self.dry_run:
            self._show("CreateQueuedResource", request)
            return
        logger.info(
            "creating queued resource %s: %d x %s (%s)",
            spec.name,
            spec.slices,
            spec.tpu,
            "spot" if spec.spot else "guaranteed",
        )
        try:
            self.client.create_queued_resource(request=request).result()
        except Exception as err:
            if type(err).__name__ == "AlreadyExists":
                logger.info("queued resource %s already exists; reusing it", spec.name)
                return
            raise ProvisioningError(f"creating queued resource {spec.name} in {self.parent} failed: {err}") from err

    def get(self, queued_id: str) -> QueuedResourceStatus:
        tpu_v2 = _tpu_v2()
        request = tpu_v2.GetQueuedResourceRequest(name=self.qualified(queued_id))
        return self._status(self.client.get_queued_resource(request=request))

    def list(self) -> list[QueuedResourceStatus]:
        tpu_v2 = _tpu_v2()
        request = tpu_v2.ListQueuedResourcesRequest(parent=self.parent)
        if self.dry_run:
            self._show("ListQueuedResources", request)
            return []
        return [self._status(qr) for qr in self.client.list_queued_resources(request=request)]

    def delete(self, queued_id: str) -> None:
        tpu_v2 = _tpu_v2()
        # force: also delete the slices' nodes, otherwise an ACTIVE queued resource refuses.
        request = tpu_v2.DeleteQueuedResourceRequest(name=self.qualified(queued_id), force=True)
        if self.dry_run:
            self._show("DeleteQueuedResource", request)
            return
        logger.info("deleting queued resource %s", queued_id)
        try:
            self.client.delete_queued_resource(request=request).result()
        except Exception as err:
            if type(err).__name__ == "NotFound":
                logger.info("queued resource %s was already gone", queued_id)
                return
            raise ProvisioningError(f"deleting queued resource {queued_id} in {self.parent} failed: {err}") from err

    def wait_active(self, queued_id: str, *, timeout_s: float = 3600.0, poll_s: float = 30.0) -> QueuedResourceStatus:
        """Poll until ACTIVE; raise ProvisioningError on FAILED or timeout, SlicePreempted on SUSPENDED."""
        deadline = self.clock() + timeout_s
        last = None
        while True:
            status = self.get(queued_id)
            if status.state != last:
                logger.info("queued resource %s: %s", queued_id, status.state)
                last = status.state
            if status.state == "ACTIVE" and not status.preempted:
                return status
            if status.state == "FAILED":
                raise ProvisioningError(
                    f"queued resource {queued_id} ({status.slices} x {status.tpu}) FAILED: "
                    f"{status.error or 'no reason given'}; delete it (`marin-lab cluster down`) and retry, "
                    f"possibly in another zone"
                )
            if status.preempted:
                raise SlicePreempted(
                    f"queued resource {queued_id} ({status.slices} x {status.tpu}) was preempted "
                    f"(state {status.state}, nodes {dict(status.nodes)}); recreate it or wait for capacity"
                )
            if status.state not in PENDING_STATES:
                raise ProvisioningError(
                    f"queued resource {queued_id} is {status.state}, which will not become "
                    f"ACTIVE; delete and recreate it"
                )
            if self.clock() >= deadline:
                raise ProvisioningError(
                    f"queued resource {queued_id} still {status.state} after {timeout_s:.0f}s "
                    f"(no capacity yet?); it stays queued, check `marin-lab cluster status`"
                )
            self.sleep(poll_s)

    def _status(self, qr: Any) -> QueuedResourceStatus:
        state = qr.state.state.name if qr.state else "STATE_UNSPECIFIED"
        error = None
        if state == "FAILED" and qr.state.failed_data and qr.state.failed_data.error:
            error = qr.state.failed_data.error.message
        specs = list(qr.tpu.node_spec) if qr.tpu else []
        tpu_name, slices = None, 0
        node_ids: list[str] = []
        for spec in specs:
            try:
                tpu_name = parse_tpu_type(spec.node.accelerator_type).name
            except Exception:  # noqa: BLE001 - an unknown type in someone else's resource is still listed
                tpu_name = spec.node.accelerator_type
            if spec.multislice_params and spec.multislice_params.node_count:
                count = spec.multislice_params.node_count
                node_ids += [f"{spec.multislice_params.node_id_prefix}-{i}" for i in range(count)]
                slices += count
            else:
                node_ids.append(spec.node_id)
                slices += 1
        nodes = (
            tuple((node_id, self._node_state(node_id)) for node_id in node_ids)
            if state in ("ACTIVE", "SUSPENDING", "SUSPENDED")
            else ()
        )
        return QueuedResourceStatus(
            name=qr.name.rsplit("/", 1)[-1],
            state=state,
            tpu=tpu_name,
            slices=slices,
            spot="spot" in qr,
            nodes=nodes,
            error=error,
        )

    def _node_state(self, node_id: str) -> str:
        tpu_v2 = _tpu_v2()
        try:
            node = self.client.get_node(request=tpu_v2.GetNodeRequest(name=f"{self.parent}/nodes/{node_id}"))
        except Exception as err:  # noqa: BLE001 - a missing node is itself the answer
            return "MISSING" if type(err).__name__ == "NotFound" else f"UNKNOWN ({type(err).__name__})"
        return node.state.name


__all__ = ["QueuedResourceStatus", "SlicePreempted", "TpuProvisioner", "make_tpu_client", "request_to_dict"]
