"""An in-process fake of the Cloud TPU v2 API, speaking the real gRPC protocol.

`google-cloud-tpu`'s own client talks to it over a local insecure channel, so tests exercise the
real request/response encoding and long-running operations, not a mock of our code. The fake keeps
queued resources and nodes in memory, moves a queued resource one state per Get
(ACCEPTED -> PROVISIONING -> ACTIVE by default), and can be told to preempt or fail one. Every
request is recorded with its metadata, so tests can check request shapes and what was sent.
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any, NoReturn

import grpc
from google.cloud import tpu_v2
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2

SERVICE = "google.cloud.tpu.v2.Tpu"
DEFAULT_PROGRESSION = ("ACCEPTED", "PROVISIONING", "ACTIVE")


def _pack(type_name: str, payload: bytes) -> any_pb2.Any:
    return any_pb2.Any(type_url=f"type.googleapis.com/{type_name}", value=payload)


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with `code` and `message` (ServicerContext.abort raises; grpc declares no types)."""
    context.abort(code, message)
    raise AssertionError("grpc.ServicerContext.abort returned instead of raising")


class FakeTpuApi:
    """The fake server; use as a context manager, then `channel()` for the client."""

    def __init__(self, progression: tuple[str, ...] = DEFAULT_PROGRESSION, *, secure: bool = False):
        self.progression = progression
        self.secure = secure
        """Serve with local-connection credentials, so a client can send call credentials (tokens)."""
        self.queued: dict[str, Any] = {}
        self.nodes: dict[str, Any] = {}
        self.requests: list[dict] = []
        self._pending: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self.address: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> str:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self._server.add_generic_rpc_handlers((self._handlers(),))
        if self.secure:
            port = self._server.add_secure_port("127.0.0.1:0", grpc.local_server_credentials())
        else:
            port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.address = f"127.0.0.1:{port}"
        return self.address

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None

    def __enter__(self) -> FakeTpuApi:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def channel(self, token: str | None = None) -> grpc.Channel:
        """A channel to the fake; with `token`, every call carries `authorization: Bearer <token>`."""
        if not self.secure:
            return grpc.insecure_channel(self.address)
        credentials = grpc.local_channel_credentials()
        if token is not None:
            credentials = grpc.composite_channel_credentials(credentials, grpc.access_token_call_credentials(token))
        return grpc.secure_channel(self.address, credentials)

    # -- scripted events ---------------------------------------------------------------------------
    def preempt(self, queued_id: str) -> None:
        """Google reclaims a spot queued resource: SUSPENDED, every node PREEMPTED."""
        with self._lock:
            qr = self._find(queued_id)
            qr.state.state = tpu_v2.QueuedResourceState.State.SUSPENDED
            self._pending[qr.name] = []
            for node_name in self._node_names(qr):
                if node_name in self.nodes:
                    self.nodes[node_name].state = tpu_v2.Node.State.PREEMPTED

    def fail(self, queued_id: str, message: str) -> None:
        with self._lock:
            qr = self._find(queued_id)
            qr.state.state = tpu_v2.QueuedResourceState.State.FAILED
            qr.state.failed_data = tpu_v2.QueuedResourceState.FailedData(error={"code": 8, "message": message})
            self._pending[qr.name] = []

    def _find(self, queued_id: str):
        for name, qr in self.queued.items():
            if name.endswith(f"/queuedResources/{queued_id}"):
                return qr
        raise KeyError(queued_id)

    # -- the service -------------------------------------------------------------------------------
    def _record(self, method: str, request: Any, context: grpc.ServicerContext) -> None:
        self.requests.append(
            {
                "method": method,
                "request": type(request).to_dict(request),
                "metadata": dict(context.invocation_metadata()),
            }
        )

    @staticmethod
    def _node_names(qr) -> list[str]:
        names = []
        for spec in qr.tpu.node_spec:
            if spec.multislice_params and spec.multislice_params.node_count:
                names += [
                    f"{spec.parent}/nodes/{spec.multislice_params.node_id_prefix}-{i}"
                    for i in range(spec.multislice_params.node_count)
                ]
            else:
                names.append(f"{spec.parent}/nodes/{spec.node_id}")
        return names

    def _create(self, request, context):
        self._record("CreateQueuedResource", request, context)
        name = f"{request.parent}/queuedResources/{request.queued_resource_id}"
        with self._lock:
            if name in self.queued:
                _abort(context, grpc.StatusCode.ALREADY_EXISTS, f"queued resource {name} already exists")
            qr = tpu_v2.QueuedResource(request.queued_resource)
            qr.name = name
            qr.state = tpu_v2.QueuedResourceState(state=tpu_v2.QueuedResourceState.State.CREATING)
            self.queued[name] = qr
            self._pending[name] = list(self.progression)
        return operations_pb2.Operation(
            name=f"{request.parent}/operations/create-{request.queued_resource_id}",
            done=True,
            response=_pack("google.cloud.tpu.v2.QueuedResource", tpu_v2.QueuedResource.serialize(qr)),
        )

    def _queued_or_abort(self, name: str, context: grpc.ServicerContext) -> tpu_v2.QueuedResource:
        qr = self.queued.get(name)
        if qr is None:
            _abort(context, grpc.StatusCode.NOT_FOUND, f"queued resource {name} not found")
        return qr

    def _get(self, request, context):
        self._record("GetQueuedResource", request, context)
        with self._lock:
            qr = self._queued_or_abort(request.name, context)
            pending = self._pending.get(request.name)
            if pending:
                # State is a proto-plus enum (an IntEnum): indexing it by a name looks up that member.
                qr.state = tpu_v2.QueuedResourceState(state=tpu_v2.QueuedResourceState.State[pending.pop(0)])  # type: ignore[misc]
                if qr.state.state == tpu_v2.QueuedResourceState.State.ACTIVE:
                    for node_name in self._node_names(qr):
                        node = tpu_v2.Node(qr.tpu.node_spec[0].node)
                        # A proto-plus enum member is an IntEnum at runtime; mypy reads the class body's int.
                        node.name, node.state = node_name, tpu_v2.Node.State.READY  # type: ignore[assignment]
                        self.nodes[node_name] = node
            return qr

    def _list(self, request, context):
        self._record("ListQueuedResources", request, context)
        with self._lock:
            items = [qr for name, qr in sorted(self.queued.items()) if name.startswith(request.parent + "/")]
        return tpu_v2.ListQueuedResourcesResponse(queued_resources=items)

    def _delete(self, request, context):
        self._record("DeleteQueuedResource", request, context)
        with self._lock:
            qr = self._queued_or_abort(request.name, context)
            if qr.state.state == tpu_v2.QueuedResourceState.State.ACTIVE and not request.force:
                _abort(context, grpc.StatusCode.FAILED_PRECONDITION, "queued resource is ACTIVE; delete with force")
            for node_name in self._node_names(qr):
                self.nodes.pop(node_name, None)
            del self.queued[request.name]
        return operations_pb2.Operation(
            name=f"{request.name}/operations/delete",
            done=True,
            response=_pack("google.protobuf.Empty", empty_pb2.Empty().SerializeToString()),
        )

    def _get_node(self, request, context):
        self._record("GetNode", request, context)
        with self._lock:
            node = self.nodes.get(request.name)
        if node is None:
            _abort(context, grpc.StatusCode.NOT_FOUND, f"node {request.name} not found")
        return node

    def _handlers(self) -> grpc.GenericRpcHandler:
        def unary(fn, request_cls, response_cls):
            return grpc.unary_unary_rpc_method_handler(
                fn,
                request_deserializer=request_cls.deserialize,
                response_serializer=response_cls.serialize
                if response_cls is not None
                else operations_pb2.Operation.SerializeToString,
            )

        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "CreateQueuedResource": unary(self._create, tpu_v2.CreateQueuedResourceRequest, None),
                "GetQueuedResource": unary(self._get, tpu_v2.GetQueuedResourceRequest, tpu_v2.QueuedResource),
                "ListQueuedResources": unary(
                    self._list, tpu_v2.ListQueuedResourcesRequest, tpu_v2.ListQueuedResourcesResponse
                ),
                "DeleteQueuedResource": unary(self._delete, tpu_v2.DeleteQueuedResourceRequest, None),
                "GetNode": unary(self._get_node, tpu_v2.GetNodeRequest, tpu_v2.Node),
            },
        )


__all__ = ["FakeTpuApi"]
