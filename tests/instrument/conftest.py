"""Fixtures for the instrumentation tests: an in-memory span exporter wired into otel_blame."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_blame import semconv
from otel_blame.instrumentation import configure, reset_configuration
from otel_blame.instrumentation._safety import HOOK_ERRORS

# the helpers every framework's tests share: their asserts explain themselves, as the tests' own do
pytest.register_assert_rewrite("tests.instrument.shapes", "tests.instrument.failed_turns")


class Spans:
    """Finished spans, with the queries the tests need."""

    def __init__(self, exporter: InMemorySpanExporter, provider: TracerProvider) -> None:
        self.exporter = exporter
        self.provider = provider

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def steps(self) -> list[ReadableSpan]:
        """Step spans (those with a step index), ordered by index."""
        found = [s for s in self.all() if s.attributes and semconv.STEP_INDEX in s.attributes]
        return sorted(found, key=lambda s: (s.context.trace_id, s.attributes[semconv.STEP_INDEX]))

    def roots(self) -> list[ReadableSpan]:
        return [
            s
            for s in self.all()
            if s.attributes and s.attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_INVOKE_WORKFLOW
        ]

    def root(self) -> ReadableSpan:
        roots = self.roots()
        assert len(roots) == 1, [r.name for r in roots]
        return roots[0]


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spans]:
    monkeypatch.delenv(semconv.ENV_CAPTURE_MESSAGE_CONTENT, raising=False)
    monkeypatch.delenv(semconv.ENV_MAX_CONTENT_BYTES, raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reset_configuration()
    configure(tracer_provider=provider)
    HOOK_ERRORS.clear()
    yield Spans(exporter, provider)
    reset_configuration()
    provider.shutdown()


@pytest.fixture
def instrumented(spans: Spans, monkeypatch: pytest.MonkeyPatch) -> Iterator[Spans]:
    """The instrumentor switched on (all frameworks) for one test, then switched off again."""
    from otel_blame.instrumentation import OtelBlameInstrumentor

    monkeypatch.delenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", raising=False)
    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument()
    yield spans
    instrumentor.uninstrument()
