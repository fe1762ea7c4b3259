"""Agno under ``openinference-instrumentation-agno``: a team leader delegating to a member agent
whose search tool raises.

The shape: ``newsroom.run`` (AGENT, ``agent.name`` = the team, ``graph.node.id`` a generated hex id,
``graph.node.name`` the name) > ``OpenAIChat.invoke`` (LLM), ``delegate_task_to_member`` (TOOL) and
``researcher.run`` (AGENT, beside the tool span, not under it) > its model calls and ``web_search``
(TOOL, status ERROR, the error text as ``output.value``, no exception event). Agno hands the tool's
error to the model, so the run ends normally: its failure is a late verdict.
"""

from __future__ import annotations

import pytest

from otel_blame.trajectory import Outcome
from tests.conventions.conftest import SERVICE, send_then_verdict
from tests.support import Reply, ScriptedLLM

from . import story

pytest.importorskip("agno")
pytest.importorskip("openinference.instrumentation.agno")

TEAM = "newsroom"
RESEARCHER = "researcher"
CHAT = "OpenAIChat.invoke"


@pytest.fixture
def instrumented(capture):  # noqa: ANN001, ANN201
    """The instrumentor, and the test's OpenTelemetry context restored afterwards: after ``team.run``
    returns, ``openinference-instrumentation-agno`` 1.0.15 leaves the team's finished run span
    current, so every span started after it in the thread would join that run's trace."""
    from openinference.instrumentation.agno import AgnoInstrumentor
    from opentelemetry import context

    token = context.attach(context.get_current())
    instrumentor = AgnoInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    instrumentor.uninstrument()
    context.detach(token)


def script() -> list[Reply | str]:
    def call(number: int, name: str, **arguments: str) -> Reply:
        return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])

    return [
        call(1, "delegate_task_to_member", member_id=RESEARCHER, task=story.TASK),
        call(2, "web_search", query=story.QUERY),
        story.FABRICATED,
        story.ANSWER,
    ]


def run(base_url: str) -> str:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.team import Team

    def model() -> OpenAIChat:
        return OpenAIChat(id="scripted-model", base_url=base_url, api_key="test-key", max_retries=0)

    researcher = Agent(
        name=RESEARCHER,
        role="Finds facts",
        model=model(),
        tools=[story.web_search],
        instructions="You find facts.",
        telemetry=False,  # Agno reports runs to its own service unless told not to
    )
    team = Team(
        name=TEAM, members=[researcher], model=model(), instructions="You answer questions.", telemetry=False
    )
    return str(team.run(story.QUESTION).content)


def test_team_delegating_to_a_member_whose_search_fails(instrumented, sink, make_processor) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm:
        assert run(llm.base_url) == story.ANSWER
    spans = instrumented.spans()
    built = instrumented.built()
    trajectory = built.trajectory

    # agents by name, never by the generated graph node id; the delegation is the leader's tool
    # step, with the member's answer, once the member has given it
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(TEAM, CHAT, "delegate_task_to_member", story.TASK),
            story.model(RESEARCHER, CHAT, "web_search", story.QUERY),
            story.failed_search(RESEARCHER, "web_search"),
            story.model(RESEARCHER, CHAT, story.FABRICATED),
            story.tool(TEAM, "delegate_task_to_member", story.FABRICATED),
            story.model(TEAM, CHAT, story.ANSWER),
        ],
    )
    story.assert_agents(built, TEAM, RESEARCHER, SERVICE)
    search = story.the_span(spans, "web_search")
    story.assert_failed_search(trajectory, search, RESEARCHER)
    assert trajectory.outcome != Outcome.FAILURE  # the team's run ended with status OK

    # the failed search, the call asking for it, or the researcher's call that made the number up
    pointed_at = [
        search,
        story.model_call_asking_for(spans, "web_search"),
        story.model_call_saying(spans, story.FABRICATED),
    ]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    answer = send_then_verdict(make_processor(), sink, spans)
    story.assert_late_verdict(answer, trajectory, RESEARCHER, pointed_at)
