import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

from tests.support import RecordingOTLPSink


def _provider(endpoint: str) -> tuple[TracerProvider, OTLPSpanExporter]:
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=2)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_records_spans_from_the_real_exporter():
    with RecordingOTLPSink() as sink:
        provider, _ = _provider(sink.endpoint)
        tracer = provider.get_tracer("test")
        with tracer.start_as_current_span("root"):
            with tracer.start_as_current_span("child"):
                pass
        spans = sink.wait_for_spans(2, timeout=10)
        provider.shutdown()
    assert sorted(s.span.name for s in spans) == ["child", "root"]
    assert len({s.trace_id for s in spans}) == 1


def test_outage_refuses_and_records_nothing():
    with RecordingOTLPSink() as sink:
        sink.set_available(False)
        exporter = OTLPSpanExporter(endpoint=sink.endpoint, insecure=True, timeout=1)
        provider = TracerProvider()
        span = provider.get_tracer("t").start_span("lost")
        span.end()
        assert exporter.export([span]) == SpanExportResult.FAILURE
        assert sink.refused >= 1 and sink.span_count() == 0
        sink.set_available(True)
        assert exporter.export([span]) == SpanExportResult.SUCCESS
        assert sink.span_count() == 1
        exporter.shutdown()
        with pytest.raises(TimeoutError, match="1 of 2"):
            sink.wait_for_spans(2, timeout=0.2)
