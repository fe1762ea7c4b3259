"""Victims are not culprits: ``blame.category``, ``blame.dependency`` and ``blame.failure_mode``.

Real OTLP traffic: SDK spans exported over gRPC to an in-process processor, the enriched spans
received by a recording OTLP server downstream."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.conventions import attributes_to_dict

from .spans import failing_search_run, record_agent_run


def _send(endpoint: str, spans) -> None:  # noqa: ANN001
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def _blamed(sink, spans) -> tuple[dict, dict]:  # noqa: ANN001
    arrived = [r.span for r in sink.wait_for_spans(len(spans), timeout=10)]
    root = next(span for span in arrived if not span.parent_span_id)
    culprit = next(span for span in arrived if attributes_to_dict(span.attributes).get(sc.BLAME_CULPRIT))
    return attributes_to_dict(root.attributes), attributes_to_dict(culprit.attributes)


def test_http_503_of_a_tool_makes_the_failure_a_dependency_one(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans = failing_search_run(503)
    _send(processor.grpc_endpoint, spans)
    root, culprit = _blamed(sink, spans)
    assert root[sc.BLAME_AGENT] == "Researcher"  # the step that failed: still the trace's own
    for attrs in (root, culprit):
        assert attrs[sc.BLAME_CATEGORY] == "dependency"
        assert attrs[sc.BLAME_DEPENDENCY] == "web_search"
    assert "web_search failed (HTTP 503)" in root[sc.BLAME_REASON]
    assert sc.BLAME_FAILURE_MODE not in root  # MAST has no mode for a failing dependency


def test_http_429_counts_and_a_4xx_does_not(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans = failing_search_run(429)
    _send(processor.grpc_endpoint, spans)
    root, _ = _blamed(sink, spans)
    assert root[sc.BLAME_CATEGORY] == "dependency"
    assert "HTTP 429" in root[sc.BLAME_REASON]

    from otel_blame.conventions import build_trajectory
    from otel_blame.conventions.otlp import sdk_spans_to_proto

    built = build_trajectory(sdk_spans_to_proto(failing_search_run(404))).trajectory
    # a 404 is the caller's request being wrong: only the tool span's own error status remains
    assert [(f.name, f.kind) for f in built.dependency_failures] == [("web_search", "tool_error")]


def test_an_agents_own_wrong_output_is_category_agent(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans = record_agent_run(
        [("Planner", "Plan: compute 6*7."), ("Solver", "The answer is 41."), ("Critic", "Looks right.")],
        failed=True,
    )
    _send(processor.grpc_endpoint, spans)
    root, culprit = _blamed(sink, spans)
    assert root[sc.BLAME_CATEGORY] == culprit[sc.BLAME_CATEGORY] == "agent"
    assert sc.BLAME_DEPENDENCY not in root and sc.BLAME_DEPENDENCY not in culprit


def test_contradictory_instructions_make_it_a_specification_failure(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans = record_agent_run(
        [
            (
                "Planner",
                "Plan: multiply six by seven, but also report the sum; the result must be one number.",
            ),
            ("Solver", "These instructions are contradictory: a product and a sum cannot be one number. 13."),
            ("Critic", "Final answer: 13"),
        ],
        failed=True,
    )
    _send(processor.grpc_endpoint, spans)
    root, culprit = _blamed(sink, spans)
    assert root[sc.BLAME_CATEGORY] == culprit[sc.BLAME_CATEGORY] == "specification"
    assert "specification problem" in root[sc.BLAME_REASON]
    assert sc.BLAME_DEPENDENCY not in root


def test_premature_terminate_is_a_mast_premature_termination(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans = record_agent_run(
        [("Planner", "Plan: compute 6*7 in Python."), ("Coder", "Nothing more to do. TERMINATE")],
        failed=True,
    )
    _send(processor.grpc_endpoint, spans)
    root, culprit = _blamed(sink, spans)
    assert root[sc.BLAME_FAILURE_MODE] == "premature_termination"
    assert sc.BLAME_FAILURE_MODE not in culprit  # the root carries the mode
