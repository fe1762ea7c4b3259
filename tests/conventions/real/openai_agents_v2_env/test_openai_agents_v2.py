"""The OpenAI Agents SDK under contrib's ``opentelemetry-instrumentation-openai-agents-v2``: a manager
using a researcher agent as a tool, the researcher's search tool raising (openai_agents_app.py).

That package installs the same module as OpenLLMetry's instrumentor
(``opentelemetry.instrumentation.openai_agents``), so it cannot sit in .venv beside it: ``make
test-openai-agents-v2`` installs it alone into .venv-openai-agents-v2 (no dependencies: they are
.venv's) and runs these tests with that directory first on ``PYTHONPATH``.

The shape: ``Agent workflow`` > ``invoke_agent manager`` > ``unknown`` spans (the SDK's turns, an
operation the instrumentor does not know) > ``chat scripted-model`` and ``execute_tool ask_researcher``
> ``invoke_agent researcher`` > ... ``execute_tool web_search`` (status ERROR with the SDK's span error,
the tool's error text as ``gen_ai.tool.call.result``). Every span carries ``gen_ai.agent.name``, but
only the agent spans carry the agent's: model and tool spans carry the instrumentor's configured name
(``OpenAI Agent`` unless ``instrument(agent_name=...)``), which is read as the stamp it is. A Responses
API function call is recorded as its Python repr in a text part (``ResponseFunctionToolCall(arguments=
'...', name='web_search', ...)``), read as the call. Content is recorded unless
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says otherwise. Failure from a late verdict.
"""

from __future__ import annotations

import asyncio

import pytest

from otel_blame.trajectory import Outcome
from tests.conventions.conftest import SERVICE, send_then_verdict
from tests.support import ScriptedLLM

from .. import story
from ..openai_agents_app import ASK, MANAGER, RESEARCHER, only_these_trace_processors, run, script

pytest.importorskip("agents")
# contrib's instrumentor, not OpenLLMetry's (the same module name)
pytest.importorskip("opentelemetry.instrumentation.openai_agents.span_processor")

CALL = "chat scripted-model"
STAMP = "OpenAI Agent"  # the instrumentor's default agent name, on every model and tool span


@pytest.fixture
def instrumented(capture, monkeypatch):  # noqa: ANN001, ANN201
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    with only_these_trace_processors():
        instrumentor = OpenAIAgentsInstrumentor()
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
    search = story.the_span(spans, "execute_tool web_search")
    assert search.attributes["gen_ai.agent.name"] == STAMP  # what the instrumentor says, read as a stamp

    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, CALL, f"tool_call {ASK}(", story.TASK),
            story.model(RESEARCHER, CALL, "tool_call web_search(", story.QUERY),
            story.failed_search(RESEARCHER, "execute_tool web_search"),
            story.model(RESEARCHER, CALL, story.FABRICATED),
            story.tool(MANAGER, f"execute_tool {ASK}", story.FABRICATED, arguments=story.TASK),
            story.model(MANAGER, CALL, story.ANSWER),
        ],
    )
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    story.assert_failed_search(trajectory, search, RESEARCHER)
    assert trajectory.outcome != Outcome.FAILURE  # the workflow span ended with status OK

    pointed_at = [
        search,
        story.model_call_saying(spans, "name='web_search'"),
        story.model_call_saying(spans, story.FABRICATED),
    ]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    answer = send_then_verdict(make_processor(), sink, spans)
    story.assert_late_verdict(answer, trajectory, RESEARCHER, pointed_at)
