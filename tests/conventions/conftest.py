"""Fixtures for the third-party instrumentation tests: an in-memory SDK pipeline, and the processor."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_blame import semconv as sc
from otel_blame.conventions import attributes_to_dict, sdk_spans_to_proto
from otel_blame.conventions.builder import Built, build_trajectory
from tests.processor.conftest import make_processor, sink  # noqa: F401  (fixtures used by the tests here)
from tests.support import RecordingOTLPSink

SERVICE = "population-app"


@dataclass
class Capture:
    exporter: InMemorySpanExporter
    provider: TracerProvider

    def spans(self) -> list[ReadableSpan]:
        self.provider.force_flush()
        return list(self.exporter.get_finished_spans())

    def built(self) -> Built:
        return build_trajectory(sdk_spans_to_proto(self.spans()))


@pytest.fixture
def capture() -> Iterator[Capture]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: SERVICE}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Capture(exporter, provider)
    provider.shutdown()


class _Forward(SpanProcessor):
    """Frameworks that trace only through the global provider (Google ADK, Microsoft Agent Framework,
    Semantic Kernel), which is set once per process: it forwards to the exporter of the test running."""

    target: SpanProcessor | None = None

    def on_start(self, span, parent_context=None) -> None:  # noqa: ANN001
        if self.target is not None:
            self.target.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self.target is not None:
            self.target.on_end(span)


_FORWARD = _Forward()


def _global_provider() -> TracerProvider:
    """The process's global SDK provider, with the forwarder on it: set here when none is, else the
    one another test set (a global provider cannot be replaced)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: SERVICE}))
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_otel_blame_forwarding", False):
        provider.add_span_processor(_FORWARD)
        provider._otel_blame_forwarding = True  # type: ignore[attr-defined]
    return provider


@pytest.fixture
def global_capture() -> Iterator[Capture]:
    """The spans the global provider records while the test runs."""
    provider = _global_provider()
    exporter = InMemorySpanExporter()
    _FORWARD.target = SimpleSpanProcessor(exporter)
    yield Capture(exporter, provider)
    _FORWARD.target = None


def blame_through_processor(processor, downstream: RecordingOTLPSink, spans: list[ReadableSpan]) -> dict:  # noqa: ANN001
    """Send the spans to the in-process processor over OTLP/gRPC; the culprit span as it arrived
    downstream, as ``{"name", "span_id", "attributes"}``, plus the root's blame attributes."""
    exporter = OTLPSpanExporter(endpoint=processor.grpc_endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    arrived = downstream.wait_for_spans(len(spans), timeout=20)
    culprits = [
        r.span for r in arrived if attributes_to_dict(r.span.attributes).get(sc.BLAME_CULPRIT) is True
    ]
    assert len(culprits) == 1, [r.span.name for r in arrived]
    culprit = culprits[0]
    return {
        "name": culprit.name,
        "span_id": culprit.span_id.hex(),
        "attributes": attributes_to_dict(culprit.attributes),
        "stats": processor.stats(),
    }


def send_logs(processor, records: list) -> None:  # noqa: ANN001
    """Send log records (content some frameworks log instead of putting it on spans) to the processor
    over OTLP/gRPC, before their spans, as an app's log pipeline would."""
    exporter = OTLPLogExporter(endpoint=processor.grpc_endpoint, insecure=True)
    try:
        assert exporter.export(records).name == "SUCCESS"  # LogExportResult, or LogRecordExportResult
    finally:
        exporter.shutdown()


def send_then_verdict(
    processor,  # noqa: ANN001
    downstream: RecordingOTLPSink,
    spans: list[ReadableSpan],
    logs: list | None = None,
) -> dict:
    """A run that only turned out wrong afterwards: send its spans (its log records first, if any),
    let the trace complete, then send the late verdict (as ``otel-blame verdict`` does). The
    processor's answer."""
    if logs:
        send_logs(processor, logs)
    exporter = OTLPSpanExporter(endpoint=processor.grpc_endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    downstream.wait_for_spans(len(spans), timeout=20)
    trace_id = format(spans[0].context.trace_id, "032x")
    return processor.submit_verdict(trace_id, "failure", expected_output="about 2.1 million people")
