"""LLM-client-only instrumentations with the plain OpenTelemetry API around the run: the contrib
``opentelemetry-instrumentation-openai-v2`` (content on spans or in log records) and Logfire. The
agent is known only from each call's system prompt; without one, it is the app span the call ran in
(never the service name), counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from otel_blame import semconv as sc
from otel_blame.conventions import attributes_to_dict, build_trajectory, sdk_logs_to_proto, sdk_spans_to_proto
from otel_blame.conventions.builder import UNNAMED_AGENT
from otel_blame.trajectory import Outcome
from tests.support import ScriptedLLM

from . import apps
from .conftest import SERVICE, blame_through_processor

pytest.importorskip("opentelemetry.instrumentation.openai_v2")
REPO = Path(__file__).resolve().parents[2]


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
    assert trajectory.outcome == Outcome.FAILURE and built.notes.agent_unnamed == 0
    if mode == "SPAN_ONLY":  # the processor receives spans only here
        culprit = blame_through_processor(make_processor(), sink, spans)
        assert culprit["attributes"][sc.BLAME_AGENT] == "Researcher"
        assert culprit["span_id"] == trajectory.steps[1].span_id
        assert culprit["name"] == "chat scripted-model"


def test_no_agent_anywhere_names_the_app_span_never_the_service_and_says_so(openai_v2) -> None:  # noqa: ANN001
    capture, _ = openai_v2("SPAN_ONLY")
    anonymous = dict.fromkeys(apps.AGENTS, "Be brief.")
    with ScriptedLLM(apps.SCRIPT) as llm, pytest.raises(apps.WrongAnswer):
        apps.plain_app(llm.base_url, capture.provider.get_tracer("app"), prompts=anonymous)
    built = capture.built()
    # the calls ran in the app's "answer_question" span: that is where a person would look
    assert [s.agent for s in built.trajectory.steps] == ["answer_question"] * 3
    assert built.notes.agent_unnamed == 3 and built.notes.service == SERVICE


@pytest.mark.parametrize("span_name", ["POST /v1/answer", "handler.run"])
def test_a_step_in_no_span_of_its_own_is_the_unnamed_agent_never_the_service(openai_v2, span_name) -> None:  # noqa: ANN001
    """Nothing names the agent and the span the calls ran in has no name of its own (it names an
    operation: an HTTP route, a method): "unnamed agent", counted, while the service name is right
    there on the resource."""
    capture, _ = openai_v2("SPAN_ONLY")
    anonymous = dict.fromkeys(apps.AGENTS, "Be brief.")
    with ScriptedLLM(apps.SCRIPT) as llm, pytest.raises(apps.WrongAnswer):
        apps.plain_app(
            llm.base_url, capture.provider.get_tracer("app"), prompts=anonymous, span_name=span_name
        )
    built = capture.built()
    assert built.notes.service == SERVICE
    assert [s.agent for s in built.trajectory.steps] == [UNNAMED_AGENT] * 3 == ["unnamed agent"] * 3
    assert built.notes.agent_unnamed == 3


def _logfire_run(tmp_path: Path, with_openai_v2: bool = False) -> ExportTraceServiceRequest:
    """The plain app under Logfire in a child process (see ``logfire_run``), against the scripted LLM."""
    out = tmp_path / "spans.pb"
    extra = ["--with-openai-v2"] if with_openai_v2 else []
    with ScriptedLLM(apps.SCRIPT) as llm:
        done = subprocess.run(
            [sys.executable, "-m", "tests.conventions.logfire_run", str(out), llm.base_url, *extra],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    return ExportTraceServiceRequest.FromString(out.read_bytes())


def test_logfire_openai_spans_agents_from_system_prompts_and_blame(tmp_path, sink, make_processor) -> None:  # noqa: ANN001
    pytest.importorskip("logfire")
    import grpc
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

    request = _logfire_run(tmp_path)
    spans = [span for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]
    scopes = {ss.scope.name for rs in request.resource_spans for ss in rs.scope_spans}
    assert {"logfire.openai", "app"} <= scopes
    built = build_trajectory(list(request.resource_spans))
    trajectory = built.trajectory
    assert [(s.agent, s.content) for s in trajectory.steps] == [
        ("Planner", apps.PLAN),
        ("Researcher", apps.FABRICATED),
        ("Writer", apps.ANSWER),
    ]
    assert trajectory.outcome == Outcome.FAILURE and built.notes.agent_unnamed == 0
    processor = make_processor()
    with grpc.insecure_channel(processor.grpc_endpoint) as channel:
        TraceServiceStub(channel).Export(request, timeout=10)
    arrived = sink.wait_for_spans(len(spans), timeout=20)
    culprits = [
        r.span for r in arrived if attributes_to_dict(r.span.attributes).get(sc.BLAME_CULPRIT) is True
    ]
    assert len(culprits) == 1
    assert attributes_to_dict(culprits[0].attributes)[sc.BLAME_AGENT] == "Researcher"
    assert culprits[0].span_id.hex() == trajectory.steps[1].span_id
    assert culprits[0].name.startswith("Chat Completion with")


def test_two_client_instrumentations_on_one_call_make_one_step(tmp_path) -> None:  # noqa: ANN001
    pytest.importorskip("logfire")
    request = _logfire_run(tmp_path, with_openai_v2=True)
    spans = [span for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]
    chats = [s for s in spans if attributes_to_dict(s.attributes).get(sc.GEN_AI_OPERATION_NAME) == sc.OP_CHAT]
    assert len(chats) == 6  # each call seen by Logfire and by openai-v2
    trajectory = build_trajectory(list(request.resource_spans)).trajectory
    assert [(s.agent, s.content) for s in trajectory.steps] == [
        ("Planner", apps.PLAN),
        ("Researcher", apps.FABRICATED),
        ("Writer", apps.ANSWER),
    ]
