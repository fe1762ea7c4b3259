"""What the processor does with traces the conventions cannot fully read: counted, logged once per service."""

from __future__ import annotations

import logging
import time

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.trace import Status, StatusCode

from otel_blame import semconv as sc
from otel_blame.conventions import NoTrajectory, build_trajectory, sdk_spans_to_proto

from .conftest import SERVICE


def _failed_request(capture) -> list:  # noqa: ANN001
    tracer = capture.provider.get_tracer("web")
    # a task root (as otel-blame's own instrumentation writes it) whose framework emitted no agent spans
    with tracer.start_as_current_span("invoke_workflow crew") as span:
        span.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_WORKFLOW)
        span.set_attribute(sc.TASK_NAME, "crew")
        with tracer.start_as_current_span("crew.kickoff"):
            pass
        span.set_status(Status(StatusCode.ERROR, "crew failed"))
    spans = capture.spans()
    capture.exporter.clear()
    return spans


def test_failed_trace_without_steps_is_counted_and_logged_once_with_the_reason(
    capture,
    sink,
    make_processor,
    caplog,  # noqa: ANN001
) -> None:
    first = _failed_request(capture)
    try:
        build_trajectory(sdk_spans_to_proto(first))
        raise AssertionError("expected NoTrajectory")
    except NoTrajectory as error:
        assert (
            error.service == SERVICE and "no agent steps" in error.reason and "crew.kickoff" in error.reason
        )
    processor = make_processor()
    exporter = OTLPSpanExporter(endpoint=processor.grpc_endpoint, insecure=True)
    with caplog.at_level(logging.WARNING, logger="otel_blame.processor.pipeline"):
        exporter.export(first)
        exporter.export(_failed_request(capture))
        sink.wait_for_spans(4, timeout=10)
        deadline = time.monotonic() + 5
        while processor.stats()["no_trajectory_traces"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    exporter.shutdown()
    stats = processor.stats()
    assert stats["no_trajectory_traces"] == 2 and stats["unattributed_failed_traces"] == 2
    warnings = [r.getMessage() for r in caplog.records if "not attributed" in r.getMessage()]
    assert len(warnings) == 1 and SERVICE in warnings[0] and "crew.kickoff" in warnings[0]
