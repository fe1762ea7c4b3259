"""A recording OTLP/gRPC server: the downstream that tests, benchmarks and the demo send to.

It implements the real TraceService and LogsService over grpcio, keeps every request it
accepted, and can be told to refuse (``UNAVAILABLE``) to simulate a downstream outage.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RecordedSpan:
    """One span as it arrived, with the resource it came under."""

    resource: Resource
    span: Span

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()


class RecordingOTLPSink:
    """Start with ``with RecordingOTLPSink() as sink:``; send OTLP/gRPC to ``sink.endpoint``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, max_workers: int = 4) -> None:
        self._lock = threading.Condition()
        self.trace_requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.log_requests: list[logs_service_pb2.ExportLogsServiceRequest] = []
        self.refused = 0
        self._available = True
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="otlp-sink"),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceServicer(self), self._server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_LogsServicer(self), self._server)
        self._host = host
        self._port = self._server.add_insecure_port(f"{host}:{port}")
        if self._port == 0:
            raise OSError(f"could not bind OTLP sink to {host}:{port}")

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        """``host:port``, as OTLP/gRPC exporters take it (without a scheme)."""
        return f"{self._host}:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    def start(self) -> RecordingOTLPSink:
        self._server.start()
        return self

    def stop(self, grace: float | None = 1.0) -> None:
        self._server.stop(grace).wait()

    def __enter__(self) -> RecordingOTLPSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- outage simulation -------------------------------------------------------------------
    def set_available(self, available: bool) -> None:
        """While unavailable, every export is answered ``UNAVAILABLE`` and nothing is recorded."""
        with self._lock:
            self._available = available

    # -- what arrived ----------------------------------------------------------------------
    def _accept(self, request: object, into: list, context: grpc.ServicerContext) -> bool:
        with self._lock:
            if not self._available:
                self.refused += 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "sink is simulating an outage")
            into.append(request)
            self._lock.notify_all()
        return True

    def spans(self) -> list[RecordedSpan]:
        with self._lock:
            requests = list(self.trace_requests)
        return [
            RecordedSpan(resource_spans.resource, span)
            for request in requests
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]

    def log_records(self) -> list[LogRecord]:
        with self._lock:
            requests = list(self.log_requests)
        return [
            record
            for request in requests
            for resource_logs in request.resource_logs
            for scope_logs in resource_logs.scope_logs
            for record in scope_logs.log_records
        ]

    def _span_count_locked(self) -> int:
        return sum(
            len(scope_spans.spans)
            for request in self.trace_requests
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
        )

    def span_count(self) -> int:
        with self._lock:
            return self._span_count_locked()

    def wait_for_spans(self, count: int, timeout: float = 10.0) -> list[RecordedSpan]:
        """Block until at least ``count`` spans arrived; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                have = self._span_count_locked()
                if have >= count:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"OTLP sink received {have} of {count} spans in {timeout} s")
                self._lock.wait(remaining)
        return self.spans()

    def clear(self) -> None:
        with self._lock:
            self.trace_requests.clear()
            self.log_requests.clear()


class _TraceServicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: RecordingOTLPSink) -> None:
        self._sink = sink

    def Export(self, request, context):  # noqa: N802 - gRPC method name
        self._sink._accept(request, self._sink.trace_requests, context)
        return trace_service_pb2.ExportTraceServiceResponse()


class _LogsServicer(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, sink: RecordingOTLPSink) -> None:
        self._sink = sink

    def Export(self, request, context):  # noqa: N802 - gRPC method name
        self._sink._accept(request, self._sink.log_requests, context)
        return logs_service_pb2.ExportLogsServiceResponse()
