"""One worker pool for analysis: the attribution timeout is a deadline the LLM client honours.

An LLM that never answers in time still ends in the fallback, each trace within its budget, and
no second (attribution) pool is started beside the analyser's."""

from __future__ import annotations

import threading
import time

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.attribution.llm_settings import LLMSettings
from otel_blame.conventions import attributes_to_dict, sdk_spans_to_proto, trajectory_from_spans
from otel_blame.processor.attributor import AttributionRunner
from otel_blame.processor.config import AttributionConfig
from tests.support import Reply, ScriptedLLM

from .spans import record_agent_run


def _send(endpoint: str, spans) -> None:  # noqa: ANN001
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()


def _llm(server: ScriptedLLM) -> dict:
    return {
        "base_url": server.base_url,
        "api_key": "sk-test-000000000000000000000",
        "model": "m",
        "timeout": 60.0,  # the per-request timeout; the attribution deadline must cut it short
        "max_retries": 3,
        "backoff_seconds": 0.0,
    }


def test_a_hanging_llm_falls_back_on_the_single_analysis_pool(sink, make_processor) -> None:  # noqa: ANN001
    # One worker, three failed traces, an LLM that answers after 60 s and a 0.5 s budget: every
    # trace must end in the fallback (a second pool is what used to enforce this), and well
    # before the LLM's 60 s (the 30 s wait is a margin for a loaded machine, not a bound).
    with ScriptedLLM([], default=Reply(content="{}", delay_seconds=60.0)) as llm:
        processor = make_processor(
            attribution={"method": "all_at_once", "timeout": 0.5, "workers": 1, "llm": _llm(llm)}
        )
        runs = [record_agent_run([("A", "a"), ("B", f"wrong {n}")], failed=True) for n in range(3)]
        for spans in runs:
            _send(processor.grpc_endpoint, spans)
        arrived = sink.wait_for_spans(sum(len(spans) for spans in runs), timeout=30)
        roots = [r.span for r in arrived if not r.span.parent_span_id]
        assert len(roots) == 3
        for root in roots:
            assert attributes_to_dict(root.attributes)[sc.BLAME_METHOD] == "heuristic(fallback:all_at_once)"
        names = [thread.name for thread in threading.enumerate()]
        assert not [name for name in names if name.startswith("otel-blame-attribute")]
        assert processor.stats()["analysis_workers"] == 1  # one worker process, no pool beside it
        assert llm.calls >= 1
    assert processor.stats()["fallback_attributions"] == 3


def _runner(server: ScriptedLLM, timeout: float) -> AttributionRunner:
    llm = LLMSettings(**_llm(server))
    return AttributionRunner(AttributionConfig(method="all_at_once", llm=llm, timeout=timeout))


def _failed_trajectory():  # noqa: ANN202
    return trajectory_from_spans(sdk_spans_to_proto(record_agent_run([("A", "a"), ("B", "b")], failed=True)))


def test_a_trace_whose_budget_was_spent_in_the_queue_goes_straight_to_the_fallback() -> None:
    with ScriptedLLM([], default=Reply(content="{}")) as llm:
        outcome = _runner(llm, 1.0).attribute(_failed_trajectory(), submitted_at=time.monotonic() - 5)
        assert llm.calls == 0
    assert outcome.fell_back and outcome.attribution is not None
    assert outcome.attribution.method == "heuristic(fallback:all_at_once)"
    assert "timed out after 1 s" in (outcome.problem or "")


def test_the_deadline_ends_the_request_and_the_retries_on_the_calling_thread() -> None:
    # 3 retries of a 60 s request would take minutes; the 0.5 s deadline ends the first request
    # and stops the retries. The method runs on this very thread.
    with ScriptedLLM([], default=Reply(content="{}", delay_seconds=60.0)) as llm:
        runner = _runner(llm, 0.5)
        method, ran_on = runner.method, []

        class Spy:
            name = method.name

            def attribute(self, trajectory):  # noqa: ANN001, ANN202
                ran_on.append(threading.current_thread())
                return method.attribute(trajectory)

        runner.method = Spy()  # type: ignore[assignment]
        outcome = runner.attribute(_failed_trajectory())
        assert llm.calls == 1
    assert ran_on == [threading.current_thread()]
    assert outcome.fell_back and "timed out" in (outcome.problem or "")


def test_an_in_process_method_still_runs_when_its_budget_was_spent_in_the_queue() -> None:
    # the heuristic makes no request and takes milliseconds: a long queue must not leave the
    # trace unattributed (there is no other fallback when the method is the heuristic itself)
    runner = AttributionRunner(AttributionConfig(method="heuristic", timeout=1.0))
    outcome = runner.attribute(_failed_trajectory(), submitted_at=time.monotonic() - 5)
    assert outcome.attribution is not None and not outcome.fell_back
    assert outcome.attribution.method == "heuristic"
