"""PydanticAI under its own OpenTelemetry (``InstrumentationSettings``, GenAI semantic conventions):
a manager agent delegating to a researcher agent from a tool, the researcher's search tool raising.

The shape: ``invoke_agent manager`` > ``chat scripted-model`` and ``execute_tool ask_researcher`` >
``invoke_agent researcher`` > ``chat scripted-model`` and ``execute_tool web_search``; every span
carries ``gen_ai.agent.name``, content is in ``gen_ai.input/output.messages``, tool arguments in
``gen_ai.tool.call.arguments``. PydanticAI lets a tool's exception end the run: every span on the
way up has status ERROR and an ``exception`` event, so the trace itself says the run failed.
"""

from __future__ import annotations

import pytest

from otel_blame.trajectory import Outcome
from tests.conventions.conftest import SERVICE, blame_through_processor
from tests.support import Reply, ScriptedLLM

from . import story

pydantic_ai = pytest.importorskip("pydantic_ai")

MANAGER = "manager"
RESEARCHER = "researcher"
CHAT = "chat scripted-model"


def script() -> list[Reply]:
    def call(number: int, name: str, **arguments: str) -> Reply:
        return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])

    return [call(1, "ask_researcher", question=story.TASK), call(2, "web_search", query=story.QUERY)]


def run(base_url: str, provider) -> None:  # noqa: ANN001
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("scripted-model", provider=OpenAIProvider(base_url=base_url, api_key="test-key"))
    researcher = pydantic_ai.Agent(
        model, name=RESEARCHER, instructions="You find facts.", tools=[story.web_search]
    )
    manager = pydantic_ai.Agent(model, name=MANAGER, instructions="You answer questions.")

    @manager.tool
    async def ask_researcher(ctx: pydantic_ai.RunContext[None], question: str) -> str:
        """Ask the researcher a question of fact."""
        return (await researcher.run(question, usage=ctx.usage)).output

    settings = InstrumentationSettings(tracer_provider=provider)
    researcher.instrument = manager.instrument = settings
    manager.run_sync(story.QUESTION)


def test_manager_delegating_to_a_researcher_whose_search_fails(capture, sink, make_processor) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm, pytest.raises(ConnectionError, match=story.TOOL_ERROR):
        run(llm.base_url, capture.provider)
    spans = capture.spans()
    built = capture.built()
    trajectory = built.trajectory

    # the agent spans are not steps: their model calls and tools are; the manager's call to the
    # researcher is a tool step of the manager, which fails when the researcher's run does
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, CHAT, "ask_researcher", story.TASK),
            story.model(RESEARCHER, CHAT, "web_search", story.QUERY),
            story.failed_search(RESEARCHER, "execute_tool web_search"),
            story.tool(MANAGER, "execute_tool ask_researcher", story.TOOL_ERROR, error=True),
        ],
    )
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    search = story.the_span(spans, "execute_tool web_search")
    story.assert_failed_search(trajectory, search, RESEARCHER)
    assert trajectory.outcome == Outcome.FAILURE  # the root agent span: status ERROR, exception event
    assert "search backend unreachable" in (trajectory.outcome_reason or "")

    # the failed search or the call asking for it (the run ended there)
    pointed_at = [search, story.model_call_asking_for(spans, "web_search")]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    culprit = blame_through_processor(make_processor(), sink, spans)  # the failed trace, as it arrives
    story.assert_culprit_span(culprit, RESEARCHER, pointed_at)
