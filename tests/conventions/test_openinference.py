"""OpenInference alone (its LangChain/LangGraph and OpenAI Agents instrumentors) on real framework runs:
the trajectory's agents are the agents, and the processor blames the fabricating researcher."""

from __future__ import annotations

import pytest

from otel_blame.trajectory import Outcome, StepKind
from tests.support import ScriptedLLM

from . import apps
from .conftest import blame_through_processor

pytest.importorskip("openinference.instrumentation.langchain")


@pytest.fixture
def langchain_instrumented(capture):  # noqa: ANN001, ANN201
    from openinference.instrumentation.langchain import LangChainInstrumentor

    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    instrumentor.uninstrument()


def _run_langgraph() -> None:
    with ScriptedLLM(apps.SCRIPT) as llm, pytest.raises(apps.WrongAnswer):
        apps.langchain_langgraph_app(llm.base_url).invoke(apps.langgraph_input())


def test_langgraph_nodes_name_the_agents_and_the_researcher_is_blamed(
    langchain_instrumented,
    sink,
    make_processor,  # noqa: ANN001
) -> None:
    _run_langgraph()
    built = langchain_instrumented.built()
    trajectory = built.trajectory
    # one step per LLM call, named by its LangGraph node, never "ChatOpenAI"
    assert [(s.agent, s.kind, s.content) for s in trajectory.steps] == [
        ("planner", StepKind.MESSAGE, apps.PLAN),
        ("researcher", StepKind.MESSAGE, apps.FABRICATED),
        ("writer", StepKind.MESSAGE, apps.ANSWER),
    ]
    assert trajectory.outcome == Outcome.FAILURE and "WrongAnswer" in (trajectory.outcome_reason or "")
    assert trajectory.task.name == "population_graph"
    assert built.notes.agent_from_service == 0

    spans = langchain_instrumented.spans()
    culprit = blame_through_processor(make_processor(), sink, spans)
    assert culprit["attributes"]["blame.agent"] == "researcher"
    assert culprit["span_id"] == trajectory.steps[1].span_id  # the researcher's ChatOpenAI span
    assert culprit["name"] == "ChatOpenAI"
    assert culprit["stats"]["attributed_traces"] == 1
