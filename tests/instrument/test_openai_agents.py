"""The OpenAI Agents SDK (``openai-agents``, module ``agents``) through the instrumentor's run hooks:
real agents, handoffs and tools, the real openai client against the scripted server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from opentelemetry.trace import StatusCode

from otel_blame import semconv
from otel_blame.conventions import sdk_spans_to_proto, trajectory_from_spans
from otel_blame.instrumentation import hook_error_count, task
from tests.instrument.failed_turns import assert_failed_turn_is_error_step
from tests.instrument.shapes import SHAPES, read_back
from tests.instrument.steps import step_kind
from tests.support import Reply, ScriptedLLM

agents = pytest.importorskip("agents")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

QUESTION = "What is the weather in Paris?"
HANDOFF_SCRIPT = [
    Reply(tool_calls=[{"id": "call_1", "name": "transfer_to_researcher", "arguments": {}}]),
    Reply(tool_calls=[{"id": "call_2", "name": "lookup_weather", "arguments": {"city": "Paris"}}]),
    Reply(tool_calls=[{"id": "call_3", "name": "transfer_to_writer", "arguments": {}}]),
    "Paris is sunny, 21 C.",
]
# (agent, kind, span name, text of the step)
HANDOFF_STEPS = [
    ("user", "message", "invoke_agent user", QUESTION),
    ("triage", "message", "invoke_agent triage", ""),  # only the transfer call
    ("triage", "tool", "execute_tool transfer_to_researcher", "handoff to researcher"),
    ("researcher", "message", "invoke_agent researcher", ""),  # only the lookup call
    ("researcher", "tool", "execute_tool lookup_weather", "Paris: sunny, 21 C"),
    ("researcher", "message", "invoke_agent researcher", ""),
    ("researcher", "tool", "execute_tool transfer_to_writer", "handoff to writer"),
    ("writer", "message", "invoke_agent writer", "Paris is sunny, 21 C."),
]


@pytest.fixture(autouse=True)
def no_sdk_tracing() -> Iterator[None]:
    """The SDK's own tracing (which would export to OpenAI) stays off; our hooks do not need it."""
    agents.set_tracing_disabled(True)
    yield
    agents.set_tracing_disabled(False)


def _model(llm: ScriptedLLM, max_retries: int = 2):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=llm.base_url, api_key="test-key", max_retries=max_retries)
    return agents.OpenAIChatCompletionsModel(model="scripted-model", openai_client=client)


def _handoff_team(llm: ScriptedLLM):
    @agents.function_tool
    def lookup_weather(city: str) -> str:
        """Look up today's weather for a city."""
        return f"{city}: sunny, 21 C"

    model = _model(llm)
    writer = agents.Agent(name="writer", instructions="Write the answer.", model=model)
    researcher = agents.Agent(
        name="researcher", instructions="Find facts.", model=model, tools=[lookup_weather], handoffs=[writer]
    )
    return agents.Agent(name="triage", instructions="Route the question.", model=model, handoffs=[researcher])


def _assert_turns(steps, root, nested=None):
    """Envelope shape: each model response is the step of its turn's span (under the root, or under
    the caller's turn for a nested run); the tool results and handoffs of that turn nest in it."""
    nested = nested or {}
    turns = {}
    for step in steps:
        agent = step.attributes[semconv.GEN_AI_AGENT_NAME]
        if step_kind(step) == "tool":
            turn = turns[agent]
            assert step.parent.span_id == turn.context.span_id, step.name
            assert turn.start_time <= step.start_time and step.end_time <= turn.end_time
        else:
            index = step.attributes[semconv.STEP_INDEX]
            parent = steps[nested[index]] if index in nested else root
            assert step.parent.span_id == parent.context.span_id, step.name
            turns[agent] = step


def _summary(steps):
    out = []
    for step in steps:
        message = json.loads(step.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]
        text = "".join(p.get("content", p.get("response", "")) for p in message["parts"])
        out.append((step.attributes[semconv.GEN_AI_AGENT_NAME], step_kind(step), step.name, text))
    return out


def test_handoffs_and_tools_make_ordered_steps_under_one_root(instrumented):
    spans = instrumented
    with ScriptedLLM(HANDOFF_SCRIPT) as llm:
        result = agents.Runner.run_sync(_handoff_team(llm), QUESTION)
        assert llm.calls == 4
    assert result.final_output == "Paris is sunny, 21 C."
    steps = spans.steps()
    assert _summary(steps) == HANDOFF_STEPS
    assert len(spans.all()) == len(HANDOFF_STEPS) + 1  # one span per message, plus the root
    root = spans.root()
    assert root.name == "invoke_workflow triage"
    assert root.attributes[semconv.TASK_INPUT] == QUESTION
    assert root.attributes[semconv.TASK_FINAL_OUTPUT] == "Paris is sunny, 21 C."
    assert root.attributes[semconv.INSTRUMENTATION_SOURCE] == "openai_agents"
    assert [s.attributes[semconv.STEP_INDEX] for s in steps] == list(range(len(HANDOFF_STEPS)))
    _assert_turns(steps, root)
    assert len({s.context.trace_id for s in spans.all()}) == 1
    assert [s.start_time for s in steps] == sorted(s.start_time for s in steps)
    call = json.loads(steps[3].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"]
    assert call == [
        {"type": "tool_call", "name": "lookup_weather", "arguments": '{"city": "Paris"}', "id": "call_2"}
    ]
    assert steps[4].attributes[semconv.GEN_AI_TOOL_NAME] == "lookup_weather"
    assert steps[4].attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_2"
    assert steps[2].attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert steps[7].attributes[semconv.GEN_AI_REQUEST_MODEL] == "scripted-model"

    trajectory = trajectory_from_spans(sdk_spans_to_proto(spans.all()))
    # a message that is only a tool call reads as the call in the trajectory
    calls = {1: "tool_call transfer_to_researcher({})", 3: 'tool_call lookup_weather({"city": "Paris"})'}
    calls[5] = "tool_call transfer_to_writer({})"
    assert [(s.index, s.agent, s.kind.value, s.content) for s in trajectory.steps] == [
        (i, agent, kind, calls.get(i, text)) for i, (agent, kind, _, text) in enumerate(HANDOFF_STEPS)
    ]
    assert [s.span_id for s in trajectory.steps] == [format(s.context.span_id, "016x") for s in steps]
    assert [s.tool_name for s in trajectory.steps if s.kind.value == "tool"] == [
        "transfer_to_researcher",
        "lookup_weather",
        "transfer_to_writer",
    ]
    assert trajectory.task.input == QUESTION
    assert trajectory.root_span_id == format(root.context.span_id, "016x")


def _consult_team(llm: ScriptedLLM):
    model = _model(llm)
    analyst = agents.Agent(name="analyst", instructions="Analyse.", model=model)
    reviewer = agents.Agent(name="reviewer", instructions="Review.", model=model)
    return agents.Agent(
        name="planner",
        instructions="Plan.",
        model=model,
        tools=[analyst.as_tool(tool_name="ask_analyst", tool_description="Ask the analyst.")],
        handoffs=[reviewer],
    )


CONSULT_SCRIPT = [
    Reply(tool_calls=[{"id": "call_a", "name": "ask_analyst", "arguments": {"input": "Is 97 prime?"}}]),
    "97 is prime.",
    Reply(tool_calls=[{"id": "call_r", "name": "transfer_to_reviewer", "arguments": {}}]),
    "Confirmed: 97 is prime.",
]


class _EventLog(agents.RunHooks):
    """The app's own run hooks: they must see exactly what they see without otel-blame."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    async def on_agent_start(self, context, agent) -> None:
        self.events.append(("agent_start", agent.name))

    async def on_llm_end(self, context, agent, response) -> None:
        self.events.append(("llm_end", agent.name))

    async def on_tool_end(self, context, agent, tool, result) -> None:
        self.events.append(("tool_end", f"{tool.name}={result}"))

    async def on_handoff(self, context, from_agent, to_agent) -> None:
        self.events.append(("handoff", f"{from_agent.name}->{to_agent.name}"))

    async def on_agent_end(self, context, agent, output) -> None:
        self.events.append(("agent_end", f"{agent.name}={output}"))


def test_agent_as_tool_inside_a_user_task_and_the_apps_hooks_see_everything(spans):
    from otel_blame.instrumentation import OtelBlameInstrumentor

    with ScriptedLLM(CONSULT_SCRIPT) as llm:
        plain = _EventLog()
        plain_result = agents.Runner.run_sync(_consult_team(llm), "Check 97.", hooks=plain)
    assert plain_result.final_output == "Confirmed: 97 is prime."
    assert spans.all() == []

    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument()
    try:
        with ScriptedLLM(CONSULT_SCRIPT) as llm:
            hooked = _EventLog()

            async def main():
                async with task("primality", input="Check 97."):
                    return await agents.Runner.run(_consult_team(llm), "Check 97.", hooks=hooked)

            result = asyncio.run(main())
    finally:
        instrumentor.uninstrument()
    assert result.final_output == plain_result.final_output
    assert hooked.events == plain.events
    assert ("handoff", "planner->reviewer") in hooked.events
    assert _summary(spans.steps()) == [
        ("user", "message", "invoke_agent user", "Check 97."),
        ("planner", "message", "invoke_agent planner", ""),
        (
            "analyst",
            "message",
            "invoke_agent analyst",
            "97 is prime.",
        ),  # the nested run's question is not repeated
        ("planner", "tool", "execute_tool ask_analyst", "97 is prime."),
        ("planner", "message", "invoke_agent planner", ""),
        ("planner", "tool", "execute_tool transfer_to_reviewer", "handoff to reviewer"),
        ("reviewer", "message", "invoke_agent reviewer", "Confirmed: 97 is prime."),
    ]
    root = spans.root()
    assert root.name == "invoke_workflow primality"
    assert semconv.TASK_FINAL_OUTPUT not in root.attributes  # the app's task: the app sets its outcome
    assert len(spans.all()) == 8
    # the analyst was asked inside the planner's tool call: its turn nests in the execute_tool envelope,
    # which nests in the planner's turn and lasts from the tool's start to its return
    _assert_turns(spans.steps(), root, nested={2: 3})
    planner_turn, analyst_turn, ask_analyst = spans.steps()[1:4]
    assert ask_analyst.name == "execute_tool ask_analyst"
    assert ask_analyst.parent.span_id == planner_turn.context.span_id
    assert ask_analyst.start_time <= analyst_turn.start_time and analyst_turn.end_time <= ask_analyst.end_time


def test_a_streamed_run_has_its_own_root_that_ends_with_the_stream(instrumented):
    spans = instrumented

    async def main(llm):
        streamed = agents.Runner.run_streamed(_handoff_team(llm), QUESTION)
        events = [event async for event in streamed.stream_events()]
        await asyncio.wait_for(streamed.run_loop_task, timeout=10)
        return streamed, events

    with ScriptedLLM(HANDOFF_SCRIPT) as llm:
        streamed, events = asyncio.run(main(llm))
    assert events and streamed.final_output == "Paris is sunny, 21 C."
    assert _summary(spans.steps()) == HANDOFF_STEPS
    root = spans.root()
    assert root.attributes[semconv.TASK_FINAL_OUTPUT] == "Paris is sunny, 21 C."
    assert root.end_time >= max(s.end_time for s in spans.steps())
    _assert_turns(spans.steps(), root)

    spans.exporter.clear()

    async def failing(llm):
        agent = agents.Agent(name="fragile", instructions="Answer.", model=_model(llm, max_retries=0))
        streamed = agents.Runner.run_streamed(agent, "hello")
        with pytest.raises(Exception) as caught:
            async for _ in streamed.stream_events():
                pass
        await asyncio.wait_for(asyncio.gather(streamed.run_loop_task, return_exceptions=True), timeout=10)
        return caught.value

    with ScriptedLLM([Reply(status=400, content="bad request")]) as llm:
        error = asyncio.run(failing(llm))
    root = spans.root()
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes[semconv.ERROR_TYPE] == type(error).__qualname__


def test_a_hook_error_does_not_break_the_run(instrumented, monkeypatch):
    from otel_blame.instrumentation.openai_agents import _hooks as openai_agents

    def broken(*args, **kwargs):
        raise RuntimeError("bug in otel-blame")

    monkeypatch.setattr(openai_agents, "_text_of", broken)
    monkeypatch.setattr(openai_agents, "_handoff_tool_name", broken)
    before = hook_error_count()
    with ScriptedLLM(HANDOFF_SCRIPT) as llm:
        result = agents.Runner.run_sync(_handoff_team(llm), QUESTION)
    assert result.final_output == "Paris is sunny, 21 C."
    assert hook_error_count() > before
    # what did not depend on the broken helpers is still recorded
    summary = _summary(instrumented.steps())
    assert summary[0] == ("user", "message", "invoke_agent user", QUESTION)
    assert ("researcher", "tool", "execute_tool lookup_weather", "Paris: sunny, 21 C") in summary


def test_a_failing_tool_is_an_error_step(instrumented):
    @agents.function_tool
    def lookup(city: str) -> str:
        """Look something up."""
        raise ValueError("index offline")

    script = [Reply(tool_calls=[{"id": "c1", "name": "lookup", "arguments": {"city": "Paris"}}]), "No data."]
    with ScriptedLLM(script) as llm:
        agent = agents.Agent(name="searcher", instructions="Search.", model=_model(llm), tools=[lookup])
        result = agents.Runner.run_sync(agent, "find it")
    assert result.final_output == "No data."
    steps = instrumented.steps()
    assert [step_kind(s) for s in steps] == ["message", "message", "tool", "message"]
    assert [s.status.status_code is StatusCode.ERROR for s in steps] == [False, False, True, False]
    assert steps[2].attributes[semconv.ERROR_TYPE] == "ValueError"
    trajectory = trajectory_from_spans(sdk_spans_to_proto(instrumented.all()))
    assert [s.is_error for s in trajectory.steps] == [False, False, True, False]


def test_a_tool_call_is_an_envelope_from_the_tools_start_to_its_return(instrumented):
    """Each function tool call is an ``execute_tool`` span under the agent's turn, current while the
    tool runs (what the tool does nests under it) and as long as the tool took."""
    spans = instrumented
    inside = spans.provider.get_tracer("inside-the-tool")

    @agents.function_tool
    async def slow_lookup(city: str) -> str:
        """Look up today's weather for a city, slowly."""
        with inside.start_as_current_span("database query"):
            await asyncio.sleep(0.05)
        return f"{city}: sunny, 21 C"

    @agents.function_tool(failure_error_function=None)
    def strict_lookup(city: str) -> str:
        """Look up, and let a failure end the run."""
        raise ConnectionError("census offline")

    script = [
        Reply(tool_calls=[{"id": "call_s", "name": "slow_lookup", "arguments": {"city": "Paris"}}]),
        "Paris is sunny.",
    ]
    with ScriptedLLM(script) as llm:
        agent = agents.Agent(name="searcher", instructions="Search.", model=_model(llm), tools=[slow_lookup])
        assert agents.Runner.run_sync(agent, "weather?").final_output == "Paris is sunny."
    steps = spans.steps()
    assert [(s.name, step_kind(s)) for s in steps] == [
        ("invoke_agent user", "message"),
        ("invoke_agent searcher", "message"),
        ("execute_tool slow_lookup", "tool"),
        ("invoke_agent searcher", "message"),
    ]
    turn, tool = steps[1], steps[2]
    query = next(s for s in spans.all() if s.name == "database query")
    assert tool.parent.span_id == turn.context.span_id
    assert query.parent.span_id == tool.context.span_id  # the tool's own work nests in its envelope
    assert turn.start_time <= tool.start_time <= query.start_time
    assert query.end_time <= tool.end_time <= turn.end_time
    assert tool.end_time - tool.start_time >= 50_000_000  # the tool's duration, not a point
    assert tool.attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_s"
    assert "Paris: sunny, 21 C" in tool.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]
    assert len([s for s in spans.all() if s.name.startswith("execute_tool")]) == 1  # no second span

    spans.exporter.clear()
    script = [Reply(tool_calls=[{"id": "call_x", "name": "strict_lookup", "arguments": {"city": "Paris"}}])]
    with ScriptedLLM(script) as llm:
        agent = agents.Agent(
            name="searcher", instructions="Search.", model=_model(llm), tools=[strict_lookup]
        )
        with pytest.raises(Exception, match="census offline"):
            agents.Runner.run_sync(agent, "weather?")
    # the tool that raised (the SDK re-raises it as a UserError) is the tool error step of its agent
    failed = assert_failed_turn_is_error_step(spans, "searcher", "UserError", kind="tool")
    assert "census offline" in failed.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]
    assert failed.name == "execute_tool strict_lookup"
    assert failed.attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_x"


def test_parallel_tool_calls_are_one_envelope_each(instrumented):
    """Two tool calls of one model response run concurrently (one asyncio task each): each gets its
    own ``execute_tool`` envelope, answered with its own result and call id, both under the turn."""
    spans = instrumented
    started: list[str] = []

    @agents.function_tool
    async def lookup_weather(city: str) -> str:
        """Look up today's weather for a city."""
        started.append(city)
        await asyncio.sleep(0.05 if city == "Paris" else 0.01)
        return f"{city}: sunny"

    calls = [
        {"id": "call_p", "name": "lookup_weather", "arguments": {"city": "Paris"}},
        {"id": "call_r", "name": "lookup_weather", "arguments": {"city": "Rome"}},
    ]
    with ScriptedLLM([Reply(tool_calls=calls), "Both sunny."]) as llm:
        agent = agents.Agent(
            name="searcher", instructions="Search.", model=_model(llm), tools=[lookup_weather]
        )
        assert agents.Runner.run_sync(agent, "weather?").final_output == "Both sunny."
    assert sorted(started) == ["Paris", "Rome"]
    steps = spans.steps()
    turn = steps[1]
    tools = {s.attributes[semconv.GEN_AI_TOOL_CALL_ID]: s for s in steps if s.name.startswith("execute_tool")}
    assert set(tools) == {"call_p", "call_r"}
    for call_id, city in (("call_p", "Paris"), ("call_r", "Rome")):
        tool = tools[call_id]
        assert f"{city}: sunny" in tool.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]
        assert tool.parent.span_id == turn.context.span_id
        assert turn.start_time <= tool.start_time and tool.end_time <= turn.end_time
    # they overlapped: Rome's envelope started before Paris's (the slower one) ended
    assert tools["call_r"].start_time < tools["call_p"].end_time
    assert tools["call_p"].end_time - tools["call_p"].start_time >= 50_000_000


def test_the_apps_exceptions_pass_through_and_fail_the_task(instrumented):
    spans = instrumented
    with ScriptedLLM([Reply(status=400, content="bad request")]) as llm:
        agent = agents.Agent(name="fragile", instructions="Answer.", model=_model(llm, max_retries=0))
        with pytest.raises(Exception) as caught:
            agents.Runner.run_sync(agent, "hello")
    root = spans.root()
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes[semconv.TASK_OUTCOME] == "failure"
    assert root.attributes[semconv.ERROR_TYPE] == type(caught.value).__qualname__
    # the turn whose model call raised is the error step of its agent
    assert [s.attributes[semconv.GEN_AI_AGENT_NAME] for s in spans.steps()] == ["user", "fragile"]
    assert_failed_turn_is_error_step(spans, "fragile", type(caught.value).__qualname__)

    spans.exporter.clear()
    error = LookupError("the app's own hook failed")

    class Failing(agents.RunHooks):
        async def on_handoff(self, context, from_agent, to_agent) -> None:
            raise error

    with ScriptedLLM(HANDOFF_SCRIPT) as llm:
        with pytest.raises(LookupError) as caught:
            agents.Runner.run_sync(_handoff_team(llm), QUESTION, hooks=Failing())
    assert caught.value is error
    assert spans.root().attributes[semconv.TASK_OUTCOME_REASON] == "LookupError: the app's own hook failed"

    with pytest.raises(TypeError, match="RunHooks"):
        agents.Runner.run_sync(_handoff_team(llm), QUESTION, hooks=object())


def test_uninstrument_restores_and_the_part_can_be_disabled(spans, monkeypatch):
    from agents import tool
    from agents.run import AgentRunner
    from agents.run_internal import tool_execution

    from otel_blame.instrumentation import OtelBlameInstrumentor

    formatter = "maybe_invoke_function_tool_failure_error_function"
    patched = [(AgentRunner.__dict__, "run"), (AgentRunner.__dict__, "run_streamed")]
    patched += [(vars(tool_execution._FunctionToolBatchExecutor), "_run_single_tool")]
    patched += [(vars(tool), formatter), (vars(tool_execution), formatter)]
    originals = [owner[name] for owner, name in patched]
    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument()
    assert "otel_blame_openai_agents" in instrumentor.instrumented_frameworks
    assert all(owner[name] is not o for (owner, name), o in zip(patched, originals, strict=True))
    instrumentor.uninstrument()
    assert all(owner[name] is o for (owner, name), o in zip(patched, originals, strict=True))
    with ScriptedLLM(HANDOFF_SCRIPT) as llm:
        agents.Runner.run_sync(_handoff_team(llm), QUESTION)
    assert spans.all() == []

    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "otel_blame_openai_agents")
    instrumentor.instrument()
    try:
        assert "otel_blame_openai_agents" not in instrumentor.instrumented_frameworks
        assert all(owner[name] is o for (owner, name), o in zip(patched, originals, strict=True))
    finally:
        instrumentor.uninstrument()


# -- the message path -----------------------------------------------------------------------------


def test_the_message_path_changes_tool_calls_results_handoffs_and_answers(instrumented):
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import Rewriter, sent_to_model

    spans = instrumented
    rewriter = Rewriter(
        ("tool_call", "researcher", "Paris", "Rome"),
        ("tool", "researcher", "sunny", "rainy"),
        ("message", "writer", "21 C", "12 C"),
    )
    with ScriptedLLM(HANDOFF_SCRIPT) as llm, intercept_messages(rewriter):
        result = agents.Runner.run_sync(_handoff_team(llm), QUESTION)
        assert "Rome: rainy, 21 C" in sent_to_model(llm, 2)  # the model saw the changed call's result
    assert rewriter.unused == []
    assert result.final_output == "Paris is sunny, 12 C."
    summary = _summary(spans.steps())
    assert summary[4] == ("researcher", "tool", "execute_tool lookup_weather", "Rome: rainy, 21 C")
    assert summary[7][3] == "Paris is sunny, 12 C."
    call = json.loads(spans.steps()[3].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]
    assert json.loads(call["arguments"]) == {"city": "Rome"}
    assert [o.kind for o in rewriter.seen if o.tool_name and o.tool_name.startswith("transfer_to_")] == [
        "handoff",
        "handoff",
    ]
    assert {o.framework for o in rewriter.seen} == {"openai_agents"}


def test_an_interceptor_that_raises_changes_nothing(instrumented):
    from otel_blame.instrumentation._safety import HOOK_ERRORS
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import raising

    with ScriptedLLM(HANDOFF_SCRIPT) as llm, intercept_messages(raising):
        result = agents.Runner.run_sync(_handoff_team(llm), QUESTION)
    assert result.final_output == "Paris is sunny, 21 C."
    assert _summary(instrumented.steps()) == HANDOFF_STEPS
    assert set(HOOK_ERRORS.by_site()) == {"intercept"}


# -- both shapes of the GenAI conventions ----------------------------------------------------------


@SHAPES
def test_both_convention_shapes_read_back_the_same(instrumented, latest):
    """Handoffs and a tool, then an agent whose tool raises."""

    @agents.function_tool
    def lookup(city: str) -> str:
        """Look something up."""
        raise ValueError("index offline")

    broken = [Reply(tool_calls=[{"id": "c1", "name": "lookup", "arguments": {"city": "Paris"}}]), "No data."]

    def run() -> None:
        with ScriptedLLM(HANDOFF_SCRIPT) as llm:
            agents.Runner.run_sync(_handoff_team(llm), QUESTION)
        with ScriptedLLM(broken) as llm:
            agent = agents.Agent(name="searcher", instructions="Search.", model=_model(llm), tools=[lookup])
            agents.Runner.run_sync(agent, "find it")

    team, searcher = read_back(instrumented, latest, run, tools=3)
    assert [(s[0], s[2]) for s in team["steps"]] == [(agent, kind) for agent, kind, _, _ in HANDOFF_STEPS]
    assert [s[3] for s in team["steps"] if s[2] == "tool"] == [
        text for _, kind, _, text in HANDOFF_STEPS if kind == "tool"
    ]
    assert [(s[0], s[2], s[6]) for s in searcher["steps"]] == [
        ("user", "message", False),
        ("searcher", "message", False),
        ("searcher", "tool", True),
        ("searcher", "message", False),
    ]
    assert [f[:2] for f in searcher["dependency_failures"]] == [("lookup", "tool_error")]
