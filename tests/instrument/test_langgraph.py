"""LangGraph through the instrumentor's callback handler: a real graph, the real openai client."""

from __future__ import annotations

import asyncio
import json

import pytest
from opentelemetry.trace import StatusCode

from otel_blame import semconv
from otel_blame.instrumentation import task
from otel_blame.instrumentation._safety import HOOK_ERRORS
from tests.instrument.failed_turns import assert_failed_turn_is_error_step
from tests.instrument.shapes import SHAPES, read_back
from tests.instrument.steps import step_kind
from tests.support import Reply, ScriptedLLM

pytest.importorskip("langgraph")

QUESTION = "How many people live in Paris?"
SCRIPT = [
    "Plan: look up the population, then answer.",
    Reply(tool_calls=[{"id": "call_1", "name": "population", "arguments": {"city": "Paris"}}]),
    "Paris has 2.1 million inhabitants.",
    "Answer: about 2.1 million people.",
]
# (agent, kind, text) of every step, in order
EXPECTED = [
    ("user", "message", QUESTION),
    ("planner", "message", "Plan: look up the population, then answer."),
    ("researcher", "message", ""),  # the tool call, no text
    ("tools", "tool", "2100000"),
    ("researcher", "message", "Paris has 2.1 million inhabitants."),
    ("writer", "message", "Answer: about 2.1 million people."),
]


def _build(llm: ScriptedLLM, *, lookup=None):
    """planner -> researcher <-> tools -> writer; every agent asks the LLM through the openai client."""
    import openai
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    client = openai.OpenAI(base_url=llm.base_url, api_key="test-key", max_retries=0)

    def ask(state, name: str):
        history = [{"role": "user", "content": str(m.content)} for m in state["messages"]]
        reply = client.chat.completions.create(model="scripted-model", messages=history).choices[0].message
        calls = [
            {"id": call.id, "name": call.function.name, "args": json.loads(call.function.arguments)}
            for call in reply.tool_calls or ()
        ]
        return AIMessage(reply.content or "", name=name, tool_calls=calls)

    @tool
    def population(city: str) -> int:
        """The number of inhabitants of a city."""
        if lookup is not None:
            return lookup(city)
        return 2_100_000

    def route(state):
        return "tools" if state["messages"][-1].tool_calls else "write"

    graph = StateGraph(MessagesState)
    graph.add_node("planner", lambda state: {"messages": [ask(state, "planner")]})
    graph.add_node("researcher", lambda state: {"messages": [ask(state, "researcher")]})
    graph.add_node("tools", ToolNode([population], handle_tool_errors=lookup is not None))
    graph.add_node("write", lambda state: {"messages": [ask(state, "writer")]})  # agent: the message name
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "researcher")
    graph.add_conditional_edges("researcher", route, ["tools", "write"])
    graph.add_edge("tools", "researcher")
    graph.add_edge("write", END)
    return graph.compile(name="population_graph")


def _summary(steps):
    out = []
    for step in steps:
        message = json.loads(step.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]
        text = "".join(p.get("content", p.get("response", "")) for p in message["parts"])
        out.append((step.attributes[semconv.GEN_AI_AGENT_NAME], step_kind(step), text))
    return out


def _input():
    from langchain_core.messages import HumanMessage

    return {"messages": [HumanMessage(QUESTION)]}


def test_a_graph_run_makes_one_ordered_step_per_message_under_one_root(instrumented):
    from otel_blame.conventions import sdk_spans_to_proto, trajectory_from_spans

    spans = instrumented
    with ScriptedLLM(SCRIPT) as llm:
        result = _build(llm).invoke(_input())
    messages = result["messages"]
    steps = spans.steps()
    assert len(steps) == len(messages) == len(EXPECTED)
    assert _summary(steps) == EXPECTED
    root = spans.root()
    assert root.name == "invoke_workflow population_graph"
    assert root.attributes[semconv.TASK_INPUT] == QUESTION
    assert root.attributes[semconv.TASK_FINAL_OUTPUT] == "Answer: about 2.1 million people."
    assert [s.attributes[semconv.STEP_INDEX] for s in steps] == list(range(len(EXPECTED)))
    assert all(s.parent.span_id == root.context.span_id for s in steps)
    assert len(spans.all()) == len(EXPECTED) + 1
    call = json.loads(steps[2].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"]
    assert call == [
        {"type": "tool_call", "name": "population", "arguments": '{"city": "Paris"}', "id": "call_1"}
    ]
    tool_step = steps[3]
    assert tool_step.name == "execute_tool population"
    assert tool_step.attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert tool_step.status.status_code is StatusCode.UNSET

    trajectory = trajectory_from_spans(sdk_spans_to_proto(spans.all()))
    expected = list(EXPECTED)
    expected[2] = ("researcher", "message", 'tool_call population({"city": "Paris"})')
    assert [(s.agent, s.kind, s.content) for s in trajectory.steps] == expected
    assert [s.span_id for s in trajectory.steps] == [format(s.context.span_id, "016x") for s in steps]


def test_streaming_async_and_inside_a_user_task(instrumented):
    spans = instrumented
    with ScriptedLLM(SCRIPT) as llm:
        graph = _build(llm)
        with task("census", input=QUESTION):
            chunks = list(graph.stream(_input(), stream_mode="updates"))
    assert [next(iter(chunk)) for chunk in chunks] == [
        "planner",
        "researcher",
        "tools",
        "researcher",
        "write",
    ]
    assert _summary(spans.steps()) == EXPECTED
    assert spans.root().name == "invoke_workflow census"
    assert len({s.context.trace_id for s in spans.all()}) == 1

    spans.exporter.clear()
    with ScriptedLLM(SCRIPT) as llm:
        graph = _build(llm)
        result = asyncio.run(graph.ainvoke(_input()))
    assert result["messages"][-1].content == "Answer: about 2.1 million people."
    assert _summary(spans.steps()) == EXPECTED
    assert spans.root().name == "invoke_workflow population_graph"


def test_a_failing_tool_is_an_error_step_and_the_apps_exception_passes_through(instrumented):
    spans = instrumented

    def offline(city: str) -> int:
        raise ValueError("census offline")

    script = [*SCRIPT[:2], "I could not find it.", "Unknown."]
    with ScriptedLLM(script) as llm:
        result = _build(llm, lookup=offline).invoke(_input())
    assert result["messages"][3].status == "error"
    tool_step = spans.steps()[3]
    assert step_kind(tool_step) == "tool"
    assert tool_step.status.status_code is StatusCode.ERROR
    assert "census offline" in tool_step.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]

    spans.exporter.clear()
    error = LookupError("no model")

    def broken_graph():
        from langgraph.graph import END, START, MessagesState, StateGraph

        def fail(state):
            raise error

        graph = StateGraph(MessagesState)
        graph.add_node("fragile", fail)
        graph.add_edge(START, "fragile")
        graph.add_edge("fragile", END)
        return graph.compile()

    with pytest.raises(LookupError) as caught:
        broken_graph().invoke(_input())
    assert caught.value is error
    root = spans.root()
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes[semconv.TASK_OUTCOME] == "failure"
    assert root.attributes[semconv.ERROR_TYPE] == "LookupError"
    steps = spans.steps()
    assert [s.attributes[semconv.GEN_AI_AGENT_NAME] for s in steps] == ["user", "fragile"]
    assert_failed_turn_is_error_step(spans, "fragile", "LookupError")


def test_a_hook_error_does_not_break_the_run(instrumented, monkeypatch):
    from otel_blame.instrumentation.langgraph import _handler as hooks

    def broken(*args, **kwargs):
        raise RuntimeError("hook bug")

    monkeypatch.setattr(hooks, "record_message", broken)
    monkeypatch.setattr(hooks, "AgentTurn", broken)
    with ScriptedLLM(SCRIPT) as llm:
        result = _build(llm).invoke(_input())
    assert result["messages"][-1].content == "Answer: about 2.1 million people."
    assert HOOK_ERRORS.total > 0
    assert instrumented.steps() == []
    assert instrumented.root().name == "invoke_workflow population_graph"


def test_uninstrument_restores_the_originals(spans):
    from langgraph.pregel import Pregel

    from otel_blame.instrumentation import OtelBlameInstrumentor

    names = ("invoke", "ainvoke", "stream", "astream")
    originals = [Pregel.__dict__[name] for name in names]
    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument()
    try:
        assert "otel_blame_langgraph" in instrumentor.instrumented_frameworks
        assert all(Pregel.__dict__[n] is not o for n, o in zip(names, originals, strict=True))
    finally:
        instrumentor.uninstrument()
    assert all(Pregel.__dict__[n] is o for n, o in zip(names, originals, strict=True))
    with ScriptedLLM(SCRIPT) as llm:
        _build(llm).invoke(_input())
    assert spans.all() == []


def test_subgraphs_and_graphs_called_from_nodes_add_only_new_messages(instrumented):
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def chain(*nodes):
        graph = StateGraph(MessagesState)
        previous = START
        for name, node in nodes:
            graph.add_node(name, node)
            graph.add_edge(previous, name)
            previous = name
        graph.add_edge(previous, END)
        return graph.compile()

    team = chain(
        ("a", lambda state: {"messages": [AIMessage("from a", name="alice")]}),
        ("b", lambda state: {"messages": [AIMessage("from b")]}),
    )
    helper = chain(("c", lambda state: {"messages": [AIMessage("from c")]}))

    def caller(state):
        answer = helper.invoke({"messages": state["messages"][-1:]})["messages"][-1].content
        return {"messages": [AIMessage(f"caller got {answer}")]}

    outer = chain(("team", team), ("caller", caller), ("quiet", lambda state: {"messages": []}))
    result = outer.invoke(_input())
    assert [m.content for m in result["messages"]][1:] == ["from a", "from b", "caller got from c"]
    assert [(agent, text) for agent, _, text in _summary(instrumented.steps())] == [
        ("user", QUESTION),
        ("alice", "from a"),
        ("b", "from b"),
        ("c", "from c"),
        ("caller", "caller got from c"),
    ]
    assert instrumented.root().name == "invoke_workflow LangGraph"


def test_the_langgraph_part_can_be_disabled(spans, monkeypatch):
    from langgraph.pregel import Pregel

    from otel_blame.instrumentation import OtelBlameInstrumentor

    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "otel_blame_langgraph")
    original = Pregel.__dict__["invoke"]
    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument()
    try:
        assert "otel_blame_langgraph" not in instrumentor.instrumented_frameworks
        assert Pregel.__dict__["invoke"] is original
    finally:
        instrumentor.uninstrument()


def test_the_apps_own_callbacks_keep_working(instrumented):
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda
    from langgraph.graph import END, START, MessagesState, StateGraph

    class Seen(BaseCallbackHandler):
        def __init__(self):
            self.chains = []

        def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kwargs):
            self.chains.append(kwargs.get("name"))

    graph = StateGraph(MessagesState)
    graph.add_node("echo", lambda state: {"messages": [AIMessage("echo")]})
    graph.add_edge(START, "echo")
    graph.add_edge("echo", END)
    compiled = graph.compile(name="echo_graph")

    direct = Seen()
    compiled.invoke(_input(), {"callbacks": [direct]})
    assert direct.chains == ["echo_graph", "echo"]

    outer = Seen()
    wrapper = RunnableLambda(lambda value: compiled.invoke(value), name="outer")
    wrapper.invoke(_input(), {"callbacks": [outer]})
    assert outer.chains == ["outer", "echo_graph", "echo"]
    assert [(agent, text) for agent, _, text in _summary(instrumented.steps())] == [
        ("user", QUESTION),
        ("echo", "echo"),
        ("user", QUESTION),
        ("echo", "echo"),
    ]
    assert [root.name for root in instrumented.roots()] == ["invoke_workflow echo_graph"] * 2


def test_a_command_handoff_streamed_async_and_a_stream_stopped_early(instrumented):
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import Command

    def supervisor(state):
        return Command(update={"messages": [AIMessage("over to you", name="boss")]}, goto="worker")

    async def worker(state):
        return {"messages": [AIMessage("done")]}

    graph = StateGraph(MessagesState)
    graph.add_node("supervisor", supervisor)
    graph.add_node("worker", worker)
    graph.add_edge(START, "supervisor")
    graph.add_edge("worker", END)
    compiled = graph.compile(name="handoff")

    async def main():
        full = [chunk async for chunk in compiled.astream(_input())]
        stream = compiled.astream(_input())
        async for _ in stream:
            break
        await stream.aclose()
        return full

    assert [next(iter(chunk)) for chunk in asyncio.run(main())] == ["supervisor", "worker"]
    traces = {}
    for step in instrumented.steps():
        traces.setdefault(step.context.trace_id, []).append(step)
    runs = sorted(([(a, text) for a, _, text in _summary(steps)] for steps in traces.values()), key=len)
    assert runs == [
        [("user", QUESTION), ("boss", "over to you")],
        [("user", QUESTION), ("boss", "over to you"), ("worker", "done")],
    ]
    roots = instrumented.roots()
    assert len(roots) == 2
    assert all(root.status.status_code is StatusCode.UNSET for root in roots)


# -- the message path -----------------------------------------------------------------------------


def test_the_message_path_changes_what_the_next_node_and_the_tool_get(instrumented):
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import Rewriter, sent_to_model

    spans = instrumented
    asked = []
    rewriter = Rewriter(
        ("message", "planner", "look up", "guess"),
        ("tool_call", "researcher", "Paris", "Lyon"),
        ("tool", None, "2100000", "2200000"),
    )
    with ScriptedLLM(SCRIPT) as llm, intercept_messages(rewriter):
        _build(llm, lookup=lambda city: asked.append(city) or 2_100_000).invoke(_input())
        assert "guess the population" in sent_to_model(llm, 1) and "look up" not in sent_to_model(llm, 1)
        assert "2200000" in sent_to_model(llm, 2)
    assert asked == ["Lyon"] and rewriter.unused == []
    summary = _summary(spans.steps())
    assert summary[1] == ("planner", "message", "Plan: guess the population, then answer.")
    assert summary[3] == ("tools", "tool", "2200000")
    call = json.loads(spans.steps()[2].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]
    assert call["arguments"] == '{"city": "Lyon"}'
    assert {(o.kind, o.step) for o in rewriter.changed} == {("message", 1), ("tool_call", 2), ("tool", 3)}
    assert {o.framework for o in rewriter.seen} == {"langgraph"}


def test_an_interceptor_that_raises_changes_nothing(instrumented):
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import raising

    spans = instrumented
    with ScriptedLLM(SCRIPT) as llm, intercept_messages(raising):
        _build(llm).invoke(_input())
    assert _summary(spans.steps()) == EXPECTED
    assert set(HOOK_ERRORS.by_site()) == {"intercept"}


# -- both shapes of the GenAI conventions ----------------------------------------------------------


@SHAPES
def test_both_convention_shapes_read_back_the_same(instrumented, latest):
    """A graph run with a tool, then one whose tool raises, then a node that raises."""

    def offline(city: str) -> int:
        raise ValueError("census offline")

    def fail(state):
        raise LookupError("no model")

    def run() -> None:
        from langgraph.graph import END, START, MessagesState, StateGraph

        with ScriptedLLM(SCRIPT) as llm:
            _build(llm).invoke(_input())
        with ScriptedLLM([*SCRIPT[:2], "I could not find it.", "Unknown."]) as llm:
            _build(llm, lookup=offline).invoke(_input())
        graph = StateGraph(MessagesState)
        graph.add_node("fragile", fail)
        graph.add_edge(START, "fragile")
        graph.add_edge("fragile", END)
        with pytest.raises(LookupError):
            graph.compile().invoke(_input())

    graph_run, offline_run, failed_run = read_back(instrumented, latest, run)
    assert [(s[0], s[2]) for s in graph_run["steps"]] == [(agent, kind) for agent, kind, _ in EXPECTED]
    assert [s[3] for s in graph_run["steps"] if s[2] == "tool"] == ["2100000"]
    tool = next(s for s in offline_run["steps"] if s[2] == "tool")
    assert "census offline" in tool[3] and tool[6] is True
    assert [f[:2] for f in offline_run["dependency_failures"]] == [("population", "tool_error")]
    assert failed_run["outcome"][0] == "failure"
    assert [(s[0], s[3], s[6]) for s in failed_run["steps"]] == [
        ("user", QUESTION, False),
        ("fragile", "LookupError: no model", True),
    ]
