"""The attribution is also written as a GenAI ``gen_ai.evaluation.result`` event on the culprit span.

Real OTLP traffic: SDK spans exported over gRPC to an in-process processor, enriched spans
received by a recording OTLP server downstream."""

from __future__ import annotations

import json
import time

from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from otel_blame import semconv as sc
from otel_blame.cli import main
from otel_blame.conventions import attributes_to_dict

from .spans import output_messages, record_agent_run


def _send(endpoint: str, spans) -> None:  # noqa: ANN001
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def _evaluation_events(span) -> list[dict]:  # noqa: ANN001
    return [
        attributes_to_dict(event.attributes)
        for event in span.events
        if event.name == sc.GEN_AI_EVALUATION_RESULT_EVENT
    ]


def test_culprit_span_carries_one_evaluation_result(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans = record_agent_run(
        [("Planner", "Plan: compute 6*7."), ("Solver", "The answer is 41."), ("Critic", "Looks right.")],
        failed=True,
    )
    _send(processor.grpc_endpoint, spans)
    arrived = [r.span for r in sink.wait_for_spans(len(spans), timeout=10)]
    root = next(span for span in arrived if not span.parent_span_id)
    root_attrs = attributes_to_dict(root.attributes)
    culprit = next(span for span in arrived if attributes_to_dict(span.attributes).get(sc.BLAME_CULPRIT))
    events = _evaluation_events(culprit)
    assert events == [
        {
            sc.GEN_AI_EVALUATION_NAME: "failure_attribution",
            sc.GEN_AI_EVALUATION_SCORE_VALUE: root_attrs[sc.BLAME_CONFIDENCE],
            sc.GEN_AI_EVALUATION_SCORE_LABEL: "culprit",
            sc.GEN_AI_EVALUATION_EXPLANATION: root_attrs[sc.BLAME_REASON],
        }
    ]
    assert root_attrs[sc.BLAME_REASON]  # the explanation is a real reason, not empty
    event = next(e for e in culprit.events if e.name == sc.GEN_AI_EVALUATION_RESULT_EVENT)
    assert culprit.start_time_unix_nano <= event.time_unix_nano <= culprit.end_time_unix_nano
    # exactly one evaluation in the whole trace, and the blame.* attributes are unchanged
    assert sum(len(_evaluation_events(span)) for span in arrived) == 1
    culprit_attrs = attributes_to_dict(culprit.attributes)
    assert culprit_attrs[sc.BLAME_AGENT] == root_attrs[sc.BLAME_AGENT]
    assert culprit_attrs[sc.BLAME_STEP] == root_attrs[sc.BLAME_STEP]


def test_response_id_of_the_culprit_is_carried(sink, make_processor) -> None:  # noqa: ANN001
    """An LLM-only culprit (a ``chat`` span with ``gen_ai.response.id``) names the evaluated response."""
    processor = make_processor()
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "chat-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span(sc.workflow_span_name("answer")) as root:
        root.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_WORKFLOW)
        root.set_attribute(sc.TASK_INPUT, "What is six times seven?")
        root.set_attribute(sc.TASK_EXPECTED_OUTPUT, "42")
        with tracer.start_as_current_span(sc.agent_span_name("coder")) as agent:
            agent.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT)
            agent.set_attribute(sc.GEN_AI_AGENT_NAME, "coder")
            agent.set_attribute(sc.GEN_AI_RESPONSE_ID, "chatcmpl-42")
            agent.set_attribute(sc.GEN_AI_OUTPUT_MESSAGES, output_messages("The answer is 41."))
        root.set_attribute(sc.TASK_OUTCOME, sc.OUTCOME_FAILURE)
        root.set_status(Status(StatusCode.ERROR, "wrong answer"))
    spans = list(memory.get_finished_spans())
    _send(processor.grpc_endpoint, spans)
    arrived = [r.span for r in sink.wait_for_spans(len(spans), timeout=10)]
    culprit = next(span for span in arrived if span.name == sc.agent_span_name("coder"))
    (event,) = _evaluation_events(culprit)
    assert event[sc.GEN_AI_RESPONSE_ID] == "chatcmpl-42"
    assert event[sc.GEN_AI_EVALUATION_NAME] == "failure_attribution"


def test_successful_trace_gets_no_evaluation(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans = record_agent_run([("A", "x"), ("B", "42")], failed=False)
    _send(processor.grpc_endpoint, spans)
    arrived = [r.span for r in sink.wait_for_spans(len(spans), timeout=10)]
    assert all(not _evaluation_events(span) for span in arrived)


def test_late_verdict_blame_span_carries_the_evaluation(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans = record_agent_run(
        [("Planner", "plan"), ("Solver", "The answer is 41")], failed=False, expected=None
    )
    trace_id = format(spans[0].context.trace_id, "032x")
    _send(processor.grpc_endpoint, spans)
    sink.wait_for_spans(len(spans), timeout=10)
    result = CliRunner().invoke(
        main,
        ["verdict", trace_id, "--failed", "--expected-output", "42", "--endpoint", processor.http_endpoint],
    )
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    blame = sink.wait_for_spans(len(spans) + 1, timeout=10)[-1].span
    assert blame.name == sc.late_blame_span_name(answer["agent"])
    (event,) = _evaluation_events(blame)
    assert event[sc.GEN_AI_EVALUATION_NAME] == "failure_attribution"
    assert event[sc.GEN_AI_EVALUATION_SCORE_VALUE] == answer["confidence"]
    assert event[sc.GEN_AI_EVALUATION_SCORE_LABEL] == "culprit"
    assert event[sc.GEN_AI_EVALUATION_EXPLANATION] == answer["reason"]
    assert blame.links[0].span_id  # linked to the evaluated (culprit) span


# --- the same evaluation as the conventions' log-record event (enrichment.evaluation_log_records, on) ------


def _wait_for_log_records(sink, count: int, timeout: float = 10.0) -> list:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = sink.log_records()
        if len(records) >= count:
            return records
        time.sleep(0.05)
    return sink.log_records()


def _evaluation_records(sink) -> list:  # noqa: ANN001
    return [r for r in sink.log_records() if r.event_name == sc.GEN_AI_EVALUATION_RESULT_EVENT]


def test_evaluation_log_record_is_parented_to_the_culprit_span(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()  # on by default
    spans = record_agent_run(
        [("Planner", "Plan: compute 6*7."), ("Solver", "The answer is 41."), ("Critic", "Looks right.")],
        failed=True,
    )
    _send(processor.grpc_endpoint, spans)
    arrived = [r.span for r in sink.wait_for_spans(len(spans), timeout=10)]
    culprit = next(span for span in arrived if attributes_to_dict(span.attributes).get(sc.BLAME_CULPRIT))
    (record,) = _wait_for_log_records(sink, 1)
    assert record.event_name == sc.GEN_AI_EVALUATION_RESULT_EVENT
    assert (record.trace_id, record.span_id) == (culprit.trace_id, culprit.span_id)
    (span_event,) = _evaluation_events(culprit)
    assert attributes_to_dict(record.attributes) == span_event  # one evaluation, two carriers
    assert record.time_unix_nano == next(
        e.time_unix_nano for e in culprit.events if e.name == sc.GEN_AI_EVALUATION_RESULT_EVENT
    )
    (resource_logs,) = [r for request in sink.log_requests for r in request.resource_logs]
    assert attributes_to_dict(resource_logs.resource.attributes)[sc.SERVICE_NAME]  # the trace's resource


def test_no_evaluation_log_record_when_turned_off_or_successful(sink, make_processor) -> None:  # noqa: ANN001
    quiet = make_processor(enrichment={"evaluation_log_records": False})
    failed = record_agent_run([("A", "plan"), ("B", "The answer is 41.")], failed=True)
    _send(quiet.grpc_endpoint, failed)
    sink.wait_for_spans(len(failed), timeout=10)
    # both use the same WAL directory: the next one would replay (and record) what this one has
    # exported but not yet released, so it stops first
    quiet.stop()
    asking = make_processor()
    passed = record_agent_run([("A", "plan"), ("B", "42")], failed=False)
    _send(asking.grpc_endpoint, passed)
    sink.wait_for_spans(len(failed) + len(passed), timeout=10)
    asking.stop()  # everything it had is delivered
    assert _evaluation_records(sink) == []
    assert any(_evaluation_events(recorded.span) for recorded in sink.spans())  # the span event stays


def test_late_verdict_evaluation_log_record_names_the_blame_span(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(enrichment={"evaluation_log_records": True})
    spans = record_agent_run(
        [("Planner", "plan"), ("Solver", "The answer is 41")], failed=False, expected=None
    )
    trace_id = format(spans[0].context.trace_id, "032x")
    _send(processor.grpc_endpoint, spans)
    sink.wait_for_spans(len(spans), timeout=10)
    answer = processor.submit_verdict(trace_id, "failure", expected_output="42")
    assert answer["status"] == "attributed"
    (record,) = _wait_for_log_records(sink, 1)
    assert record.trace_id.hex() == trace_id and record.span_id.hex() == answer["blame_span_id"]
    assert attributes_to_dict(record.attributes)[sc.GEN_AI_EVALUATION_EXPLANATION] == answer["reason"]


def test_evaluation_log_record_survives_a_downstream_outage_and_a_restart(sink, make_processor) -> None:  # noqa: ANN001
    """Logged before it is sent: a processor stopped while the downstream is away sends it on restart."""
    sink.set_available(False)
    first = make_processor(enrichment={"evaluation_log_records": True})
    spans = record_agent_run([("Planner", "plan"), ("Solver", "The answer is 41.")], failed=True)
    _send(first.grpc_endpoint, spans)
    deadline = time.monotonic() + 10
    while first.stats().get("attributed_traces", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.stats()["attributed_traces"] == 1
    assert first.stop(timeout=1.0) is False  # nothing could be delivered
    sink.set_available(True)
    make_processor(enrichment={"evaluation_log_records": True})
    (record,) = _wait_for_log_records(sink, 1)
    assert record.event_name == sc.GEN_AI_EVALUATION_RESULT_EVENT
    assert record.trace_id == spans[0].context.trace_id.to_bytes(16, "big")
