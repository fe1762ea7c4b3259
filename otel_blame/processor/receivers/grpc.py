"""The OTLP/gRPC receiver: TraceService and LogsService on grpcio, raw bytes in.

Requests are handed over as the bytes that arrived (they are stored in the write-ahead log as
they are). Answers follow the OTLP specification: INVALID_ARGUMENT for malformed data (do not
retry), RESOURCE_EXHAUSTED with a RetryInfo detail when the log is full or cannot store
(disk full, I/O error), UNAVAILABLE while starting or stopping, UNAUTHENTICATED for a missing or
wrong bearer token. Spans or log records with invalid ids are left out and named in the
response's ``partial_success``.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from concurrent import futures
from typing import Protocol

import grpc
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.duration_pb2 import Duration
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from otel_blame.processor.config import ReceiversConfig
from otel_blame.processor.errors import Accepted, Backpressure, InvalidRequest, NotAccepting
from otel_blame.processor.tls import grpc_server_credentials

log = logging.getLogger(__name__)

TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"


class IngestHandler(Protocol):
    def accept_traces(self, body: bytes) -> Accepted: ...

    def accept_logs(self, body: bytes) -> Accepted: ...


def _trace_response(accepted: Accepted) -> bytes:
    if not accepted.rejected:
        return b""  # an empty ExportTraceServiceResponse: everything accepted
    partial = ExportTracePartialSuccess(rejected_spans=accepted.rejected, error_message=accepted.message)
    return ExportTraceServiceResponse(partial_success=partial).SerializeToString()


def _logs_response(accepted: Accepted) -> bytes:
    if not accepted.rejected:
        return b""
    partial = ExportLogsPartialSuccess(rejected_log_records=accepted.rejected, error_message=accepted.message)
    return ExportLogsServiceResponse(partial_success=partial).SerializeToString()


def _retry_details(message: str, retry_after: int) -> bytes:
    detail = AnyProto()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=Duration(seconds=retry_after)))
    status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message, details=[detail])
    return status.SerializeToString()


class GRPCReceiver:
    def __init__(
        self, endpoint: str, config: ReceiversConfig, handler: IngestHandler, *, share_port: bool = False
    ) -> None:
        """``share_port``: other processes bind the same endpoint (``SO_REUSEPORT``, :mod:`..shards`)."""
        self._config = config
        self._handler = handler
        self._token = config.auth_token.get_secret_value().encode() if config.auth_token else None
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=config.grpc_workers, thread_name_prefix="otel-blame-grpc"),
            options=[
                ("grpc.max_receive_message_length", config.max_request_bytes),
                ("grpc.max_send_message_length", 4 * 1024 * 1024),
                ("grpc.so_reuseport", 1 if share_port else 0),
            ],
            maximum_concurrent_rpcs=config.grpc_workers * 4,
        )
        self._server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    TRACE_SERVICE, {"Export": self._unary(self._handler.accept_traces, _trace_response)}
                ),
                grpc.method_handlers_generic_handler(
                    LOGS_SERVICE, {"Export": self._unary(self._handler.accept_logs, _logs_response)}
                ),
            )
        )
        host, _, port = endpoint.rpartition(":")
        try:
            if config.tls is not None:
                self.port = self._server.add_secure_port(
                    f"{host}:{port}", grpc_server_credentials(config.tls)
                )
            else:
                self.port = self._server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as error:  # grpcio: "Failed to bind to address"
            raise OSError(f"cannot listen on {endpoint} (gRPC): {error}") from None
        if self.port == 0:
            raise OSError(f"cannot listen on {endpoint} (gRPC)")
        self.host = host

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def _unary(
        self, accept: Callable[[bytes], Accepted], respond: Callable[[Accepted], bytes]
    ) -> grpc.RpcMethodHandler:
        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            if self._token is not None and not self._authorised(context):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
            try:
                accepted = accept(request)
            except InvalidRequest as error:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
            except Backpressure as error:
                context.set_trailing_metadata(
                    (("grpc-status-details-bin", _retry_details(str(error), error.retry_after)),)
                )
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
            except NotAccepting as error:
                context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
            return respond(accepted)

        return grpc.unary_unary_rpc_method_handler(
            handle, request_deserializer=None, response_serializer=None
        )

    def _authorised(self, context: grpc.ServicerContext) -> bool:
        for key, value in context.invocation_metadata():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else value
                scheme, _, token = given.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._token or b"")
        return False

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float) -> None:
        self._server.stop(grace).wait(grace + 1)
