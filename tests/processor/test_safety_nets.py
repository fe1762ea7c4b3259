"""The right span is blamed (checked by span id against a planted fault), and the safety nets hold:
an analysis that crashes forwards the trace unchanged, a failed trace with no agent steps is
counted, and the extension points (extra HTTP routes, attribution listeners) work behind the token.
"""

from __future__ import annotations

import http.client
import json
import time

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from prometheus_client.parser import text_string_to_metric_families
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from otel_blame import semconv as sc
from otel_blame.conventions import attributes_to_dict, sdk_spans_to_proto
from otel_blame.processor import BlameProcessor, load_config
from otel_blame.processor.analyser import FinishedAttribution
from otel_blame.processor.enricher import BlameEnricher

from .conftest import processor_overrides
from .spans import record_agent_run

# the planted fault: the Solver (step 1) states the wrong answer that the run ends with
PLANTED = [("Planner", "Plan: compute 6*7."), ("Solver", "The answer is 41."), ("Critic", "Looks right.")]


def _send(endpoint: str, spans) -> None:  # noqa: ANN001
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def _span_id(spans, name: str) -> bytes:  # noqa: ANN001
    return next(s.context.span_id.to_bytes(8, "big") for s in spans if s.name == name)


def test_the_planted_culprit_span_is_blamed_by_span_id(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans = record_agent_run(PLANTED, failed=True)
    solver = _span_id(spans, sc.agent_span_name("Solver"))
    root_id = _span_id(spans, sc.workflow_span_name("solve"))
    _send(processor.grpc_endpoint, spans)
    arrived = {r.span.span_id: r.span for r in sink.wait_for_spans(len(spans), timeout=10)}
    culprits = [
        sid for sid, span in arrived.items() if attributes_to_dict(span.attributes).get(sc.BLAME_CULPRIT)
    ]
    assert culprits == [solver]
    assert [
        sid
        for sid, span in arrived.items()
        if any(event.name == sc.BLAME_ASSIGNED_EVENT for event in span.events)
    ] == [solver]
    solver_attrs = attributes_to_dict(arrived[solver].attributes)
    assert (solver_attrs[sc.BLAME_AGENT], solver_attrs[sc.BLAME_STEP]) == ("Solver", 1)
    root_attrs = attributes_to_dict(arrived[root_id].attributes)
    assert (root_attrs[sc.BLAME_AGENT], root_attrs[sc.BLAME_STEP]) == ("Solver", 1)
    carrying_root_blame = [
        sid for sid, s in arrived.items() if sc.BLAME_METHOD in attributes_to_dict(s.attributes)
    ]
    assert carrying_root_blame == [root_id]


def test_a_late_verdict_links_the_planted_culprit_span(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans = record_agent_run(PLANTED, failed=False, expected=None)
    _send(processor.grpc_endpoint, spans)
    sink.wait_for_spans(len(spans), timeout=10)
    trace_id = f"{spans[0].context.trace_id:032x}"
    answer = processor.submit_verdict(trace_id, "failure", expected_output="42")
    assert (answer["status"], answer["agent"], answer["step"]) == ("attributed", "Solver", 1)
    blame = next(
        r.span
        for r in sink.wait_for_spans(len(spans) + 1, timeout=10)
        if r.span.span_id.hex() == answer["blame_span_id"]
    )
    assert [link.span_id for link in blame.links] == [_span_id(spans, sc.agent_span_name("Solver"))]


class _CrashingEnricher(BlameEnricher):
    """Writes onto the spans and then fails half-way: the worst moment to crash."""

    def enrich(self, resource_spans, trajectory, attribution) -> int:  # noqa: ANN001
        for resource in resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    span.name = "mangled"
        raise RuntimeError("enricher bug")


def test_an_analysis_that_crashes_forwards_the_trace_unchanged(sink, tmp_path) -> None:  # noqa: ANN001
    config = load_config(overrides=processor_overrides(sink.endpoint, tmp_path / "wal"), environ={})
    processor = BlameProcessor(config, enricher=_CrashingEnricher()).start()
    try:
        spans = record_agent_run(PLANTED, failed=True)
        _send(processor.grpc_endpoint, spans)
        arrived = sink.wait_for_spans(len(spans), timeout=10)
        sent = {s.span_id: s for rs in sdk_spans_to_proto(spans) for ss in rs.scope_spans for s in ss.spans}
        assert {r.span.span_id: r.span for r in arrived} == sent  # byte for byte as it came in
        # the trace is forwarded before its analysis ends: wait for the analysis to have crashed and its
        # job's row to be released, not only for the log to be empty (it is, for a moment, before the
        # analysis job's row is written); a bound, not the expected wait
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            stats = processor.stats()
            if stats["analysis_errors"] and not stats["wal_pending_rows"]:
                break
            time.sleep(0.05)
        stats = processor.stats()
        assert stats["analysis_errors"] == 1 and stats["attributed_traces"] == 0
        assert stats["wal_pending_rows"] == 0
    finally:
        assert processor.stop(timeout=5)


def test_a_failed_trace_without_agent_steps_is_counted(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "no-steps"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("app").start_as_current_span(sc.workflow_span_name("crew")) as root:
        root.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_WORKFLOW)
        root.set_status(Status(StatusCode.ERROR, "crew failed"))
    spans = list(memory.get_finished_spans())
    _send(processor.grpc_endpoint, spans)
    sink.wait_for_spans(len(spans), timeout=10)
    deadline = time.monotonic() + 5
    while processor.stats()["unattributed_failed_traces"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processor.stats()["unattributed_failed_traces"] == 1
    assert processor.stats()["no_trajectory_traces"] == 1
    body, _ = processor.render_metrics()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }
    assert samples[("otel_blame_traces_total", (("attributed", "false"), ("outcome", "failure")))] == 1
    assert samples[("otel_blame_processor_unattributed_failed_traces_total", ())] == 1


def test_extra_routes_sit_behind_the_token_and_listeners_get_redacted_trajectories(sink, tmp_path) -> None:  # noqa: ANN001
    async def ping(request: Request) -> PlainTextResponse:
        return PlainTextResponse("pong")

    heard: list[FinishedAttribution] = []
    overrides = processor_overrides(sink.endpoint, tmp_path / "wal", receivers={"auth_token": "s3cret"})
    processor = BlameProcessor(
        load_config(overrides=overrides, environ={}),
        http_routes=[Route("/extra/ping", ping)],
        listeners=[heard.append],
    ).start()
    try:
        host, _, port = processor.http_endpoint.rpartition(":")
        for headers, status in (({}, 401), ({"Authorization": "Bearer s3cret"}, 200)):
            connection = http.client.HTTPConnection(host, int(port), timeout=10)
            connection.request("GET", "/extra/ping", headers=headers)
            response = connection.getresponse()
            assert (response.status, response.read() if status == 200 else b"pong") == (status, b"pong")
            connection.close()
        secret = "sk-proj-" + "Ab1_" * 10
        spans = record_agent_run(
            [("Planner", "plan"), ("Solver", f"The answer is 41. key={secret}")], failed=True
        )
        exporter = OTLPSpanExporter(
            endpoint=processor.grpc_endpoint, insecure=True, headers={"authorization": "Bearer s3cret"}
        )
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        exporter.shutdown()
        sink.wait_for_spans(len(spans), timeout=10)
        deadline = time.monotonic() + 5
        while not heard and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(heard) == 1
        finished = heard[0]
        assert finished.trace_id == f"{spans[0].context.trace_id:032x}"
        assert (finished.service, finished.attribution.agent, finished.outcome) == (
            "agents-under-test",
            "Solver",
            "failure",
        )
        assert secret not in json.dumps(finished.trajectory.model_dump(mode="json"))
        assert finished.late is False
    finally:
        processor.stop(timeout=5)
