"""Broken and extreme traces: cyclic or missing parents, no root, duplicate span ids, 10,000 spans."""

from __future__ import annotations

import os

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.conventions import attributes_to_dict

from .spans import output_messages

TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _agent_span(trace: bytes, span_id: int, parent: int | None, agent: str, text: str, start: int) -> Span:
    return Span(
        trace_id=trace,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=sc.agent_span_name(agent),
        start_time_unix_nano=start,
        end_time_unix_nano=start + 5,
        attributes=[
            KeyValue(key=sc.GEN_AI_OPERATION_NAME, value=AnyValue(string_value=sc.OP_INVOKE_AGENT)),
            KeyValue(key=sc.GEN_AI_AGENT_NAME, value=AnyValue(string_value=agent)),
            KeyValue(key=sc.GEN_AI_OUTPUT_MESSAGES, value=AnyValue(string_value=output_messages(text))),
            KeyValue(key=sc.TASK_OUTCOME, value=AnyValue(string_value="failure")),
        ],
    )


def _send(endpoint: str, spans: list[Span]) -> None:
    body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    ).SerializeToString()
    with grpc.insecure_channel(endpoint) as channel:
        channel.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)(
            body, timeout=10
        )


@pytest.mark.parametrize("shape", ["cycle", "missing_parent", "duplicates"])
def test_broken_traces_are_attributed_and_nothing_is_lost(sink, make_processor, shape: str) -> None:  # noqa: ANN001
    processor = make_processor(assembly={"quiet_period": 0.1, "max_wait": 1.0})
    trace = os.urandom(16)
    if shape == "cycle":
        spans = [
            _agent_span(trace, 1, 2, "A", "first", 10),
            _agent_span(trace, 2, 1, "B", "Error: wrong result", 20),
        ]
    elif shape == "missing_parent":
        spans = [
            _agent_span(trace, 1, 99, "A", "first", 10),
            _agent_span(trace, 2, 1, "B", "Error: wrong result", 20),
        ]
    else:
        root = _agent_span(trace, 1, None, "A", "first", 10)
        root.status.code = Status.STATUS_CODE_ERROR
        spans = [
            root,
            _agent_span(trace, 2, 1, "B", "Error: wrong", 20),
            _agent_span(trace, 2, 1, "B", "Error: wrong", 20),
        ]
    _send(processor.grpc_endpoint, spans)
    arrived = sink.wait_for_spans(len(spans), timeout=10)
    assert len(arrived) == len(spans)
    blamed = [r for r in arrived if sc.BLAME_METHOD in attributes_to_dict(r.span.attributes)]
    assert len(blamed) == 1  # the root (or its stand-in) carries the trace-level blame
    assert processor.stats()["attributed_traces"] == 1


def test_trace_without_any_root_is_released_after_max_wait(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(assembly={"quiet_period": 0.1, "max_wait": 0.8})
    trace = os.urandom(16)
    spans = [_agent_span(trace, 5, 77, "A", "hello", 10)]
    spans[0].attributes.pop()  # not failed
    _send(processor.grpc_endpoint, spans)
    arrived = sink.wait_for_spans(1, timeout=5)
    assert arrived[0].span == spans[0]


@pytest.mark.slow
def test_ten_thousand_span_trace_is_attributed(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(assembly={"quiet_period": 0.2, "max_wait": 30.0})
    provider = TracerProvider()
    tracer = provider.get_tracer("big")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status as SDKStatus
    from opentelemetry.trace import StatusCode

    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with tracer.start_as_current_span("invoke_workflow big") as root:
        root.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_WORKFLOW)
        for n in range(9_999):
            with tracer.start_as_current_span(sc.agent_span_name(f"agent{n % 7}")) as span:
                span.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT)
                span.set_attribute(sc.GEN_AI_AGENT_NAME, f"agent{n % 7}")
                span.set_attribute(sc.GEN_AI_OUTPUT_MESSAGES, output_messages(f"message {n}"))
        root.set_status(SDKStatus(StatusCode.ERROR, "failed"))
    spans = list(memory.get_finished_spans())
    assert len(spans) == 10_000
    exporter = OTLPSpanExporter(endpoint=processor.grpc_endpoint, insecure=True)
    for start in range(0, len(spans), 2_000):
        assert exporter.export(spans[start : start + 2_000]) == SpanExportResult.SUCCESS
    exporter.shutdown()
    arrived = sink.wait_for_spans(10_000, timeout=60)
    assert len({r.span.span_id for r in arrived}) == 10_000
    scored = [r for r in arrived if sc.BLAME_SCORE in attributes_to_dict(r.span.attributes)]
    assert len(scored) == 9_999
    assert processor.stats()["attributed_traces"] == 1


def test_trace_beyond_max_spans_is_forwarded_unattributed_and_counted(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(assembly={"max_spans_per_trace": 3, "quiet_period": 5.0})
    trace = os.urandom(16)
    spans = [_agent_span(trace, n, 1 if n > 1 else None, f"A{n}", "x", n) for n in range(1, 6)]
    _send(processor.grpc_endpoint, spans[:2])
    _send(processor.grpc_endpoint, spans[2:])
    arrived = sink.wait_for_spans(5, timeout=3)  # well before the quiet period
    assert sorted(r.span.span_id for r in arrived) == sorted(s.span_id for s in spans)
    assert all(r.span in spans for r in arrived)
    stats = processor.stats()
    assert stats["assembly_oversized_traces"] == 1 and stats["attributed_traces"] == 0
    late = _agent_span(trace, 9, 1, "Late", "y", 99)
    _send(processor.grpc_endpoint, [late])
    assert sink.wait_for_spans(6, timeout=3)[-1].span == late
    assert processor.stats()["assembly_late_groups"] == 1


def test_more_traces_than_max_traces_are_forwarded_not_dropped(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(assembly={"max_traces": 2, "quiet_period": 5.0, "max_wait": 10.0})
    spans = [_agent_span(os.urandom(16), 1, None, "A", "x", 1) for _ in range(5)]
    for span in spans:
        span.attributes.pop()
        _send(processor.grpc_endpoint, [span])
    arrived = sink.wait_for_spans(3, timeout=3)
    assert len(arrived) == 3 and processor.stats()["assembly_overflow_traces"] == 3
