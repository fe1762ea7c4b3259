"""The processor end to end in-process: real SDK exporters in, a real OTLP/gRPC server out."""

from __future__ import annotations

import time

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.conventions import attributes_to_dict

from .spans import record_agent_run


def _send(endpoint: str, spans) -> None:  # noqa: ANN001
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def test_failed_trace_gets_blame_on_the_right_spans(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    spans = record_agent_run(
        [("Planner", "Plan: compute 6*7."), ("Solver", "The answer is 41."), ("Critic", "Looks right.")],
        failed=True,
    )
    _send(processor.grpc_endpoint, spans)
    arrived = sink.wait_for_spans(len(spans), timeout=10)
    by_name = {r.span.name: r.span for r in arrived}
    root = by_name["invoke_workflow solve"]
    root_attrs = attributes_to_dict(root.attributes)
    assert root_attrs[sc.BLAME_METHOD] == "heuristic"
    assert 0.0 <= root_attrs[sc.BLAME_CONFIDENCE] <= 1.0
    culprit_agent = root_attrs[sc.BLAME_AGENT]
    culprit = by_name[sc.agent_span_name(culprit_agent)]
    culprit_attrs = attributes_to_dict(culprit.attributes)
    assert culprit_attrs[sc.BLAME_CULPRIT] is True
    assert culprit_attrs[sc.BLAME_STEP] == root_attrs[sc.BLAME_STEP]
    assert [e.name for e in culprit.events] == [sc.BLAME_ASSIGNED_EVENT, sc.GEN_AI_EVALUATION_RESULT_EVENT]
    for agent in ("Planner", "Solver", "Critic"):
        assert sc.BLAME_SCORE in attributes_to_dict(by_name[sc.agent_span_name(agent)].attributes)
    # originals untouched
    original_root = next(s for s in spans if s.parent is None)
    assert root.status.code == 2 and root.status.message == original_root.status.description
    assert root_attrs[sc.TASK_OUTCOME] == "failure"
    assert processor.stats()["attributed_traces"] == 1


def test_successful_and_non_agent_traces_pass_unchanged(sink, make_processor) -> None:  # noqa: ANN001
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    # The agent trace is held for its 3 s quiet period; the plain trace, sent after it, must not be:
    # it arrives first. Order, not a wall-clock bound, so a loaded machine cannot break it.
    processor = make_processor(assembly={"quiet_period": 3.0, "max_wait": 10.0})
    ok = record_agent_run([("A", "x"), ("B", "42")], failed=False)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("web").start_as_current_span("GET /health") as span:
        span.set_attribute("http.request.method", "GET")
    plain = list(memory.get_finished_spans())
    _send(processor.grpc_endpoint, ok)
    _send(processor.grpc_endpoint, plain)
    first = sink.wait_for_spans(1, timeout=10)[0]
    assert first.span.name == "GET /health"  # forwarded without waiting for a quiet period
    arrived = sink.wait_for_spans(1 + len(ok), timeout=20)
    from otel_blame.conventions import sdk_spans_to_proto

    expected = {
        s.span_id: s for rs in sdk_spans_to_proto(ok + plain) for ss in rs.scope_spans for s in ss.spans
    }
    assert len(arrived) == len(expected)
    for recorded in arrived:
        assert recorded.span == expected[recorded.span.span_id]


def test_repeated_culprit_fires_one_webhook_alert(sink, make_processor) -> None:  # noqa: ANN001
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    received: list[dict] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        processor = make_processor(
            alerting={
                "webhook": {"url": f"http://127.0.0.1:{server.server_address[1]}/hook"},
                "repeated_culprit": {"threshold": 2, "window_seconds": 60},
                "count_undecided": True,  # the alert's mechanics, whatever the verdicts' support
            }
        )
        runs = [
            record_agent_run([("Planner", "plan"), ("Solver", "The answer is 41.")], failed=True)
            for _ in range(3)
        ]
        for spans in runs:
            _send(processor.grpc_endpoint, spans)
        sink.wait_for_spans(sum(len(s) for s in runs), timeout=10)
        deadline = time.monotonic() + 5
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        assert len(received) == 1  # the third blame is inside the cooldown
        assert received[0]["count"] == 2 and len(received[0]["trace_ids"]) == 2
        assert processor.stats()["alerts"] == 1
    finally:
        server.shutdown()
