"""A downstream that takes traces but no OTLP logs (Jaeger, Tempo, a Collector without a logs pipeline)
costs no span and no verdict: the evaluation's log record is refused once (gRPC ``UNIMPLEMENTED``,
HTTP 404), released unsent, and the next ones are not even written to the log for a while.

Real downstreams of both protocols: a gRPC server that serves only the OTLP trace service (gRPC itself
answers ``UNIMPLEMENTED`` for the logs service), and an HTTP server with only ``/v1/traces``."""

from __future__ import annotations

import gzip
import http.server
import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.conventions import attributes_to_dict
from otel_blame.processor import exporter as exporter_module

from .spans import record_agent_run


class TracesOnly:
    """Span requests that arrived at a downstream that has no logs service, and how often it was asked
    for one (the HTTP server counts the 404s it answered; gRPC answers for the missing service itself)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.logs_asked = 0

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.lock:
            self.requests.append(request)

    def spans(self) -> list:
        with self.lock:
            requests = list(self.requests)
        return [
            span for r in requests for rs in r.resource_spans for ss in rs.scope_spans for span in ss.spans
        ]

    def wait_for_spans(self, count: int, timeout: float = 20.0) -> list:
        deadline = time.monotonic() + timeout
        while len(self.spans()) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.spans())} of {count} spans arrived")
            time.sleep(0.02)
        return self.spans()


@pytest.fixture
def grpc_traces_only() -> Iterator[tuple[str, str, TracesOnly]]:
    received = TracesOnly()

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # noqa: ANN001, ANN201, N802 - the gRPC method
            received.add(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", "grpc", received
    server.stop(None).wait()


@pytest.fixture
def http_traces_only() -> Iterator[tuple[str, str, TracesOnly]]:
    received = TracesOnly()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/v1/traces":
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(gzip.decompress(body))
                received.add(request)
                status = 200
            else:
                with received.lock:
                    received.logs_asked += 1
                status = 404
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", "http", received
    server.shutdown()
    server.server_close()


def _send(endpoint: str, spans) -> None:  # noqa: ANN001
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def _wait(check, what: str, timeout: float = 20.0):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.02)
    return found


def _culprits(spans) -> list:  # noqa: ANN001
    return [s for s in spans if attributes_to_dict(s.attributes).get(sc.BLAME_CULPRIT) is True]


@pytest.mark.parametrize("downstream", ["grpc_traces_only", "http_traces_only"])
def test_a_downstream_without_logs_costs_no_span_and_no_verdict(downstream, request, make_processor) -> None:  # noqa: ANN001
    endpoint, protocol, received = request.getfixturevalue(downstream)
    processor = make_processor(
        exporter={"endpoint": endpoint, "protocol": protocol}
    )  # log records on: the default
    first = record_agent_run(
        [("Planner", "Plan: compute 6*7."), ("Solver", "The answer is 41.")], failed=True
    )
    _send(processor.grpc_endpoint, first)
    arrived = received.wait_for_spans(len(first))
    assert len(_culprits(arrived)) == 1  # the blame is on the spans
    _wait(lambda: processor.stats()["export_refused_log_records"] == 1, "the evaluation log record refused")
    # the next verdict's log record is not written at all: the downstream said it takes none
    second = record_agent_run(
        [("Planner", "Plan: add 2 and 2."), ("Solver", "The answer is 5.")], failed=True
    )
    _send(processor.grpc_endpoint, second)
    arrived = received.wait_for_spans(len(first) + len(second))
    assert len(_culprits(arrived)) == 2
    stats = _wait(
        lambda: (
            (s := processor.stats())["attributed_traces"] == 2 and s["evaluation_logs_refused"] == 1 and s
        ),
        "the second verdict",
    )
    assert stats["export_refused_log_records"] == 1 and stats["export_rejected_items"] == 0
    assert stats["evaluation_logs_dropped"] == 0
    # nothing waits in the write-ahead log or the exporter for a log record that will never go out
    _wait(lambda: processor.stats()["wal_pending_rows"] == 0, "every log row released")
    assert processor.stats()["export_pending_items"] == 0
    assert processor.stop(timeout=5) is True
    if protocol == "http":
        assert received.logs_asked == 1  # asked once, then not again


def test_a_downstream_that_takes_logs_again_is_asked_again(
    grpc_traces_only, make_processor, monkeypatch
) -> None:  # noqa: ANN001
    """The refusal is remembered for a while, not for good: a Collector whose logs pipeline was added
    later gets the log records again."""
    monkeypatch.setattr(exporter_module, "LOGS_RECHECK_SECONDS", 0.0)
    endpoint, protocol, received = grpc_traces_only
    processor = make_processor(exporter={"endpoint": endpoint, "protocol": protocol})
    for answer in ("41", "43"):
        spans = record_agent_run([("Planner", "plan"), ("Solver", f"The answer is {answer}.")], failed=True)
        _send(processor.grpc_endpoint, spans)
        received.wait_for_spans(len(spans) * (1 if answer == "41" else 2))
    stats = _wait(
        lambda: (s := processor.stats())["export_refused_log_records"] == 2 and s, "both log records refused"
    )
    assert stats["evaluation_logs_refused"] == 0  # each was asked for again
