"""The exporter retries what may succeed later and isolates what the downstream refuses for good."""

from __future__ import annotations

import gc
import gzip
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from otel_blame.processor.config import ExporterConfig
from otel_blame.processor.exporter import TRACES, OTLPExporter


class _Downstream(BaseHTTPRequestHandler):
    received: list[bytes] = []
    answers: list[int] = []

    def do_POST(self) -> None:  # noqa: N802
        body = gzip.decompress(self.rfile.read(int(self.headers["Content-Length"])))
        status = self.answers.pop(0) if self.answers else (400 if b"BAD" in body else 200)
        if status == 200:
            self.received.append(body)
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "0")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_http_retry_then_isolate_the_refused_payload() -> None:
    _Downstream.received, _Downstream.answers = [], [503, 503]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Downstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    delivered: list[int] = []
    exporter = OTLPExporter(
        ExporterConfig(
            endpoint=f"http://127.0.0.1:{server.server_address[1]}",
            protocol="http",
            initial_backoff=0.01,
            workers=1,
        ),
        delivered.extend,
    )
    try:
        exporter.submit(TRACES, b"one", [1], 1)
        exporter.submit(TRACES, b"BAD", [2], 1)
        exporter.submit(TRACES, b"two", [3], 1)
        assert exporter.flush(10)
    finally:
        exporter.close()
        server.shutdown()
    assert sorted(delivered) == [1, 2, 3]  # the refused one is released too, and counted
    assert sorted(_Downstream.received) == [b"one", b"two"]  # whatever the batching, never the refused one
    assert exporter.rejected_items == 1 and exporter.exported_spans == 2
    assert exporter.failed_attempts >= 3  # two 503s and at least one 400


class _KeepAliveDownstream(_Downstream):
    protocol_version = "HTTP/1.1"  # persistent connections, as a Collector's OTLP/HTTP receiver keeps them


def test_close_closes_every_worker_s_http_connection() -> None:
    """Each exporter worker keeps a connection of its own; closing the exporter (from another thread)
    closes them all: none is left for the garbage collector to find open."""
    _KeepAliveDownstream.received, _KeepAliveDownstream.answers = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KeepAliveDownstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    config = ExporterConfig(endpoint=endpoint, protocol="http", workers=3, max_batch_bytes=16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        exporter = OTLPExporter(config, lambda refs: None)
        try:
            for n in range(60):
                exporter.submit(TRACES, b"payload %d" % n, [n], 1)
            assert exporter.flush(30)
        finally:
            exporter.close()
            server.shutdown()
            server.server_close()
        del exporter
        gc.collect()
    assert len(_KeepAliveDownstream.received) == 60
    left_open = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert left_open == []


def test_grpc_downstream_down_then_up_delivers_everything(sink) -> None:  # noqa: ANN001
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    sink.set_available(False)
    delivered: list[int] = []
    exporter = OTLPExporter(
        ExporterConfig(endpoint=sink.endpoint, initial_backoff=0.05, max_backoff=0.2), delivered.extend
    )
    try:
        for n in range(5):
            request = ExportTraceServiceRequest(
                resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[Span(name=f"s{n}")])])]
            )
            exporter.submit(TRACES, request.SerializeToString(), [n], 1)
        time.sleep(0.5)
        assert delivered == [] and exporter.pending == 5
        sink.set_available(True)
        assert exporter.flush(10)
    finally:
        exporter.close()
    assert sorted(delivered) == [0, 1, 2, 3, 4]
    assert sorted(r.span.name for r in sink.spans()) == [f"s{n}" for n in range(5)]
