"""Microsoft Agent Framework under its own OpenTelemetry: a manager agent using a researcher agent as a
tool (``researcher.as_tool()``), the researcher's search tool raising; the model is the framework's
``OpenAIChatCompletionClient`` on the scripted server.

The shape: ``invoke_agent manager`` > ``chat scripted-model`` and ``execute_tool researcher`` >
``invoke_agent researcher`` > its ``chat`` spans and ``execute_tool web_search`` (status ERROR,
``error.type``, an ``exception`` event). Agent spans carry ``gen_ai.agent.name``; model and tool spans
do not, they are read as the agent span they ran in. The framework traces through the global provider,
always; content (``gen_ai.input/output.messages``, ``gen_ai.tool.call.arguments/result``) only with
sensitive data on (``enable_instrumentation(enable_sensitive_data=True)`` or ``ENABLE_SENSITIVE_DATA=true``).
The framework hands a tool's error to the model, so the run ends normally: its failure is a late verdict.
"""

from __future__ import annotations

import asyncio

import pytest

from otel_blame.trajectory import Outcome
from tests.conventions.conftest import SERVICE, send_then_verdict
from tests.support import Reply, ScriptedLLM

from . import story

pytest.importorskip("agent_framework")
pytest.importorskip("agent_framework_openai")

MANAGER = "manager"
RESEARCHER = "researcher"
CHAT = "chat scripted-model"


@pytest.fixture
def instrumented(global_capture):  # noqa: ANN001, ANN201
    """Instrumentation with content (sensitive data), restored afterwards: the settings are global."""
    from agent_framework.observability import OBSERVABILITY_SETTINGS, enable_instrumentation

    before = OBSERVABILITY_SETTINGS.enable_instrumentation, OBSERVABILITY_SETTINGS.enable_sensitive_data
    enable_instrumentation(enable_sensitive_data=True)
    yield global_capture
    OBSERVABILITY_SETTINGS.enable_instrumentation, OBSERVABILITY_SETTINGS.enable_sensitive_data = before


def script() -> list[Reply | str]:
    def call(number: int, name: str, **arguments: str) -> Reply:
        return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])

    return [
        call(1, RESEARCHER, task=story.TASK),
        call(2, "web_search", query=story.QUERY),
        story.FABRICATED,
        story.ANSWER,
    ]


async def run(base_url: str) -> str:
    from agent_framework import Agent
    from agent_framework.openai import OpenAIChatCompletionClient
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=base_url, api_key="test-key", max_retries=0) as openai:
        client = OpenAIChatCompletionClient(model="scripted-model", async_client=openai)
        researcher = Agent(
            client=client,
            name=RESEARCHER,
            description="Finds facts.",
            instructions="You find facts.",
            tools=[story.web_search],
        )
        manager = Agent(
            client=client, name=MANAGER, instructions="You answer questions.", tools=[researcher.as_tool()]
        )
        return (await manager.run(story.QUESTION)).text


def test_manager_using_a_researcher_agent_as_a_tool_whose_search_fails(
    instrumented, sink, make_processor
) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm:
        assert asyncio.run(run(llm.base_url)) == story.ANSWER
    spans = instrumented.spans()
    built = instrumented.built()
    trajectory = built.trajectory

    # the agent spans group their model calls and tools; the manager's call to the researcher is its
    # tool step, which speaks (the researcher's answer) when the researcher is done
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, CHAT, RESEARCHER, story.TASK),
            story.model(RESEARCHER, CHAT, "web_search", story.QUERY),
            story.failed_search(RESEARCHER, "execute_tool web_search"),
            story.model(RESEARCHER, CHAT, story.FABRICATED),
            story.tool(MANAGER, f"execute_tool {RESEARCHER}", story.FABRICATED, arguments=story.TASK),
            story.model(MANAGER, CHAT, story.ANSWER),
        ],
    )
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    search = story.the_span(spans, "execute_tool web_search")
    story.assert_failed_search(trajectory, search, RESEARCHER)
    assert trajectory.outcome != Outcome.FAILURE  # the manager's run ended normally

    # the failed search, the call asking for it, or the researcher's call that made the number up
    pointed_at = [
        search,
        story.model_call_asking_for(spans, "web_search"),
        story.model_call_saying(spans, story.FABRICATED),
    ]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    answer = send_then_verdict(make_processor(), sink, spans)
    story.assert_late_verdict(answer, trajectory, RESEARCHER, pointed_at)
