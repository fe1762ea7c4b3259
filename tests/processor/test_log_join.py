"""The OTLP log-record join where it decides the verdict.

Instrumentations that capture content as events (``gen_ai.choice`` log records) leave the agent
span itself empty. In the run below the decisive evidence, the coder assuming a value "from
memory" that becomes the wrong final answer, exists only in such a log record. Without the
records the blame falls on the reviewer who repeated the wrong answer; with them it falls on the
coder's step, by span id. A processor that ignored log records would blame the reviewer.
"""

from __future__ import annotations

import http.client
import json

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.attribution.heuristic import HeuristicAttribution
from otel_blame.conventions import attributes_to_dict, sdk_spans_to_proto, trajectory_from_spans

from .spans import record_agent_run

# What each agent said; the coder's span carries no content, its words are only in a log record.
PLANNER = "Plan: compute 6*7 in Python, then report it to the reviewer."
CODER = "The calculator API is down, so let's assume 6*7 = 41 from memory."
REVIEWER = "Confirmed. Final answer: 41"


def _run() -> tuple[list[ReadableSpan], ReadableSpan, ReadableSpan]:
    """A failed run (expected 42) and its coder and reviewer spans."""
    spans = record_agent_run([("Planner", PLANNER), ("Coder", ""), ("Reviewer", REVIEWER)], failed=True)
    by_agent = {s.attributes[sc.GEN_AI_AGENT_NAME]: s for s in spans if s.name.startswith("invoke_agent")}
    return spans, by_agent["Coder"], by_agent["Reviewer"]


def _choice_record(span: ReadableSpan, text: str) -> LogRecord:
    """A ``gen_ai.choice`` event as the OpenAI instrumentation emits it, joined by trace and span id."""
    return LogRecord(
        trace_id=span.context.trace_id.to_bytes(16, "big"),
        span_id=span.context.span_id.to_bytes(8, "big"),
        time_unix_nano=span.end_time or 0,
        event_name=sc.EVENT_CHOICE,
        body=AnyValue(
            string_value=json.dumps({"index": 0, "message": {"role": "assistant", "content": text}})
        ),
    )


def _logs(coder: ReadableSpan) -> list[ResourceLogs]:
    unrelated = LogRecord(body=AnyValue(string_value="worker heartbeat, no trace"))
    return [ResourceLogs(scope_logs=[ScopeLogs(log_records=[unrelated, _choice_record(coder, CODER)])])]


def _span_hex(span: ReadableSpan) -> str:
    return f"{span.context.span_id:016x}"


def test_the_log_records_change_the_blame_to_the_right_step() -> None:
    spans, coder, reviewer = _run()
    proto = sdk_spans_to_proto(spans)
    method = HeuristicAttribution()

    without = trajectory_from_spans(proto)
    assert [s.content for s in without.steps] == [PLANNER, "", REVIEWER]
    blind = method.attribute(without)
    assert (blind.agent, blind.step) == ("Reviewer", 2)
    assert without.steps[blind.step].span_id == _span_hex(reviewer)

    joined = trajectory_from_spans(proto, _logs(coder))
    assert [s.content for s in joined.steps] == [PLANNER, CODER, REVIEWER]
    verdict = method.attribute(joined)
    assert (verdict.agent, verdict.step) == ("Coder", 1)
    assert joined.steps[verdict.step].span_id == _span_hex(coder)
    assert "assumed" in verdict.reason


def _post_logs(endpoint: str, logs: list[ResourceLogs]) -> int:
    host, _, port = endpoint.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        body = ExportLogsServiceRequest(resource_logs=logs).SerializeToString()
        connection.request("POST", "/v1/logs", body=body, headers={"Content-Type": "application/x-protobuf"})
        return connection.getresponse().status
    finally:
        connection.close()


def _culprits(arrived) -> list[tuple[str, dict]]:  # noqa: ANN001
    found = []
    for record in arrived:
        attrs = attributes_to_dict(record.span.attributes)
        if attrs.get(sc.BLAME_CULPRIT):
            found.append((record.span.span_id.hex(), attrs))
    return found


def test_the_processor_blames_the_step_whose_evidence_came_as_log_records(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans, coder, _ = _run()
    assert _post_logs(processor.http_endpoint, _logs(coder)) == 200
    exporter = OTLPSpanExporter(endpoint=processor.grpc_endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    culprits = _culprits(sink.wait_for_spans(len(spans), timeout=30))
    assert [span_id for span_id, _ in culprits] == [_span_hex(coder)]
    root = next(attributes_to_dict(r.span.attributes) for r in sink.spans() if not r.span.parent_span_id)
    assert (root[sc.BLAME_AGENT], root[sc.BLAME_STEP]) == ("Coder", 1)


def test_the_processor_without_the_log_records_blames_another_step(sink, make_processor) -> None:  # noqa: ANN001
    """The control: the same spans with no log records; the verdict differs, so the join matters."""
    processor = make_processor()
    spans, _, reviewer = _run()
    exporter = OTLPSpanExporter(endpoint=processor.grpc_endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    culprits = _culprits(sink.wait_for_spans(len(spans), timeout=30))
    assert [span_id for span_id, _ in culprits] == [_span_hex(reviewer)]
