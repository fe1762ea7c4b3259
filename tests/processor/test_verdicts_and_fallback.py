"""Late verdicts add a ``blame {agent}`` span; LLM errors and timeouts fall back to the heuristic."""

from __future__ import annotations

import json

from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.cli import main
from otel_blame.conventions import attributes_to_dict
from tests.support import Reply, ScriptedLLM

from .spans import record_agent_run


def _send(endpoint: str, spans) -> None:  # noqa: ANN001
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()


def test_late_verdict_emits_a_blame_span_linked_to_the_culprit(sink, make_processor) -> None:  # noqa: ANN001
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
    assert answer["status"] == "attributed" and answer["method"] == "heuristic"
    arrived = sink.wait_for_spans(len(spans) + 1, timeout=10)
    blame = arrived[-1].span
    assert blame.name == sc.late_blame_span_name(answer["agent"])
    assert blame.trace_id.hex() == trace_id
    attrs = attributes_to_dict(blame.attributes)
    assert attrs[sc.BLAME_AGENT] == answer["agent"] and attrs[sc.BLAME_STEP] == answer["step"]
    steps = sorted((s for s in spans if s.name.startswith("invoke_agent")), key=lambda s: s.start_time)
    assert blame.links[0].span_id == steps[answer["step"]].context.span_id.to_bytes(8, "big")
    root = next(s for s in spans if s.parent is None)
    assert blame.parent_span_id == root.context.span_id.to_bytes(8, "big")
    again = CliRunner().invoke(main, ["verdict", trace_id, "--endpoint", processor.http_endpoint])
    assert json.loads(again.output)["status"] == "already_attributed"
    assert len(sink.spans()) == len(spans) + 1  # no second blame span
    unknown = CliRunner().invoke(main, ["verdict", "ab" * 16, "--endpoint", processor.http_endpoint])
    assert unknown.exit_code != 0 and "HTTP 404" in unknown.output
    bad = CliRunner().invoke(main, ["verdict", "xyz", "--endpoint", processor.http_endpoint])
    assert bad.exit_code != 0 and "HTTP 400" in bad.output


def test_verdict_while_the_trace_is_still_assembling(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(assembly={"quiet_period": 1.0})
    spans = record_agent_run([("A", "a"), ("B", "b")], failed=False)
    _send(processor.grpc_endpoint, spans)
    answer = processor.submit_verdict(format(spans[0].context.trace_id, "032x"), "failure", "42")
    assert answer["status"] == "pending"
    arrived = sink.wait_for_spans(len(spans), timeout=10)
    root = next(r.span for r in arrived if not r.span.parent_span_id)
    assert attributes_to_dict(root.attributes)[sc.BLAME_METHOD] == "heuristic"


def _llm_config(llm: ScriptedLLM, timeout: float) -> dict:
    return {
        "method": "all_at_once",
        "timeout": timeout,
        "llm": {
            "base_url": llm.base_url,
            "api_key": "sk-test-000000000000000000000",
            "model": "m",
            "max_retries": 0,
        },
    }


def test_llm_error_falls_back_to_heuristic_and_says_so(sink, make_processor) -> None:  # noqa: ANN001
    with ScriptedLLM([], default=Reply(status=500, content="boom")) as llm:
        processor = make_processor(attribution=_llm_config(llm, 10.0))
        spans = record_agent_run(
            [("A", "my key is sk-proj-abcdefghijklmnopqrstuvwxyz123456"), ("B", "wrong")], failed=True
        )
        _send(processor.grpc_endpoint, spans)
        arrived = sink.wait_for_spans(len(spans), timeout=15)
        root = next(r.span for r in arrived if not r.span.parent_span_id)
        assert attributes_to_dict(root.attributes)[sc.BLAME_METHOD] == "heuristic(fallback:all_at_once)"
        assert llm.calls >= 1
        prompt = json.dumps(llm.requests)
        assert "abcdefghijklmnopqrstuvwxyz123456" not in prompt and "REDACTED" in prompt
    assert processor.stats()["fallback_attributions"] == 1


def test_llm_timeout_falls_back_within_the_per_trace_timeout(sink, make_processor) -> None:  # noqa: ANN001
    # The LLM answers only after 60 s; the trace must arrive well before that (within the 20 s
    # wait, a margin that holds on a loaded machine), so the 0.5 s per-trace timeout cut it short.
    with ScriptedLLM([], default=Reply(content="{}", delay_seconds=60.0)) as llm:
        processor = make_processor(attribution=_llm_config(llm, 0.5))
        spans = record_agent_run([("A", "a"), ("B", "b")], failed=True)
        _send(processor.grpc_endpoint, spans)
        arrived = sink.wait_for_spans(len(spans), timeout=20)
        root = next(r.span for r in arrived if not r.span.parent_span_id)
        assert attributes_to_dict(root.attributes)[sc.BLAME_METHOD] == "heuristic(fallback:all_at_once)"


def test_failed_root_after_max_wait_gets_a_blame_span(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(assembly={"quiet_period": 0.1, "max_wait": 0.5})
    spans = record_agent_run([("A", "a"), ("B", "Error: gave up")], failed=True)
    root = next(s for s in spans if s.parent is None)
    children = [s for s in spans if s.parent is not None]
    _send(processor.grpc_endpoint, children)  # a long task: its steps ended long before its root
    sink.wait_for_spans(len(children), timeout=5)  # released unattributed after max_wait
    _send(processor.grpc_endpoint, [root])
    arrived = sink.wait_for_spans(len(spans) + 1, timeout=10)
    blame = next(r.span for r in arrived if r.span.name.startswith("blame "))
    assert blame.trace_id == root.context.trace_id.to_bytes(16, "big")
    assert attributes_to_dict(blame.attributes)[sc.BLAME_METHOD] == "heuristic"
    assert processor.stats()["late_root_failures"] == 1
