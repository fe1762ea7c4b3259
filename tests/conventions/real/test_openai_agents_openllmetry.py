"""The OpenAI Agents SDK under OpenLLMetry's ``opentelemetry-instrumentation-openai-agents``: a manager
using a researcher agent as a tool, the researcher's search tool raising (openai_agents_app.py).

The shape: ``Agent Workflow`` (``traceloop.span.kind`` workflow, status OK) > ``manager.agent``
(``gen_ai.agent.name``) > ``openai.response`` (``chat``) and ``ask_researcher.tool`` (``execute_tool``),
with ``researcher.agent`` beside the manager's (not under its tool span) > its own ``openai.response``
spans and ``web_search.tool`` (status ERROR with the SDK's span error, the tool's error text as
``gen_ai.tool.call.result``). Content is recorded unless ``TRACELOOP_TRACE_CONTENT=false``; a model's
output only from the Responses API (a chat-completions model's ``openai.response`` spans have none).
The SDK hands the tool's error to the model, so the run ends normally: its failure is a late verdict.
"""

from __future__ import annotations

import asyncio

import pytest

from otel_blame.trajectory import Outcome
from tests.conventions.conftest import SERVICE, send_then_verdict
from tests.support import ScriptedLLM

from . import story
from .openai_agents_app import ASK, MANAGER, RESEARCHER, only_these_trace_processors, run, script

pytest.importorskip("agents")
pytest.importorskip("opentelemetry.instrumentation.openai_agents._hooks")  # OpenLLMetry's, not contrib's

CALL = "openai.response"


@pytest.fixture
def instrumented(capture, monkeypatch):  # noqa: ANN001, ANN201
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", "true")
    with only_these_trace_processors():
        instrumentor = OpenAIAgentsInstrumentor(replace_existing_processors=True)
        instrumentor.instrument(tracer_provider=capture.provider)
        yield capture
        instrumentor.uninstrument()


def test_manager_using_a_researcher_agent_as_a_tool_whose_search_fails(
    instrumented, sink, make_processor
) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm:
        assert asyncio.run(run(llm.base_url)) == story.ANSWER
    spans = instrumented.spans()
    built = instrumented.built()
    trajectory = built.trajectory

    # the researcher's run is its own agent span beside the manager's tool span; the tool step speaks
    # (the researcher's answer) when the researcher is done
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, CALL, ASK, story.TASK),
            story.model(RESEARCHER, CALL, "web_search", story.QUERY),
            story.failed_search(RESEARCHER, "web_search.tool"),
            story.model(RESEARCHER, CALL, story.FABRICATED),
            story.tool(MANAGER, f"{ASK}.tool", story.FABRICATED, arguments=story.TASK),
            story.model(MANAGER, CALL, story.ANSWER),
        ],
    )
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    search = story.the_span(spans, "web_search.tool")
    story.assert_failed_search(trajectory, search, RESEARCHER)
    assert trajectory.outcome != Outcome.FAILURE  # the workflow span ended with status OK

    pointed_at = [
        search,
        story.model_call_asking_for(spans, "web_search"),
        story.model_call_saying(spans, story.FABRICATED),
    ]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    answer = send_then_verdict(make_processor(), sink, spans)
    story.assert_late_verdict(answer, trajectory, RESEARCHER, pointed_at)
