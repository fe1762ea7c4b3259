"""Forward first: with analysis backed up, a failed trace's spans go downstream unchanged at once and
its blame follows as one late ``blame {agent}`` span; listeners hear it as a late blame."""

from __future__ import annotations

import time

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.conventions import attributes_to_dict, sdk_spans_to_proto
from otel_blame.processor import BlameProcessor, load_config
from otel_blame.processor.listeners import FinishedAttribution

from .conftest import processor_overrides
from .spans import record_agent_run


def _send(endpoint: str, spans) -> None:  # noqa: ANN001
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def test_a_failed_trace_goes_on_first_and_its_blame_follows_as_a_late_span(sink, tmp_path) -> None:  # noqa: ANN001
    heard: list[FinishedAttribution] = []
    overrides = processor_overrides(
        sink.endpoint,
        tmp_path / "wal",
        attribution={"forward_first_backlog": 0, "workers": 1},
    )
    processor = BlameProcessor(load_config(overrides=overrides, environ={}), listeners=[heard.append]).start()
    try:
        spans = record_agent_run(
            [("Planner", "Plan: compute 6*7."), ("Solver", "The answer is 41.")], failed=True
        )
        _send(processor.grpc_endpoint, spans)
        arrived = sink.wait_for_spans(len(spans) + 1, timeout=20)
        sent = {s.span_id: s for rs in sdk_spans_to_proto(spans) for ss in rs.scope_spans for s in ss.spans}
        originals = [r.span for r in arrived if r.span.span_id in sent]
        assert {s.span_id: s for s in originals} == sent  # byte for byte as they came in
        (blame,) = [r.span for r in arrived if r.span.span_id not in sent]
        assert blame.name == sc.late_blame_span_name("Solver")
        attributes = attributes_to_dict(blame.attributes)
        assert attributes[sc.BLAME_AGENT] == "Solver" and attributes[sc.BLAME_METHOD] == "heuristic"
        solver = next(s for s in originals if s.name == sc.agent_span_name("Solver"))
        assert [link.span_id for link in blame.links] == [solver.span_id]
        deadline = time.monotonic() + 10
        while not heard and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [(f.attribution.agent, f.late) for f in heard] == [("Solver", True)]
        stats = processor.stats()
        assert stats["forwarded_before_analysis"] == 1 and stats["attributed_traces"] == 1
    finally:
        assert processor.stop(timeout=10)
