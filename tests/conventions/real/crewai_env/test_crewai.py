"""CrewAI, live: a manager agent delegating to a researcher (``allow_delegation``: CrewAI's "Delegate work
to coworker" tool), whose search tool raises; CrewAI's native OpenAI provider on the scripted server,
native tool calls. Read under OpenInference (``openinference-instrumentation-crewai``) and under
OpenLLMetry (``opentelemetry-instrumentation-crewai``), each with its family's OpenAI instrumentor:
neither CrewAI instrumentor records a model call of CrewAI's native provider, and without them a run
has no model content at all. Runs in .venv-crewai (``make test-crewai``; constraints-crewai.txt says
why CrewAI cannot share .venv).

- OpenInference: an AGENT span per task (``{role}._execute_core``, ``graph.node.id`` the role) only: a
  delegated coworker has none. The coworker runs inside the manager's ``Delegate work to coworker.run``
  TOOL span, which names it in its arguments (``coworker``): what runs inside is the coworker's. Tools
  as ``{tool}.run`` TOOL spans (the failed one with status ERROR and its exception); model calls as
  ``ChatCompletion`` LLM spans.
- OpenLLMetry: ``{role}.agent`` spans (``gen_ai.agent.name``), the coworker's inside the manager's, a
  task span (``invoke_agent`` too) around them, model calls as ``openai.chat`` spans. No tool call is
  recorded: the failed search is seen only in what the researcher's next model call was told.

CrewAI hands the tool's error to the model, so the run ends normally: its failure is a late verdict.
"""

from __future__ import annotations

import os

import pytest

from otel_blame.trajectory import Outcome
from tests.conventions.conftest import SERVICE, send_then_verdict
from tests.support import Reply, ScriptedLLM

from .. import story

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # CrewAI's own telemetry: never sent
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
crewai = pytest.importorskip("crewai")
pytest.importorskip("openinference.instrumentation.crewai")
pytest.importorskip("opentelemetry.instrumentation.crewai")

# CrewAI 1.15's deprecations of its own attributes, which it reads itself (not this project's code)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")

MANAGER = "manager"
RESEARCHER = "researcher"
DELEGATE = "delegate_work_to_coworker"  # the tool CrewAI gives an agent that may delegate


@pytest.fixture
def openinference(capture):  # noqa: ANN001, ANN201
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    instrumentors = [CrewAIInstrumentor(), OpenAIInstrumentor()]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    for instrumentor in instrumentors:
        instrumentor.uninstrument()


@pytest.fixture
def openllmetry(capture, monkeypatch):  # noqa: ANN001, ANN201
    from opentelemetry.instrumentation.crewai import CrewAIInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", "true")
    instrumentors = [CrewAIInstrumentor(), OpenAIInstrumentor()]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    for instrumentor in instrumentors:
        instrumentor.uninstrument()


def script() -> list[Reply | str]:
    def call(number: int, name: str, **arguments: str) -> Reply:
        return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])

    return [
        call(1, DELEGATE, task=story.TASK, context=story.QUESTION, coworker=RESEARCHER),
        call(2, "web_search", query=story.QUERY),
        story.FABRICATED,
        story.ANSWER,
    ]


def run(base_url: str) -> str:
    from crewai.tools import BaseTool

    class WebSearch(BaseTool):
        name: str = "web_search"
        description: str = "Search the web for the query."

        def _run(self, query: str) -> str:
            return story.web_search(query)

    model = crewai.LLM(
        model="scripted-model", provider="openai", base_url=base_url, api_key="test-key", max_retries=0
    )
    researcher = crewai.Agent(
        role=RESEARCHER,
        goal="Find facts.",
        backstory="You look things up.",
        llm=model,
        tools=[WebSearch()],
        allow_delegation=False,
    )
    manager = crewai.Agent(
        role=MANAGER, goal="Answer questions.", backstory="You answer.", llm=model, allow_delegation=True
    )
    job = crewai.Task(description=story.QUESTION, expected_output="the number of inhabitants", agent=manager)
    return crewai.Crew(agents=[manager, researcher], tasks=[job]).kickoff().raw


def test_openinference_a_manager_delegating_to_a_researcher_whose_search_fails(
    openinference, sink, make_processor
) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm:
        assert run(llm.base_url) == story.ANSWER
    spans = openinference.spans()
    built = openinference.built()
    trajectory = built.trajectory

    # the researcher has no span of its own: its model calls and its tool run inside the manager's
    # delegation tool, which names it; the delegation is the manager's tool step, with the answer
    call, delegation = "ChatCompletion", "Delegate work to coworker.run"
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, call, f"tool_call {DELEGATE}(", story.TASK),
            story.model(RESEARCHER, call, "tool_call web_search(", story.QUERY),
            story.failed_search(RESEARCHER, "web_search.run"),
            story.model(RESEARCHER, call, story.FABRICATED),
            story.tool(MANAGER, delegation, story.FABRICATED, arguments=RESEARCHER),
            story.model(MANAGER, call, story.ANSWER),
        ],
    )
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    search = story.the_span(spans, "web_search.run")
    story.assert_failed_search(trajectory, search, RESEARCHER)
    assert trajectory.outcome == Outcome.UNKNOWN  # every CrewAI span OK, over a failed tool call

    pointed_at = [
        search,
        story.model_call_asking_for(spans, "web_search"),
        story.model_call_saying(spans, story.FABRICATED),
    ]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    answer = send_then_verdict(make_processor(), sink, spans)
    story.assert_late_verdict(answer, trajectory, RESEARCHER, pointed_at)


def test_openllmetry_a_manager_delegating_to_a_researcher_whose_search_fails(
    openllmetry, sink, make_processor
) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm:
        assert run(llm.base_url) == story.ANSWER
    spans = openllmetry.spans()
    built = openllmetry.built()
    trajectory = built.trajectory

    # the model calls are the steps, each of the agent span it ran in; the task span around the agents
    # repeats the manager's answer and is no step; no tool span exists to be one
    call = "openai.chat"
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, call, f"tool_call {DELEGATE}(", story.TASK),
            story.model(RESEARCHER, call, "tool_call web_search(", story.QUERY),
            story.model(RESEARCHER, call, story.FABRICATED),
            story.model(MANAGER, call, story.ANSWER),
        ],
    )
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    assert not any(story.is_tool_call(s) for s in spans)  # what OpenLLMetry's CrewAI instrumentor lacks
    assert trajectory.outcome != Outcome.FAILURE  # nothing in the trace says the search failed

    # the researcher's call that asked for the search, or the one that made the number up
    pointed_at = [
        story.model_call_asking_for(spans, "web_search"),
        story.model_call_saying(spans, story.FABRICATED),
    ]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    answer = send_then_verdict(make_processor(), sink, spans)
    story.assert_late_verdict(answer, trajectory, RESEARCHER, pointed_at)
