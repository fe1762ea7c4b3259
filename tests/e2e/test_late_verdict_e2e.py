"""A failure known only later, end to end with the real programs.

An agent run that succeeds from the app's view goes app -> Collector (collector_config/single.yaml)
-> `otel-blame serve` -> Jaeger. Once the whole trace is in Jaeger, the real `otel-blame verdict`
CLI reports it failed; Jaeger then shows one new span ``blame {agent}`` in the same trace, with the
blame attributes and a reference to the culprit step's span, and the original spans unchanged.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_blame import semconv as sc
from otel_blame.demo.scenario import SpanCounter
from otel_blame.instrumentation import configure, record_message, reset_configuration, set_outcome, task

from .harness import (
    COLLECTOR_BIN,
    COLLECTOR_CONFIG_DIR,
    JAEGER_BIN,
    BlameServer,
    Collector,
    Jaeger,
    ProcessGroup,
    iter_spans,
    jaeger_references,
    jaeger_tags,
    missing_binary_reason,
    run_verdict,
    wait_until,
)

_missing = missing_binary_reason(COLLECTOR_BIN) or missing_binary_reason(JAEGER_BIN)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(_missing is not None, reason=str(_missing)),
]

AGENTS = ("triage", "researcher", "writer")


def send_successful_run(service: str, endpoint: str) -> dict[str, set[str]]:
    """One instrumented run the app considers a success; trace id -> the span ids it ended."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    counter = SpanCounter()
    provider.add_span_processor(counter)
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True), schedule_delay_millis=200)
    )
    configure(tracer_provider=provider)
    try:
        with task("refund-ticket", input="Customer asks: refund order #7 (20 EUR)?"):
            record_message(AGENTS[0], "Order #7: the customer asks for a refund of 20 EUR.")
            record_message(AGENTS[1], "Policy lookup: order #7 totals 200 EUR; refundable amount 200 EUR.")
            record_message(AGENTS[2], "Done: we refunded 200 EUR for order #7.")
            set_outcome(True, final_output="refunded 200 EUR")
    finally:
        reset_configuration()
        provider.shutdown()
    return counter.spans


def span_view(span: dict) -> tuple:
    """What must not change about an original span once the verdict's span joined the trace."""
    tags = sorted((t["key"], json.dumps(t["value"])) for t in span.get("tags", []))
    refs = sorted((r["refType"], r["traceID"], r["spanID"]) for r in jaeger_references(span))
    events = [
        (log["timestamp"], sorted((f["key"], json.dumps(f["value"])) for f in log["fields"]))
        for log in span.get("logs", [])
    ]
    return (span["operationName"], span["startTime"], span["duration"], tuple(tags), tuple(refs), str(events))


def test_late_verdict_adds_a_linked_blame_span_in_jaeger(group: ProcessGroup, tmp_path: Path):
    jaeger = Jaeger(group)
    blame = BlameServer(group, "otel-blame", downstream=jaeger.otlp_grpc_endpoint, wal_dir=tmp_path / "wal")
    collector = Collector(
        group,
        COLLECTOR_CONFIG_DIR / "single.yaml",
        "otelcol-single",
        {"OTEL_BLAME_ENDPOINT": blame.otlp_grpc_endpoint, "OTELCOL_GROUP_WAIT": "1s"},
    )
    service = f"e2e-late-verdict-{uuid.uuid4().hex[:8]}"
    sent = send_successful_run(service, collector.otlp_grpc_endpoint)
    assert len(sent) == 1
    trace_id, span_ids = next(iter(sent.items()))

    def whole() -> dict | None:
        trace = jaeger.trace(trace_id)
        return trace if trace and {s["spanID"] for s in iter_spans(trace)} == span_ids else None

    try:
        before = wait_until(whole, timeout=60, what=f"all {len(span_ids)} spans of {trace_id} in Jaeger")
    except TimeoutError as error:
        raise AssertionError(f"{error}\n{group.logs()}") from None
    # a success: nothing blamed yet
    assert not any(k.startswith("blame.") for s in iter_spans(before) for k in jaeger_tags(s))

    verdict = run_verdict(blame.http_port, trace_id, failed=True, expected_output="refund 20 EUR")
    assert verdict.returncode == 0, f"verdict failed: {verdict.stdout}{verdict.stderr}\n{group.logs()}"
    answer = json.loads(verdict.stdout)
    assert answer["status"] == "attributed", answer
    assert answer["agent"] in AGENTS

    def with_blame_span() -> dict | None:
        trace = jaeger.trace(trace_id)
        if trace is None:
            return None
        new = [s for s in iter_spans(trace) if s["spanID"] not in span_ids]
        return trace if new else None

    try:
        after = wait_until(with_blame_span, timeout=60, what=f"the blame span of {trace_id} in Jaeger")
    except TimeoutError as error:
        raise AssertionError(f"{error}\n{group.logs()}") from None
    spans = {s["spanID"]: s for s in iter_spans(after)}
    new_spans = [s for sid, s in spans.items() if sid not in span_ids]
    assert len(new_spans) == 1, (
        f"exactly one span joins the trace, got {[s['operationName'] for s in new_spans]}"
    )
    blame_span = new_spans[0]
    assert blame_span["operationName"] == sc.late_blame_span_name(answer["agent"])
    assert blame_span["traceID"] == trace_id
    tags = jaeger_tags(blame_span)
    assert tags[sc.BLAME_AGENT] == answer["agent"]
    assert tags[sc.BLAME_STEP] == answer["step"]
    assert tags[sc.BLAME_REASON] == answer["reason"]
    assert tags[sc.BLAME_METHOD] == answer["method"] and answer["method"].startswith("heuristic")
    assert 0.0 <= tags[sc.BLAME_CONFIDENCE] <= 1.0

    # its parent is the run's root; its other reference (the OTLP link) is the culprit step's span
    root = next(s for s in before["spans"] if not jaeger_references(s))
    references = {(r["refType"], r["spanID"]) for r in jaeger_references(blame_span)}
    assert ("CHILD_OF", root["spanID"]) in references
    linked = [spans[sid] for ref_type, sid in references if ref_type != "CHILD_OF"]
    assert len(linked) == 1, f"one link to the culprit span, got {references}"
    culprit_tags = jaeger_tags(linked[0])
    assert culprit_tags[sc.GEN_AI_AGENT_NAME] == answer["agent"]
    assert culprit_tags[sc.STEP_INDEX] == answer["step"]
    assert all(r["traceID"] == trace_id for r in jaeger_references(blame_span))

    # the spans the app sent are exactly as they were
    assert {sid: span_view(s) for sid, s in spans.items() if sid in span_ids} == {
        s["spanID"]: span_view(s) for s in iter_spans(before)
    }

    # a second verdict changes nothing
    again = run_verdict(blame.http_port, trace_id, failed=True, expected_output="refund 20 EUR")
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "already_attributed"
