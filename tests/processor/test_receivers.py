"""Receivers: bad input gets a clear refusal and loses nothing; limits, auth, backpressure, JSON, logs."""

from __future__ import annotations

import gzip
import http.client
import json
import time

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.conventions import attributes_to_dict, sdk_spans_to_proto
from otel_blame.otlp_json import traces_to_json

from .spans import record_agent_run

TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _raw_grpc(endpoint: str, body: bytes, metadata=None) -> grpc.RpcError | None:  # noqa: ANN001
    with grpc.insecure_channel(endpoint, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        call = channel.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)
        try:
            call(body, timeout=10, metadata=metadata)
        except grpc.RpcError as error:
            return error
    return None


def _post(
    endpoint: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes, http.client.HTTPMessage]:
    host, _, port = endpoint.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(), response.headers  # case-insensitive
    finally:
        connection.close()


def _get(endpoint: str, path: str) -> tuple[int, bytes]:
    host, _, port = endpoint.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_malformed_protobuf_and_json_are_refused_and_nothing_is_stored(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    error = _raw_grpc(processor.grpc_endpoint, b"\x0a\xff\xff\xff\x0f garbage")
    assert error is not None and error.code() == grpc.StatusCode.INVALID_ARGUMENT
    status, body, _ = _post(
        processor.http_endpoint, "/v1/traces", b"\x12\x34\x56", {"Content-Type": "application/x-protobuf"}
    )
    assert status == 400 and "invalid ExportTraceServiceRequest" in status_pb2.Status.FromString(body).message
    status, body, _ = _post(
        processor.http_endpoint, "/v1/traces", b'{"resourceSpans": [', {"Content-Type": "application/json"}
    )
    assert status == 400 and "invalid JSON" in json.loads(body)["message"]
    status, _, _ = _post(processor.http_endpoint, "/v1/traces", b"x", {"Content-Type": "text/plain"})
    assert status == 415
    assert processor.stats()["wal_pending_rows"] == 0
    assert processor.stats()["rejected_requests"] == 2  # the JSON is refused before it reaches the pipeline


def test_oversized_requests_are_refused(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(receivers={"max_request_bytes": 4096})
    big = record_agent_run([("A", "x" * 10_000)], failed=False)
    body = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(big)).SerializeToString()
    error = _raw_grpc(processor.grpc_endpoint, body)
    assert error is not None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    status, _, _ = _post(
        processor.http_endpoint, "/v1/traces", body, {"Content-Type": "application/x-protobuf"}
    )
    assert status == 413
    bomb = gzip.compress(b"\x00" * 100_000)
    status, _, _ = _post(
        processor.http_endpoint,
        "/v1/traces",
        bomb,
        {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
    )
    assert status == 413


def test_wrong_or_missing_token_is_refused(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(receivers={"auth_token": "s3cret-token"})
    spans = record_agent_run([("A", "x")], failed=False)
    wrong = OTLPSpanExporter(
        endpoint=processor.grpc_endpoint, insecure=True, headers={"authorization": "Bearer nope"}
    )
    assert wrong.export(spans) == SpanExportResult.FAILURE
    wrong.shutdown()
    body = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans)).SerializeToString()
    error = _raw_grpc(processor.grpc_endpoint, body)
    assert error is not None and error.code() == grpc.StatusCode.UNAUTHENTICATED
    status, _, headers = _post(
        processor.http_endpoint, "/v1/traces", body, {"Content-Type": "application/x-protobuf"}
    )
    assert status == 401 and headers.get("WWW-Authenticate") == "Bearer"
    verdict = json.dumps({"trace_id": "ab" * 16, "outcome": "failure"}).encode()
    status, _, _ = _post(processor.http_endpoint, "/v1/verdicts", verdict, {"Authorization": "Bearer nope"})
    assert status == 401
    status, _, _ = _post(
        processor.http_endpoint, "/v1/verdicts", verdict, {"Authorization": "Bearer s3cret-token"}
    )
    assert status == 404  # authorised; the trace is unknown
    right = OTLPSpanExporter(
        endpoint=processor.grpc_endpoint, insecure=True, headers={"authorization": "Bearer s3cret-token"}
    )
    assert right.export(spans) == SpanExportResult.SUCCESS
    right.shutdown()
    assert len(sink.wait_for_spans(len(spans), timeout=10)) == len(spans)


def test_full_log_answers_retry_later(sink, make_processor) -> None:  # noqa: ANN001
    sink.set_available(False)  # nothing leaves the log
    processor = make_processor(wal={"max_bytes": 3000, "retry_after_seconds": 7})
    bodies = [
        ExportTraceServiceRequest(
            resource_spans=sdk_spans_to_proto(record_agent_run([("A", "y" * 500)], failed=False))
        ).SerializeToString()
        for _ in range(8)
    ]
    errors = [_raw_grpc(processor.grpc_endpoint, body) for body in bodies[:6]]
    refused = [e for e in errors if e is not None]
    assert refused and all(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for e in refused)
    details = dict(refused[0].trailing_metadata())["grpc-status-details-bin"]
    retry = error_details_pb2.RetryInfo()
    status_pb2.Status.FromString(details).details[0].Unpack(retry)
    assert retry.retry_delay.seconds == 7
    status, _, headers = _post(
        processor.http_endpoint, "/v1/traces", bodies[7], {"Content-Type": "application/x-protobuf"}
    )
    assert status == 503 and headers["Retry-After"] == "7"
    accepted = sum(1 for e in errors if e is None)
    sink.set_available(True)
    assert len(sink.wait_for_spans(accepted * 2, timeout=10)) == accepted * 2


def test_health_ready_metrics_and_otlp_json_and_http_exporter(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    assert _get(processor.http_endpoint, "/healthz")[0] == 200
    assert _get(processor.http_endpoint, "/readyz") == (200, b'{"ready": true}')
    spans = record_agent_run([("A", "x"), ("B", "y")], failed=True)
    status, body, _ = _post(
        processor.http_endpoint,
        "/v1/traces",
        traces_to_json(sdk_spans_to_proto(spans)).encode(),
        {"Content-Type": "application/json"},
    )
    assert (status, body) == (200, b"{}")
    more = record_agent_run([("C", "z")], failed=False)
    exporter = HTTPSpanExporter(endpoint=f"http://{processor.http_endpoint}/v1/traces")
    assert exporter.export(more) == SpanExportResult.SUCCESS
    exporter.shutdown()
    arrived = sink.wait_for_spans(len(spans) + len(more), timeout=10)
    blamed = [r for r in arrived if sc.BLAME_METHOD in attributes_to_dict(r.span.attributes)]
    assert len(blamed) == 1
    status, metrics = _get(processor.http_endpoint, "/metrics")
    assert status == 200
    assert b"otel_blame_processor_attributed_traces_total 1" in metrics
    assert b"otel_blame_attributions_total" in metrics


@pytest.mark.parametrize("content_type", ["application/x-protobuf", "application/json"])
def test_logs_are_forwarded_and_joined_for_attribution(sink, make_processor, content_type) -> None:  # noqa: ANN001
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

    from otel_blame.otlp_json import logs_to_json

    processor = make_processor()
    spans = record_agent_run([("Planner", ""), ("Solver", "")], failed=True)
    agent_spans = [s for s in spans if s.name.startswith("invoke_agent")]
    texts = ["I will compute it.", "Error: the calculator crashed, answer unknown"]
    records = [
        LogRecord(
            trace_id=span.context.trace_id.to_bytes(16, "big"),
            span_id=span.context.span_id.to_bytes(8, "big"),
            event_name=sc.EVENT_CHOICE,
            body=AnyValue(string_value=json.dumps({"message": {"role": "assistant", "content": text}})),
        )
        for span, text in zip(agent_spans, texts, strict=True)
    ]
    records.append(LogRecord(body=AnyValue(string_value="no trace here")))
    logs = ExportLogsServiceRequest(resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=records)])])
    body = logs.SerializeToString() if content_type.endswith("protobuf") else logs_to_json(logs).encode()
    status, _, _ = _post(processor.http_endpoint, "/v1/logs", body, {"Content-Type": content_type})
    assert status == 200
    exporter = OTLPSpanExporter(endpoint=processor.grpc_endpoint, insecure=True)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()
    arrived = sink.wait_for_spans(len(spans), timeout=10)
    deadline = time.monotonic() + 5
    while len(sink.log_records()) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    forwarded = [r for r in sink.log_records() if r.event_name != sc.GEN_AI_EVALUATION_RESULT_EVENT]
    assert sorted(r.SerializeToString() for r in forwarded) == sorted(
        r.SerializeToString() for r in records
    )  # forwarded unchanged, next to the failed trace's evaluation result
    assert len(sink.log_records()) == len(records) + 1
    culprits = [r.span.name for r in arrived if attributes_to_dict(r.span.attributes).get(sc.BLAME_CULPRIT)]
    assert len(culprits) == 1 and culprits[0] in ("invoke_agent Planner", "invoke_agent Solver")


def test_port_in_use_is_a_clear_error_and_leaves_nothing_running(sink, make_processor, tmp_path) -> None:  # noqa: ANN001
    import threading

    from otel_blame.processor import BlameProcessor, load_config

    from .conftest import processor_overrides

    first = make_processor()
    threads_before = threading.active_count()
    overrides = processor_overrides(sink.endpoint, tmp_path / "other-wal")
    overrides["receivers"]["http_endpoint"] = first.http_endpoint
    second = BlameProcessor(load_config(overrides=overrides, environ={}))
    with pytest.raises(OSError, match=f"cannot listen on {first.http_endpoint}"):
        second.start()
    deadline = time.monotonic() + 5
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= threads_before


def test_logs_over_grpc_are_forwarded(sink, make_processor) -> None:  # noqa: ANN001
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

    processor = make_processor()
    records = [LogRecord(body=AnyValue(string_value=f"line {n}")) for n in range(3)]
    body = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=records)])]
    ).SerializeToString()
    with grpc.insecure_channel(processor.grpc_endpoint) as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
            request_serializer=None,
            response_deserializer=None,
        )
        assert export(body, timeout=10) == b""
        with pytest.raises(grpc.RpcError) as refused:
            export(b"\xff\xff\xff", timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    deadline = time.monotonic() + 5
    while len(sink.log_records()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(r.body.string_value for r in sink.log_records()) == ["line 0", "line 1", "line 2"]
