"""Envelope spans next to the contrib ``opentelemetry-instrumentation-openai-v2``: every ``chat`` span
the openai client makes nests under the ``invoke_agent`` span of the agent whose turn made the call,
and that agent span lasts the whole turn. Real frameworks, real openai client, scripted LLM."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from otel_blame import semconv
from otel_blame.conventions import sdk_spans_to_proto, trajectory_from_spans
from otel_blame.instrumentation import agent_turn, record_message, task
from tests.support import Reply, ScriptedLLM

from .autogen_fixtures import QUESTION, SCRIPT, build_group_chat

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def openai_v2(instrumented) -> Iterator:
    """The contrib openai-v2 instrumentation on, on the same tracer provider as ours."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=instrumented.provider)
    yield instrumented
    instrumentor.uninstrument()


def _text(span) -> str:
    message = json.loads(span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]
    return "".join(p.get("content", p.get("response", "")) for p in message["parts"])


def _chat_spans(spans) -> list:
    found = [s for s in spans.all() if s.attributes.get(semconv.GEN_AI_OPERATION_NAME) == "chat"]
    return sorted(found, key=lambda s: s.start_time)


def _assert_enclosed(parent, child) -> None:
    assert child.parent is not None and child.parent.span_id == parent.context.span_id
    assert parent.start_time <= child.start_time and child.end_time <= parent.end_time


def test_autogen_group_chat_chat_spans_nest_under_the_calling_agents_turn(openai_v2, tmp_path):
    spans = openai_v2
    with ScriptedLLM(SCRIPT) as llm:
        chat = build_group_chat(llm, tmp_path)
        result = chat.planner.initiate_chat(chat.manager, message=QUESTION, silent=True)
    assert [m["name"] for m in result.chat_history] == ["planner", "coder", "executor", "reviewer", "planner"]
    by_id = {s.context.span_id: s for s in spans.all()}
    chats = _chat_spans(spans)
    assert len(chats) == 3  # coder, reviewer, planner asked the model; the executor ran code
    for chat_span, (agent, reply) in zip(
        chats, [("coder", SCRIPT[0]), ("reviewer", SCRIPT[1]), ("planner", SCRIPT[2])], strict=True
    ):
        turn = by_id[chat_span.parent.span_id]
        assert turn.name == f"invoke_agent {agent}"
        assert turn.attributes[semconv.GEN_AI_AGENT_NAME] == agent
        assert _text(turn) == reply  # the turn carries the answer that model call produced
        _assert_enclosed(turn, chat_span)
    # the steps and the trajectory are those of a run without openai-v2
    steps = spans.steps()
    assert [s.attributes[semconv.GEN_AI_AGENT_NAME] for s in steps] == [
        m["name"] for m in result.chat_history
    ]
    trajectory = trajectory_from_spans(sdk_spans_to_proto(spans.all()))
    assert [s.content for s in trajectory.steps] == [m["content"] for m in result.chat_history]
    assert [s.agent for s in trajectory.steps] == [m["name"] for m in result.chat_history]


def test_ag2_model_calls_nest_under_the_agents_turn_and_tools_run_inside_theirs(openai_v2):
    from ag2 import Agent, tool
    from ag2.config.openai.config import OpenAIConfig

    spans = openai_v2
    script = [
        Reply(tool_calls=[{"id": "call_w", "name": "ask_worker", "arguments": {"question": "6*7?"}}]),
        "42",
        "The worker says 42.",
    ]
    with ScriptedLLM(script) as llm:
        config = OpenAIConfig(model="scripted-model", api_key="test-key", base_url=llm.base_url)
        worker = Agent("worker", config=config)

        @tool
        async def ask_worker(question: str) -> str:
            """Ask the worker agent a question."""
            return (await worker.ask(question)).body

        lead = Agent("lead", config=config, tools=[ask_worker])
        reply = asyncio.run(lead.ask("Compute 6*7 with help."))
    assert reply.body == "The worker says 42."
    by_id = {s.context.span_id: s for s in spans.all()}
    chats = _chat_spans(spans)
    assert len(chats) == 3
    expected = [("lead", ""), ("worker", "42"), ("lead", "The worker says 42.")]
    for chat_span, (agent, text) in zip(chats, expected, strict=True):
        turn = by_id[chat_span.parent.span_id]
        assert turn.attributes[semconv.GEN_AI_AGENT_NAME] == agent and turn.name == f"invoke_agent {agent}"
        assert _text(turn) == text
        _assert_enclosed(turn, chat_span)
    (tool_span,) = [s for s in spans.steps() if s.name == "execute_tool ask_worker"]
    worker_turn = by_id[chats[1].parent.span_id]
    _assert_enclosed(tool_span, worker_turn)  # the worker was asked from inside the tool


def test_plain_api_turns_enclose_the_openai_calls_made_in_them(openai_v2):
    from openai import OpenAI

    spans = openai_v2
    with ScriptedLLM(["plan: multiply", "42"]) as llm:
        client = OpenAI(base_url=llm.base_url, api_key="test-key")

        def ask(question: str) -> str:
            response = client.chat.completions.create(
                model="scripted-model", messages=[{"role": "user", "content": question}]
            )
            return response.choices[0].message.content

        with task("solve", input="6*7?"):
            record_message("user", "6*7?", role="user")
            for agent in ("planner", "solver"):
                with agent_turn(agent) as turn:
                    turn.answer(ask("6*7?"))
    by_id = {s.context.span_id: s for s in spans.all()}
    chats = _chat_spans(spans)
    assert [by_id[c.parent.span_id].name for c in chats] == ["invoke_agent planner", "invoke_agent solver"]
    for chat_span in chats:
        _assert_enclosed(by_id[chat_span.parent.span_id], chat_span)
    assert [_text(s) for s in spans.steps()] == ["6*7?", "plan: multiply", "42"]


def test_openai_agents_each_model_call_nests_under_its_turn_with_the_turns_tools(openai_v2):
    import agents

    from .test_openai_agents import HANDOFF_SCRIPT, QUESTION, _handoff_team

    spans = openai_v2
    agents.set_tracing_disabled(True)
    try:
        with ScriptedLLM(HANDOFF_SCRIPT) as llm:
            result = agents.Runner.run_sync(_handoff_team(llm), QUESTION)
    finally:
        agents.set_tracing_disabled(False)
    assert result.final_output == "Paris is sunny, 21 C."
    by_id = {s.context.span_id: s for s in spans.all()}
    chats = _chat_spans(spans)
    turns = [by_id[c.parent.span_id] for c in chats]
    assert [t.name for t in turns] == [
        "invoke_agent triage",
        "invoke_agent researcher",
        "invoke_agent researcher",
        "invoke_agent writer",
    ]
    for chat_span, turn in zip(chats, turns, strict=True):
        _assert_enclosed(turn, chat_span)
        assert semconv.STEP_INDEX in turn.attributes  # the turn is the step of the model's response
    tools = [s for s in spans.steps() if s.attributes[semconv.STEP_KIND] == "tool"]
    assert [by_id[t.parent.span_id].name for t in tools] == [
        "invoke_agent triage",
        "invoke_agent researcher",
        "invoke_agent researcher",
    ]


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_langgraph_each_nodes_model_call_nests_under_the_nodes_turn(openai_v2, mode):
    from .test_langgraph import SCRIPT as GRAPH_SCRIPT
    from .test_langgraph import _build, _input

    spans = openai_v2
    with ScriptedLLM(GRAPH_SCRIPT) as llm:
        graph = _build(llm)
        result = graph.invoke(_input()) if mode == "invoke" else asyncio.run(graph.ainvoke(_input()))
    assert result["messages"][-1].content == "Answer: about 2.1 million people."
    by_id = {s.context.span_id: s for s in spans.all()}
    chats = _chat_spans(spans)
    turns = [by_id[c.parent.span_id] for c in chats]
    # the write node answers as the agent its message names
    assert [t.name for t in turns] == [
        "invoke_agent planner",
        "invoke_agent researcher",
        "invoke_agent researcher",
        "invoke_agent writer",
    ]
    for chat_span, turn in zip(chats, turns, strict=True):
        _assert_enclosed(turn, chat_span)
        assert semconv.STEP_INDEX in turn.attributes
    (tool,) = [s for s in spans.steps() if s.attributes[semconv.STEP_KIND] == "tool"]
    assert tool.name == "execute_tool population"  # the tools node's turn is the tool's run
    root = spans.root()
    assert all(s.parent.span_id == root.context.span_id for s in spans.steps())
