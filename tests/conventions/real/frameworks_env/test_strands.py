"""Strands Agents under its own OpenTelemetry: a manager agent using a researcher agent as a tool
(Strands' "agents as tools"), the researcher's search tool raising. Runs in .venv-frameworks
(``make test-frameworks``: Strands cannot share .venv, constraints-frameworks.txt says why).

The shape: ``invoke_agent manager`` > ``execute_event_loop_cycle`` (one per model turn, grouping the
``chat`` span with the ``execute_tool`` spans it asked for) > ... > ``invoke_agent researcher``.
Agent spans carry ``gen_ai.agent.name``; content is in span events (``gen_ai.choice`` holding the
reply's content blocks, ``gen_ai.tool.message`` the tool's arguments). Strands hands a tool's error
to the model, so the run ends normally: its failure is a late verdict.
"""

from __future__ import annotations

import pytest

from otel_blame.trajectory import Outcome
from tests.conventions.conftest import SERVICE, send_then_verdict
from tests.support import Reply, ScriptedLLM

from .. import story

strands = pytest.importorskip("strands")

MANAGER = "manager"
RESEARCHER = "researcher"


@pytest.fixture
def instrumented(capture, monkeypatch):  # noqa: ANN001, ANN201
    """Strands' tracer (a process-wide singleton on the global provider) onto the test's provider."""
    from strands.telemetry.tracer import get_tracer

    tracer = get_tracer()
    monkeypatch.setattr(tracer, "tracer_provider", capture.provider)
    monkeypatch.setattr(tracer, "tracer", capture.provider.get_tracer(tracer.service_name))
    return capture


def script() -> list[Reply | str]:
    def call(number: int, name: str, **arguments: str) -> Reply:
        return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])

    return [
        call(1, "ask_researcher", task=story.TASK),
        call(2, "web_search", query=story.QUERY),
        story.FABRICATED,
        story.ANSWER,
    ]


def run(base_url: str) -> str:
    from strands.models.openai import OpenAIModel

    def model() -> OpenAIModel:
        return OpenAIModel(
            client_args={"base_url": base_url, "api_key": "test-key", "max_retries": 0},
            model_id="scripted-model",
        )

    researcher = strands.Agent(
        name=RESEARCHER,
        model=model(),
        tools=[strands.tool(story.web_search)],
        system_prompt="You find facts.",
        callback_handler=None,
    )

    @strands.tool
    def ask_researcher(task: str) -> str:
        """Ask the researcher to find a fact.

        Args:
            task: what to find.
        """
        return str(researcher(task)).strip()

    manager = strands.Agent(
        name=MANAGER,
        model=model(),
        tools=[ask_researcher],
        system_prompt="You answer questions.",
        callback_handler=None,
    )
    return str(manager(story.QUESTION)).strip()


def test_manager_using_a_researcher_agent_as_a_tool_whose_search_fails(
    instrumented, sink, make_processor
) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm:
        assert run(llm.base_url) == story.ANSWER
    spans = instrumented.spans()
    built = instrumented.built()
    trajectory = built.trajectory

    # the event-loop cycles group a model call with its tools and are not steps; the researcher's
    # run nests in the manager's ask_researcher tool, which speaks when the researcher has answered
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, "chat", "ask_researcher", story.TASK),
            story.model(RESEARCHER, "chat", "web_search", story.QUERY),
            story.failed_search(RESEARCHER, "execute_tool web_search"),
            story.model(RESEARCHER, "chat", story.FABRICATED),
            story.tool(MANAGER, "execute_tool ask_researcher", story.FABRICATED),
            story.model(MANAGER, "chat", story.ANSWER),
        ],
    )
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    search = story.the_span(spans, "execute_tool web_search")
    story.assert_failed_search(trajectory, search, RESEARCHER)
    assert trajectory.outcome != Outcome.FAILURE

    # the failed search, the call asking for it, or the researcher's call that made the number up
    pointed_at = [
        search,
        story.model_call_asking_for(spans, "web_search"),
        story.model_call_saying(spans, story.FABRICATED),
    ]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    answer = send_then_verdict(make_processor(), sink, spans)
    story.assert_late_verdict(answer, trajectory, RESEARCHER, pointed_at)
