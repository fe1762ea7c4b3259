"""LLM-client-only instrumentations with the plain OpenTelemetry API around the run: the contrib
``opentelemetry-instrumentation-openai-v2`` (content on spans or in log records) and Logfire. The
agent is known only from each call's system prompt; without one, it is the service name, counted."""

from __future__ import annotations

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from otel_blame import semconv as sc
from otel_blame.conventions import build_trajectory, sdk_logs_to_proto, sdk_spans_to_proto
from otel_blame.trajectory import Outcome
from tests.support import ScriptedLLM

from . import apps
from .conftest import SERVICE, blame_through_processor

pytest.importorskip("opentelemetry.instrumentation.openai_v2")


@pytest.fixture
def openai_v2(capture, monkeypatch):  # noqa: ANN001, ANN201
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")

    def instrument(mode: str):  # noqa: ANN202
        monkeypatch.setenv(sc.ENV_CAPTURE_MESSAGE_CONTENT, mode)
        OpenAIInstrumentor().instrument(tracer_provider=capture.provider, logger_provider=logger_provider)
        return capture, logs

    yield instrument
    OpenAIInstrumentor().uninstrument()
    logger_provider.shutdown()


@pytest.mark.parametrize("mode", ["SPAN_ONLY", "EVENT_ONLY"])
def test_openai_v2_agents_from_system_prompts_and_blame(openai_v2, mode, sink, make_processor) -> None:  # noqa: ANN001
    capture, logs = openai_v2(mode)
    with ScriptedLLM(apps.SCRIPT) as llm, pytest.raises(apps.WrongAnswer):
        apps.plain_app(llm.base_url, capture.provider.get_tracer("app"))
    spans = capture.spans()
    records = list(logs.get_finished_logs())
    assert (mode == "EVENT_ONLY") == bool(records)  # the content really is where the mode puts it
    built = build_trajectory(sdk_spans_to_proto(spans), sdk_logs_to_proto(records))
    trajectory = built.trajectory
    assert [(s.agent, s.content) for s in trajectory.steps] == [
        ("Planner", apps.PLAN),
        ("Researcher", apps.FABRICATED),
        ("Writer", apps.ANSWER),
    ]
    assert all(s.agent != "chat scripted-model" for s in trajectory.steps)
    assert trajectory.outcome == Outcome.FAILURE and built.notes.agent_from_service == 0
    if mode == "SPAN_ONLY":  # the processor receives spans only here
        culprit = blame_through_processor(make_processor(), sink, spans)
        assert culprit["attributes"][sc.BLAME_AGENT] == "Researcher"
        assert culprit["span_id"] == trajectory.steps[1].span_id
        assert culprit["name"] == "chat scripted-model"


def test_no_agent_anywhere_falls_back_to_the_service_name_and_says_so(openai_v2) -> None:  # noqa: ANN001
    capture, _ = openai_v2("SPAN_ONLY")
    anonymous = dict.fromkeys(apps.AGENTS, "Be brief.")
    with ScriptedLLM(apps.SCRIPT) as llm, pytest.raises(apps.WrongAnswer):
        apps.plain_app(llm.base_url, capture.provider.get_tracer("app"), prompts=anonymous)
    built = capture.built()
    assert [s.agent for s in built.trajectory.steps] == [SERVICE] * 3
    assert built.notes.agent_from_service == 3 and built.notes.service == SERVICE


def test_logfire_openai_spans_agents_from_system_prompts_and_blame(capture, sink, make_processor) -> None:  # noqa: ANN001
    logfire = pytest.importorskip("logfire")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    logfire.configure(
        send_to_logfire=False,
        console=False,
        service_name=SERVICE,
        additional_span_processors=[SimpleSpanProcessor(capture.exporter)],
    )
    with logfire.instrument_openai(), ScriptedLLM(apps.SCRIPT) as llm, pytest.raises(apps.WrongAnswer):
        apps.plain_app(llm.base_url, capture.provider.get_tracer("app"))
    logfire.force_flush()
    spans = capture.spans()
    assert {s.instrumentation_scope.name for s in spans} >= {"logfire.openai", "app"}
    built = capture.built()
    trajectory = built.trajectory
    assert [(s.agent, s.content) for s in trajectory.steps] == [
        ("Planner", apps.PLAN),
        ("Researcher", apps.FABRICATED),
        ("Writer", apps.ANSWER),
    ]
    assert trajectory.outcome == Outcome.FAILURE and built.notes.agent_from_service == 0
    culprit = blame_through_processor(make_processor(), sink, spans)
    assert culprit["attributes"][sc.BLAME_AGENT] == "Researcher"
    assert culprit["span_id"] == trajectory.steps[1].span_id
    assert culprit["name"].startswith("Chat Completion with")
