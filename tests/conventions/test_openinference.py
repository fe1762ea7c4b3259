"""OpenInference alone (its LangChain/LangGraph and OpenAI Agents instrumentors) on real framework runs:
the trajectory's agents are the agents, and the processor blames the fabricating researcher."""

from __future__ import annotations

import pytest

from otel_blame.trajectory import Outcome, StepKind
from tests.support import ScriptedLLM

from . import apps
from .conftest import blame_through_processor, send_then_verdict

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
    assert trajectory.task.name == apps.QUESTION  # named from its input, not the root span
    assert trajectory.task.input == apps.QUESTION  # from the serialised LangGraph state
    assert built.notes.agent_unnamed == 0

    spans = langchain_instrumented.spans()
    culprit = blame_through_processor(make_processor(), sink, spans)
    assert culprit["attributes"]["blame.agent"] == "researcher"
    assert culprit["span_id"] == trajectory.steps[1].span_id  # the researcher's ChatOpenAI span
    assert culprit["name"] == "ChatOpenAI"
    assert culprit["stats"]["attributed_traces"] == 1


@pytest.fixture
def ours_and_langchain(langchain_instrumented, monkeypatch):  # noqa: ANN001, ANN201
    """otel-blame's instrumentation AND OpenInference's on the same app, into the same provider."""
    from otel_blame.instrumentation import OtelBlameInstrumentor, configure, reset_configuration

    monkeypatch.delenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", raising=False)
    reset_configuration()
    configure(tracer_provider=langchain_instrumented.provider)
    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument()
    yield langchain_instrumented
    instrumentor.uninstrument()
    reset_configuration()


def test_ours_beside_openinference_counts_each_message_once(ours_and_langchain, sink, make_processor) -> None:  # noqa: ANN001
    with ScriptedLLM(apps.SCRIPT) as llm:
        apps.langchain_langgraph_app(llm.base_url, with_check=False).invoke(apps.langgraph_input())
    spans = ours_and_langchain.spans()
    scopes = {s.instrumentation_scope.name for s in spans}
    assert "otel_blame.instrument" in scopes and any("openinference" in scope for scope in scopes)
    assert len({s.context.trace_id for s in spans}) == 1  # one trace, both instrumentations in it
    trajectory = ours_and_langchain.built().trajectory
    # ours numbers the messages (the question included); OpenInference's node and LLM spans,
    # which describe the same messages, are not extra steps
    assert [(s.agent, s.content) for s in trajectory.steps] == [
        ("user", apps.QUESTION),
        ("planner", apps.PLAN),
        ("researcher", apps.FABRICATED),
        ("writer", apps.ANSWER),
    ]
    ours = {s.context.span_id for s in spans if s.instrumentation_scope.name == "otel_blame.instrument"}
    assert all(int(step.span_id, 16) in ours for step in trajectory.steps)
    answer = send_then_verdict(make_processor(), sink, spans)
    assert answer["status"] == "attributed"
    assert answer["agent"] == "researcher" and answer["step"] == 2


@pytest.fixture
def openai_agents_instrumented(capture):  # noqa: ANN001, ANN201
    pytest.importorskip("agents")
    import agents
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    agents.set_tracing_disabled(False)  # OpenInference reads the SDK's traces: they must be on
    instrumentor = OpenAIAgentsInstrumentor()  # exclusive: the SDK's own exporter to OpenAI is replaced
    instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    instrumentor.uninstrument()


def test_openai_agents_handoffs_name_the_agents_and_a_late_verdict_blames_the_researcher(
    openai_agents_instrumented,
    sink,
    make_processor,  # noqa: ANN001
) -> None:
    import agents

    with ScriptedLLM(apps.handoff_script()) as llm:
        result = agents.Runner.run_sync(apps.openai_agents_team(llm.base_url), apps.QUESTION)
    assert result.final_output == apps.ANSWER
    spans = openai_agents_instrumented.spans()
    trajectory = openai_agents_instrumented.built().trajectory
    # each agent's generation is its step, each handoff a tool step of the agent that handed off
    assert [(s.agent, s.kind, s.tool_name) for s in trajectory.steps] == [
        ("planner", StepKind.MESSAGE, None),
        ("planner", StepKind.TOOL, "handoff to researcher"),
        ("researcher", StepKind.MESSAGE, None),
        ("researcher", StepKind.TOOL, "handoff to writer"),
        ("writer", StepKind.MESSAGE, None),
    ]
    messages = [s.content.splitlines()[0] for s in trajectory.steps if s.kind == StepKind.MESSAGE]
    assert messages == [apps.PLAN, apps.FABRICATED, apps.ANSWER]
    assert {s.name for s in spans if s.context.span_id == int(trajectory.steps[2].span_id, 16)} == {
        "generation"
    }
    answer = send_then_verdict(make_processor(), sink, spans)
    assert answer["status"] == "attributed"
    assert answer["agent"] == "researcher" and answer["step"] == 2


@pytest.fixture
def smolagents_instrumented(capture):  # noqa: ANN001, ANN201
    pytest.importorskip("smolagents")
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    instrumentor = SmolagentsInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    instrumentor.uninstrument()


def test_smolagents_managed_agents_are_named_from_their_runs_and_the_researcher_is_blamed(
    smolagents_instrumented,
    sink,
    make_processor,  # noqa: ANN001
) -> None:
    with ScriptedLLM(apps.smolagents_script()) as llm:
        assert apps.smolagents_team(llm.base_url).run(apps.QUESTION) == apps.ANSWER
    spans = smolagents_instrumented.spans()
    built = smolagents_instrumented.built()
    trajectory = built.trajectory
    # AGENT spans "researcher.run" etc. (no agent attribute): the agent is the part before the method.
    # Every model call is a step of its agent (the calls it asks for as its text), every tool span a
    # tool step; the "Step N" span of a managed agent's call adds what the call returned to the manager
    called = [
        ("planner", StepKind.MESSAGE, None),
        ("researcher", StepKind.MESSAGE, None),
        ("researcher", StepKind.TOOL, "final_answer"),
        ("planner", StepKind.TOOL, "researcher"),
        ("planner", StepKind.MESSAGE, None),
        ("writer", StepKind.MESSAGE, None),
        ("writer", StepKind.TOOL, "final_answer"),
        ("planner", StepKind.TOOL, "writer"),
        ("planner", StepKind.MESSAGE, None),
        ("planner", StepKind.TOOL, "final_answer"),
    ]
    assert [(s.agent, s.kind, s.tool_name) for s in trajectory.steps] == called
    assert trajectory.steps[0].content == 'tool_call researcher({"task": "Find the population of Paris."})'
    assert apps.FABRICATED in trajectory.steps[1].content and apps.FABRICATED == trajectory.steps[2].content
    assert trajectory.steps[3].content.endswith(apps.FABRICATED)  # the manager's observation
    names = {s.context.span_id: s.name for s in spans}
    assert [names[int(s.span_id, 16)] for s in trajectory.steps[:4]] == [
        "OpenAIModel.generate",
        "OpenAIModel.generate",
        "FinalAnswerTool",
        "Step 1",
    ]
    assert trajectory.task.input == apps.QUESTION and trajectory.task.final_output == apps.ANSWER
    assert built.notes.agent_unnamed == 0
    answer = send_then_verdict(make_processor(), sink, spans)
    assert answer["status"] == "attributed"
    assert answer["agent"] == "researcher" and answer["step"] in (1, 2)
