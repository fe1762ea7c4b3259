"""smolagents under ``openinference-instrumentation-smolagents``: a CodeAgent managing a
ToolCallingAgent whose search tool raises.

The instrumentor's shape: ``CodeAgent.run`` (an AGENT span named after the class, since the manager
has no name) with a ``search_agent.run`` AGENT span inside its ``Step 1``; every ``Step N`` is a CHAIN
span grouping one model call (``OpenAIModel.generate``) with the tools it asked for (``SimpleTool``,
``FinalAnswerTool``). The managed agent's name is also in ``smolagents.managed_agents.0.name``.
smolagents catches the tool's error, so the run ends normally: its failure is a late verdict.
"""

from __future__ import annotations

import pytest

from otel_blame.trajectory import Outcome
from tests.conventions.conftest import SERVICE, send_then_verdict
from tests.support import Reply, ScriptedLLM

from . import story

smolagents = pytest.importorskip("smolagents")
pytest.importorskip("openinference.instrumentation.smolagents")

MANAGER = "CodeAgent"  # the manager's class: no agent attribute names it
RESEARCHER = "search_agent"
CODE_CALL = f'report = search_agent(task="{story.TASK}")'
CODE_ANSWER = f'final_answer("{story.ANSWER}")'


@pytest.fixture
def instrumented(capture):  # noqa: ANN001, ANN201
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    instrumentor = SmolagentsInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    instrumentor.uninstrument()


def script() -> list[Reply | str]:
    """The manager writes code that calls the search agent; the search agent calls tools."""

    def call(number: int, name: str, **arguments: str) -> Reply:
        return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])

    return [
        f"Thought: the search agent can find it.\n<code>\n{CODE_CALL}\nprint(report)\n</code>",
        call(1, "web_search", query=story.QUERY),
        call(2, "final_answer", answer=story.FABRICATED),
        f"Thought: I have the number.\n<code>\n{CODE_ANSWER}\n</code>",
    ]


def run(base_url: str) -> object:
    model = smolagents.OpenAIServerModel(model_id="scripted-model", api_base=base_url, api_key="test-key")
    searcher = smolagents.ToolCallingAgent(
        tools=[smolagents.tool(story.web_search)],
        model=model,
        name=RESEARCHER,
        description="Searches the web.",
        max_steps=3,
        verbosity_level=0,
    )
    manager = smolagents.CodeAgent(
        tools=[], model=model, managed_agents=[searcher], max_steps=3, verbosity_level=0
    )
    return manager.run(story.QUESTION)


def test_code_agent_managing_a_tool_calling_agent_whose_search_fails(
    instrumented, sink, make_processor
) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm:
        assert run(llm.base_url) == story.ANSWER
    spans = instrumented.spans()
    built = instrumented.built()
    trajectory = built.trajectory

    # each model call is a step of its agent, each tool span a tool step (the failed search and both
    # final_answer calls included); a "Step N" span adds only what no step below it says: the
    # manager's first code printed the search agent's report (its execution logs), its second only
    # called final_answer, whose step says it already
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, "OpenAIModel.generate", CODE_CALL),
            story.model(RESEARCHER, "OpenAIModel.generate", "web_search", story.QUERY),
            story.failed_search(RESEARCHER, "SimpleTool"),
            story.model(RESEARCHER, "OpenAIModel.generate", "final_answer", story.FABRICATED),
            story.tool(RESEARCHER, "FinalAnswerTool", story.FABRICATED),
            story.code(
                MANAGER, "Step 1", "managed agent 'search_agent'", story.FABRICATED
            ),  # what it printed
            story.model(MANAGER, "OpenAIModel.generate", CODE_ANSWER),
            story.tool(MANAGER, "FinalAnswerTool", story.ANSWER),
        ],
    )
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    search = story.the_span(spans, "SimpleTool", **{"tool.name": "web_search"})
    story.assert_failed_search(trajectory, search, RESEARCHER)
    # the runs ended with status OK: smolagents recovered from the tool's error
    assert trajectory.outcome != Outcome.FAILURE

    # the verdict, once the answer is known to be wrong (a late verdict): the failed search, the call
    # asking for it, or the search agent's call that made the number up
    pointed_at = [
        search,
        story.model_call_asking_for(spans, "web_search"),
        story.model_call_saying(spans, story.FABRICATED),
    ]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    answer = send_then_verdict(make_processor(), sink, spans)  # the same through the processor
    story.assert_late_verdict(answer, trajectory, RESEARCHER, pointed_at)
