"""Fixtures for the fault-injection tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_blame import semconv

# The campaign's app process instruments every installed framework; these apps use only autogen,
# so the others stay off (their imports cost seconds per app process on a loaded machine).
OTHER_FRAMEWORKS = (
    "otel_blame_langgraph,otel_blame_openai_agents,otel_blame_agentchat,otel_blame_crewai,otel_blame_ag2"
)


@pytest.fixture(autouse=True)
def _autogen_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", OTHER_FRAMEWORKS)


@pytest.fixture
def instrumented(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """otel-blame's instrumentation on (all frameworks), spans kept in memory; off again after."""
    from otel_blame.instrumentation import OtelBlameInstrumentor, configure, reset_configuration

    monkeypatch.delenv(semconv.ENV_CAPTURE_MESSAGE_CONTENT, raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reset_configuration()
    configure(tracer_provider=provider)
    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield exporter
    instrumentor.uninstrument()
    reset_configuration()
    provider.shutdown()
