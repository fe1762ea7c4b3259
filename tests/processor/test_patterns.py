"""``blame.pattern``: the failure pattern each blamed trace falls into, written on its root and culprit
spans, counted on ``/metrics``, and kept by the pattern book across restarts.

Real OTLP traffic: SDK spans exported over gRPC to an in-process processor, the enriched spans received
by a recording OTLP server downstream."""

from __future__ import annotations

import time
from pathlib import Path

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client.parser import text_string_to_metric_families

from otel_blame import semconv as sc
from otel_blame.attribution.result import Attribution
from otel_blame.conventions import attributes_to_dict, build_trajectory
from otel_blame.conventions.otlp import sdk_spans_to_proto
from otel_blame.patterns import Cause, Known, Signature, cause_of, is_pattern_id, undecided_id
from otel_blame.processor.analysis import Concluding, conclude
from otel_blame.processor.config import CrossRunConfig, PatternsConfig
from otel_blame.processor.enricher import BlameEnricher
from otel_blame.processor.patterns import LocalPatternBook, with_pattern
from otel_blame.redaction import Redactor

from .spans import failing_search_run, record_agent_run


def _send(endpoint: str, spans: list[ReadableSpan]) -> None:
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def _patterns(sink, spans: list[ReadableSpan], already: int = 0) -> tuple[str, str]:  # noqa: ANN001
    """(root's blame.pattern, culprit's) of the trace whose spans these are."""
    trace_id = spans[0].context.trace_id.to_bytes(16, "big")
    arrived = [r.span for r in sink.wait_for_spans(already + len(spans), timeout=15)]
    mine = [span for span in arrived if span.trace_id == trace_id]
    root = next(span for span in mine if not span.parent_span_id)
    culprit = next(span for span in mine if attributes_to_dict(span.attributes).get(sc.BLAME_CULPRIT))
    return (
        attributes_to_dict(root.attributes)[sc.BLAME_PATTERN],
        attributes_to_dict(culprit.attributes)[sc.BLAME_PATTERN],
    )


def _metric(processor, name: str) -> dict[str, float]:  # noqa: ANN001
    body, _ = processor.render_metrics()
    return {
        sample.labels["pattern"]: sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == name
    }


def test_the_same_cause_is_one_pattern_on_root_and_culprit_spans_and_on_the_metric(sink, make_processor):  # noqa: ANN001
    processor = make_processor()
    sent = 0
    seen = []
    for status in (503, 503, 429):  # the same failing dependency, whatever its status: one pattern
        spans = failing_search_run(status)
        _send(processor.grpc_endpoint, spans)
        root, culprit = _patterns(sink, spans, sent)
        sent += len(spans)
        assert root == culprit and is_pattern_id(root) and root.startswith("p")
        seen.append(root)
    assert len(set(seen)) == 1
    # an agent's own wrong answer the evidence does not decide: its workflow's undecided group
    spans = record_agent_run(
        [("Planner", "Plan: compute 6*7."), ("Solver", "The answer is 41."), ("Critic", "Looks right.")],
        failed=True,
    )
    _send(processor.grpc_endpoint, spans)
    root, culprit = _patterns(sink, spans, sent)
    assert root == culprit == undecided_id("agents-under-test", "solve")
    deadline = time.monotonic() + 10
    while (
        time.monotonic() < deadline
        and sum(_metric(processor, "otel_blame_failure_patterns_total").values()) < 4
    ):
        time.sleep(0.05)
    assert _metric(processor, "otel_blame_failure_patterns_total") == {seen[0]: 3, root: 1}
    first_seen = _metric(processor, "otel_blame_failure_pattern_first_seen_seconds")
    assert set(first_seen) == {seen[0], root} and all(
        value > time.time() - 120 for value in first_seen.values()
    )


def _decided(reason: str) -> Attribution:
    return Attribution(
        agent="Solver", step=1, confidence=0.9, decided=True, reason=reason, method="ranker", category="agent"
    )


def _run():  # noqa: ANN202 - the trajectory and the export request of one failed run
    spans = record_agent_run(
        [("Planner", "Plan: compute 6*7."), ("Solver", "The answer is 41."), ("Critic", "Looks right.")],
        failed=True,
    )
    request = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans))
    trajectory = build_trajectory(list(request.resource_spans)).trajectory
    return trajectory, request


FIRST = "Step 1 by Solver: it overrode what it was given; a value first appears here."
SIMILAR = "Step 1 by Solver: a value first appears here; it overrode what it was given."


def test_the_book_keeps_patterns_across_a_restart(tmp_path: Path) -> None:
    trajectory, _ = _run()
    config = PatternsConfig()
    first = cause_of("svc", "solve", trajectory, _decided(FIRST))
    similar = cause_of("svc", "solve", trajectory, _decided(SIMILAR))
    assert first.gist != similar.gist and first.candidate_id() != similar.candidate_id()
    book = LocalPatternBook(config, tmp_path / "patterns.sqlite")
    opened = book.assign(first, 1000.0)
    assert opened == Known(first.candidate_id(), first.gist, 1000.0)
    book.close()
    again = LocalPatternBook(config, tmp_path / "patterns.sqlite")
    assert len(again) == 1
    assert again.assign(similar, 2000.0) == opened  # the older similar pattern, first seen as it was
    again.close()


def test_the_pattern_book_bounds_the_patterns_of_a_signature(tmp_path: Path) -> None:
    signature = Signature("svc", "solve", "agent", role="Solver", action="answer")
    book = LocalPatternBook(PatternsConfig(max_per_signature=2), tmp_path / "patterns.sqlite")
    ids = [
        book.assign(Cause(signature, f"reason {word}"), 1.0).id
        for word in ("alpha", "bravo", "x-ray", "zulu")
    ]
    assert ids[0] != ids[1] and ids[2] == ids[3] and ids[2] not in ids[:2]  # past two: 'other reasons'
    book.close()


def test_a_cause_that_joins_an_older_pattern_gets_its_id_in_the_spans_made_already() -> None:
    trajectory, request = _run()
    concluding = Concluding(BlameEnricher(), Redactor(), CrossRunConfig(), patterns=True)
    blamed = conclude(
        trajectory,
        _decided(SIMILAR),
        None,
        concluding,
        late=False,
        request=request,
        resource=None,
        service="svc",
    )
    assert blamed.cause is not None and blamed.pattern is not None
    candidate = blamed.pattern.id
    older = Known(cause_of("svc", "solve", trajectory, _decided(FIRST)).candidate_id(), "older gist", 5.0)
    grouped = with_pattern(blamed, older)
    assert grouped.pattern == older
    written = ExportTraceServiceRequest.FromString(grouped.payload)
    values = [
        attributes_to_dict(span.attributes).get(sc.BLAME_PATTERN)
        for resource in written.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    assert values.count(older.id) == 2 and candidate not in values  # root and culprit
    assert candidate.encode() not in grouped.payload  # the blame.assigned event's copy too
