"""Runs :func:`tests.conventions.apps.plain_app` under Logfire in a process of its own.

``logfire.configure`` installs its tracer provider as the process-wide OpenTelemetry global, which
cannot be undone and would change every later test's spans (frameworks that trace through the
global provider start emitting). So the Logfire tests run the app here, in a child process, and
read back the spans it wrote: ``python -m tests.conventions.logfire_run OUT BASE_URL [--with-openai-v2]``
writes one OTLP ExportTraceServiceRequest (protobuf) to OUT.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conventions import apps

SERVICE = "population-app"


def main(out: Path, base_url: str, with_openai_v2: bool) -> None:
    import logfire

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    if with_openai_v2:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
        OpenAIInstrumentor().instrument(tracer_provider=provider)
    logfire.configure(
        send_to_logfire=False,
        console=False,
        service_name=SERVICE,
        additional_span_processors=[SimpleSpanProcessor(memory)],
    )
    with logfire.instrument_openai():
        try:
            apps.plain_app(base_url, provider.get_tracer("app"))
        except apps.WrongAnswer:
            pass
    logfire.force_flush()
    provider.force_flush()
    out.write_bytes(encode_spans(memory.get_finished_spans()).SerializeToString())


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], "--with-openai-v2" in sys.argv[3:])
