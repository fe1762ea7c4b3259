"""CrewAI through ``CrewAIInstrumentor``: real crews, agents, tasks, tools and delegation, CrewAI's
native OpenAI provider against the scripted server. An agent with tools asks for them by function
calling (native tool calls); an agent without tools, or on a model that refuses tools, writes ReAct
text (``Action:`` / ``Final Answer:``).

CrewAI cannot share the main environment (every crewai pulls ``instructor``, which caps ``jiter`` below
what ``openai`` 3.x needs): these tests run in the CrewAI environment, ``make test-crewai``.
"""

from __future__ import annotations

import json
import logging
import os

import httpx
import pytest
from opentelemetry.trace import StatusCode

from otel_blame import semconv
from otel_blame.conventions import sdk_spans_to_proto, trajectory_from_spans
from otel_blame.instrumentation import hook_error_count, task
from tests.instrument.failed_turns import assert_failed_turn_is_error_step
from tests.instrument.interceptors import sent_to_model
from tests.instrument.shapes import SHAPES, read_back
from tests.instrument.steps import step_kind
from tests.support import Reply, ScriptedLLM

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # CrewAI's own telemetry: never sent
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
crewai = pytest.importorskip("crewai")

from crewai.llms.hooks import BaseInterceptor  # noqa: E402
from crewai.tools import BaseTool  # noqa: E402
from crewai.tools.tool_failure import ToolFailure  # noqa: E402

from otel_blame.instrumentation.crewai import CrewAIInstrumentor  # noqa: E402

# CrewAI 1.15's deprecations of its own attributes, which it reads itself (not this project's code)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")

QUESTION = "What is the weather in Paris?"


class LookupWeather(BaseTool):
    name: str = "lookup_weather"
    description: str = "Look up today's weather for a city."

    def _run(self, city: str) -> str:
        return f"{city}: sunny, 21 C"


class LookupBroken(BaseTool):
    name: str = "lookup_broken"
    description: str = "Look something up in an index that is offline."

    def _run(self, city: str) -> str:
        raise ValueError("index offline")


class LookupArchived(BaseTool):
    name: str = "lookup_archived"
    description: str = "Look something up in the archive, which reports what it lacks."

    def _run(self, city: str) -> ToolFailure:
        return ToolFailure(message=f"no archive for {city}", code="archive_missing")


class ModelCalls(BaseInterceptor[httpx.Request, httpx.Response]):
    """Every HTTP request the model client sends, as a span made where the request is made: its
    parent is whatever span was current then (what an LLM instrumentation sees). CrewAI's own
    transport interceptor hook (``LLM(interceptor=...)``)."""

    def __init__(self, provider) -> None:
        self.tracer = provider.get_tracer("model-call-probe")

    def on_outbound(self, message: httpx.Request) -> httpx.Request:
        self.tracer.start_span("chat scripted-model", attributes={"gen_ai.operation.name": "chat"}).end()
        return message

    def on_inbound(self, message: httpx.Response) -> httpx.Response:
        return message

    def llm(self, llm: ScriptedLLM):
        return crewai.LLM(
            model="scripted-model",
            provider="openai",
            base_url=llm.base_url,
            api_key="test-key",
            max_retries=0,
            interceptor=self,
        )


@pytest.fixture
def instrumented(spans, monkeypatch):
    monkeypatch.delenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", raising=False)
    instrumentor = CrewAIInstrumentor()
    instrumentor.instrument(tracer_provider=spans.provider)
    yield spans
    instrumentor.uninstrument()


@pytest.fixture
def calls(spans) -> ModelCalls:
    return ModelCalls(spans.provider)


def _summary(steps):
    out = []
    for step in steps:
        message = json.loads(step.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]
        text = " | ".join(
            p.get("content") or p.get("response") or f"call {p.get('name')}" for p in message["parts"]
        )
        out.append((step.attributes[semconv.GEN_AI_AGENT_NAME], step_kind(step), text))
    return out


def _by_id(spans):
    return {s.context.span_id: s for s in spans.all()}


def _model_call_turns(spans) -> list[str | None]:
    """For each model call in order, the agent whose turn is its parent (and encloses it)."""
    by_id = _by_id(spans)
    found = []
    for call in sorted(
        (s for s in spans.all() if s.name == "chat scripted-model"), key=lambda s: s.start_time
    ):
        parent = by_id.get(call.parent.span_id) if call.parent else None
        if parent is not None and parent.name.startswith("invoke_agent "):
            assert parent.start_time <= call.start_time and call.end_time <= parent.end_time
            found.append(parent.attributes[semconv.GEN_AI_AGENT_NAME])
        else:
            found.append(None)
    return found


def call(name: str, number: int = 1, **arguments: str) -> Reply:
    """The model asks for one tool by function calling."""
    return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])


WRITER_ANSWER = "Thought: I can write it.\nFinal Answer: It is sunny in Paris today, 21 C."
SEQUENTIAL_SCRIPT = [
    call("lookup_weather", city="Paris"),
    "Paris: sunny, 21 C",  # a native tool-calling agent's answer is the model's text as it is
    WRITER_ANSWER,  # the writer has no tools: ReAct text
]
# a model that refuses tools: CrewAI falls back to ReAct text, the action in the model's own words
NO_TOOLS = Reply(status=400, content="scripted-model does not support tools")
ACTION = 'Thought: I need the weather.\nAction: lookup_weather\nAction Input: {"city": "Paris"}'
REACT_SCRIPT = [NO_TOOLS, ACTION, "Thought: I know it now.\nFinal Answer: Paris: sunny, 21 C", WRITER_ANSWER]


def _crew(llm: ScriptedLLM, calls: ModelCalls, tools=None):
    model = calls.llm(llm)
    researcher = crewai.Agent(
        role="researcher",
        goal="Find the facts.",
        backstory="You look things up.",
        llm=model,
        tools=tools if tools is not None else [LookupWeather()],
        allow_delegation=False,
    )
    writer = crewai.Agent(
        role="writer", goal="Write the answer.", backstory="You write.", llm=model, allow_delegation=False
    )
    research = crewai.Task(
        description=QUESTION, expected_output="the weather", agent=researcher, name="research"
    )
    write = crewai.Task(
        description="Write one sentence about it.", expected_output="a sentence", agent=writer, name="write"
    )
    return crewai.Crew(agents=[researcher, writer], tasks=[research, write], name="weather_crew")


def test_a_sequential_crew_with_a_tool(instrumented, calls):
    spans = instrumented
    with ScriptedLLM(SEQUENTIAL_SCRIPT) as llm:
        result = _crew(llm, calls).kickoff()
        assert llm.calls == 3
    assert result.raw == "It is sunny in Paris today, 21 C."
    steps = spans.steps()
    assert _summary(steps) == [
        ("researcher", "message", "call lookup_weather"),
        ("researcher", "tool", "Paris: sunny, 21 C"),
        ("researcher", "message", "Paris: sunny, 21 C"),
        ("writer", "message", "It is sunny in Paris today, 21 C."),
    ]
    assert [s.attributes[semconv.STEP_INDEX] for s in steps] == list(range(4))
    root = spans.root()
    assert root.name == "invoke_workflow weather_crew"
    assert root.attributes[semconv.TASK_FINAL_OUTPUT] == "It is sunny in Paris today, 21 C."
    assert root.attributes[semconv.INSTRUMENTATION_SOURCE] == "crewai"
    action, tool, researcher, writer = steps
    assert researcher.parent.span_id == writer.parent.span_id == root.context.span_id
    assert action.parent.span_id == tool.parent.span_id == researcher.context.span_id
    assert researcher.attributes["otel_blame.crewai.task"] == "research"
    assert researcher.attributes[semconv.GEN_AI_AGENT_DESCRIPTION] == "Find the facts."
    assert tool.name == "execute_tool lookup_weather"
    assert researcher.start_time <= action.start_time and tool.end_time <= researcher.end_time
    assert researcher.end_time <= writer.start_time
    assert _model_call_turns(spans) == ["researcher", "researcher", "writer"]
    trajectory = trajectory_from_spans(sdk_spans_to_proto(spans.all()))
    assert [(s.agent, s.kind.value) for s in trajectory.steps] == [
        ("researcher", "message"),
        ("researcher", "tool"),
        ("researcher", "message"),
        ("writer", "message"),
    ]
    assert not any(s.is_error for s in trajectory.steps)
    call_part = json.loads(action.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]
    assert (call_part["id"], json.loads(call_part["arguments"])) == ("call_1", {"city": "Paris"})


def test_a_model_without_tool_calling_writes_react_actions(instrumented, calls):
    """The model refuses tools: CrewAI goes on in ReAct text, and the action is the agent's message
    with its text and its tool call; the steps are the native run's otherwise."""
    spans = instrumented
    with ScriptedLLM(REACT_SCRIPT) as llm:
        result = _crew(llm, calls).kickoff()
        assert llm.calls == 4
    assert result.raw == "It is sunny in Paris today, 21 C."
    steps = spans.steps()
    assert _summary(steps) == [
        ("researcher", "message", ACTION + " | call lookup_weather"),
        ("researcher", "tool", "Paris: sunny, 21 C"),
        ("researcher", "message", "Paris: sunny, 21 C"),
        ("writer", "message", "It is sunny in Paris today, 21 C."),
    ]
    action, tool, researcher, writer = steps
    assert tool.name == "execute_tool lookup_weather"
    assert action.parent.span_id == tool.parent.span_id == researcher.context.span_id
    assert _model_call_turns(spans) == ["researcher"] * 3 + ["writer"]


def test_a_failing_tool_is_an_error_step(instrumented, calls):
    spans = instrumented
    script = [call("lookup_broken", city="Paris"), "The index is down: no data.", WRITER_ANSWER]
    with ScriptedLLM(script, default="Final Answer: no data") as llm:
        result = _crew(llm, calls, tools=[LookupBroken()]).kickoff()
    assert result.raw
    tools = [s for s in spans.steps() if step_kind(s) == "tool"]
    assert tools and all(s.status.status_code is StatusCode.ERROR for s in tools)
    assert all(s.attributes[semconv.ERROR_TYPE] == "ValueError" for s in tools)
    trajectory = trajectory_from_spans(sdk_spans_to_proto(spans.all()))
    assert [s.is_error for s in trajectory.steps if s.kind.value == "tool"] == [True] * len(tools)
    assert_failed_turn_is_error_step(spans, "researcher", "ValueError", kind="tool")


def test_a_tool_that_reports_a_failure_is_an_error_step(instrumented, calls):
    """CrewAI's ``ToolFailure``: the tool returns it instead of raising; the model is told, and the
    step is an error with the failure's code as ``error.type``."""
    spans = instrumented
    script = [call("lookup_archived", city="Paris"), "The archive has nothing.", WRITER_ANSWER]
    with ScriptedLLM(script) as llm:
        _crew(llm, calls, tools=[LookupArchived()]).kickoff()
        assert "no archive for Paris (code: archive_missing)" in sent_to_model(llm, 1)
    (tool,) = [s for s in spans.steps() if step_kind(s) == "tool"]
    assert tool.name == "execute_tool lookup_archived"
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.attributes[semconv.ERROR_TYPE] == "archive_missing"
    trajectory = trajectory_from_spans(sdk_spans_to_proto(spans.all()))
    assert [(s.agent, s.kind.value, s.is_error) for s in trajectory.steps][1] == ("researcher", "tool", True)
    assert trajectory.steps[1].content == "no archive for Paris (code: archive_missing)"


def test_a_function_tool_is_a_tool_step(instrumented, calls):
    """A tool made with CrewAI's ``@tool`` decorator runs through ``Tool.run``, not ``BaseTool.run``."""
    from crewai.tools import tool

    @tool("lookup_weather")
    def lookup_weather(city: str) -> str:
        """Look up today's weather for a city."""
        return f"{city}: sunny, 21 C"

    with ScriptedLLM(SEQUENTIAL_SCRIPT) as llm:
        _crew(llm, calls, tools=[lookup_weather]).kickoff()
    assert _summary(instrumented.steps())[:2] == [
        ("researcher", "message", "call lookup_weather"),
        ("researcher", "tool", "Paris: sunny, 21 C"),
    ]


def test_delegation_is_a_tool_step_with_the_coworkers_turn_inside(instrumented, calls):
    spans = instrumented
    delegate = call(
        "delegate_work_to_coworker", task="Find the weather in Paris", context="today", coworker="researcher"
    )
    script = [
        delegate,
        "Thought: easy.\nFinal Answer: Paris: sunny, 21 C",  # the researcher has no tools: ReAct text
        "Sunny in Paris, 21 C.",
    ]
    with ScriptedLLM(script) as llm:
        model = calls.llm(llm)
        researcher = crewai.Agent(
            role="researcher", goal="Find facts.", backstory="b", llm=model, allow_delegation=False
        )
        manager = crewai.Agent(role="lead", goal="Answer.", backstory="b", llm=model, allow_delegation=True)
        job = crewai.Task(description=QUESTION, expected_output="the weather", agent=manager)
        result = crewai.Crew(agents=[manager, researcher], tasks=[job]).kickoff()
    assert result.raw == "Sunny in Paris, 21 C."
    summary = _summary(spans.steps())
    assert [(a, k) for a, k, _ in summary] == [
        ("lead", "message"),  # the action: delegate
        ("researcher", "message"),  # the coworker's answer
        ("lead", "tool"),  # the delegation tool's result
        ("lead", "message"),  # the lead's final answer
    ]
    by_name = {s.name: s for s in spans.steps()}
    delegation = by_name["execute_tool Delegate work to coworker"]
    coworker = by_name["invoke_agent researcher"]
    assert coworker.parent.span_id == delegation.context.span_id
    assert _model_call_turns(spans) == ["lead", "researcher", "lead"]
    # the call names the CrewAI tool, as its run does, not the function name the model used
    call_part = json.loads(spans.steps()[0].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]
    assert call_part["name"] == "Delegate work to coworker"


def test_a_failed_crew_run_raises_unchanged_and_has_a_trajectory(spans, calls):
    def run():
        with ScriptedLLM([Reply(status=400, content="bad request")]) as llm:
            with pytest.raises(Exception) as caught:
                _crew(llm, calls).kickoff()
        return caught.value

    plain = run()
    spans.exporter.clear()  # the plain run's model-call probes
    instrumentor = CrewAIInstrumentor()
    instrumentor.instrument(tracer_provider=spans.provider)
    try:
        hooked = run()
    finally:
        instrumentor.uninstrument()
    assert type(hooked) is type(plain) and str(hooked) == str(plain)
    root = spans.root()
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes[semconv.ERROR_TYPE] == type(hooked).__qualname__
    turn = next(s for s in spans.all() if s.name == "invoke_agent researcher")
    assert turn.status.status_code is StatusCode.ERROR and turn.parent.span_id == root.context.span_id
    # issue 11: a failed CrewAI run under our instrumentation is a trace with agent spans
    trajectory = trajectory_from_spans(sdk_spans_to_proto(spans.all()))
    assert trajectory.outcome.value == "failure"
    assert [(s.agent, s.is_error) for s in trajectory.steps] == [("researcher", True)]
    assert trajectory.steps[0].content.startswith(type(hooked).__name__)
    assert_failed_turn_is_error_step(spans, "researcher", type(hooked).__qualname__)
    # CrewAI retries a failed task (execute_task calls itself): the retries stay inside one turn
    assert len([s for s in spans.all() if s.name == "invoke_agent researcher"]) == 1


def test_inside_a_user_task_the_crew_joins_it(instrumented, calls):
    with ScriptedLLM(SEQUENTIAL_SCRIPT) as llm:
        with task("weather", input=QUESTION):
            _crew(llm, calls).kickoff()
    root = instrumented.root()
    assert root.name == "invoke_workflow weather"
    assert [a for a, _, _ in _summary(instrumented.steps())] == ["researcher"] * 3 + ["writer"]


def test_uninstrument_restores_every_patched_function(spans, calls):
    from crewai.agent.core import Agent
    from crewai.agents import agent_executor
    from crewai.crew import Crew
    from crewai.tools.base_tool import Tool
    from crewai.tools.structured_tool import CrewStructuredTool

    patched = [(Crew, "kickoff"), (Agent, "execute_task"), (CrewStructuredTool, "invoke")]
    patched += [(CrewStructuredTool, "ainvoke"), (agent_executor, "execute_tool_and_check_finality")]
    patched += [(agent_executor.AgentExecutor, "execute_native_tool"), (BaseTool, "run"), (Tool, "run")]
    originals = [vars(owner)[name] for owner, name in patched]
    instrumentor = CrewAIInstrumentor()
    instrumentor.instrument(tracer_provider=spans.provider)
    assert all(vars(owner)[name] is not o for (owner, name), o in zip(patched, originals, strict=True))
    instrumentor.uninstrument()
    assert all(vars(owner)[name] is o for (owner, name), o in zip(patched, originals, strict=True))
    with ScriptedLLM(SEQUENTIAL_SCRIPT) as llm:
        _crew(llm, calls).kickoff()
    assert spans.steps() == [] and spans.roots() == []


def test_an_unsupported_version_is_skipped_with_one_warning(spans, caplog, monkeypatch):
    from crewai.crew import Crew

    monkeypatch.setattr(CrewAIInstrumentor, "instruments", ("crewai >= 99",))
    original = vars(Crew)["kickoff"]
    instrumentor = CrewAIInstrumentor()
    with caplog.at_level(logging.WARNING):
        instrumentor.instrument(tracer_provider=spans.provider)
    try:
        assert vars(Crew)["kickoff"] is original and instrumentor.patched == []
        messages = [r.getMessage() for r in caplog.records if "crewai >= 99" in r.getMessage()]
        assert len(messages) == 1, messages
    finally:
        instrumentor.uninstrument()


def test_a_hook_error_does_not_break_the_crew(instrumented, calls, monkeypatch):
    from otel_blame.instrumentation.crewai import _hooks

    def broken(*args, **kwargs):
        raise RuntimeError("bug in otel-blame")

    monkeypatch.setattr(_hooks, "record_message", broken)
    before = hook_error_count()
    with ScriptedLLM(SEQUENTIAL_SCRIPT) as llm:
        result = _crew(llm, calls).kickoff()
    assert result.raw == "It is sunny in Paris today, 21 C."
    assert hook_error_count() > before
    # what did not depend on the broken helper is still recorded: the turns and the tool run
    assert [(a, k) for a, k, _ in _summary(instrumented.steps())] == [
        ("researcher", "tool"),
        ("researcher", "message"),
        ("writer", "message"),
    ]


# -- the message path -----------------------------------------------------------------------------


def test_the_message_path_changes_what_the_tool_and_the_next_agent_get(instrumented, calls):
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import Rewriter

    spans = instrumented
    rewriter = Rewriter(
        ("tool_call", "researcher", "Paris", "Rome"),
        ("tool", "researcher", "sunny", "rainy"),
        ("message", "researcher", "21 C", "12 C"),
    )
    with ScriptedLLM(SEQUENTIAL_SCRIPT) as llm, intercept_messages(rewriter):
        result = _crew(llm, calls).kickoff()
        assert "Rome: rainy, 21 C" in sent_to_model(llm, 1)  # the tool ran on Rome; the model got the change
        # the changed call is also the one in the researcher's history
        (asked,) = [m for m in llm.requests[1]["messages"] if m.get("tool_calls")]
        assert json.loads(asked["tool_calls"][0]["function"]["arguments"]) == {"city": "Rome"}
        assert "Paris: sunny, 12 C" in sent_to_model(llm, 2)  # the writer got the researcher's changed answer
    assert rewriter.unused == []
    assert result.tasks_output[0].raw == "Paris: sunny, 12 C"
    summary = _summary(spans.steps())
    assert summary[1] == ("researcher", "tool", "Rome: rainy, 21 C")
    assert summary[2] == ("researcher", "message", "Paris: sunny, 12 C")
    assert [(o.kind, o.step) for o in rewriter.changed] == [("tool_call", 0), ("tool", 1), ("message", 2)]
    assert {o.framework for o in rewriter.seen} == {"crewai"}


def test_an_interceptor_that_raises_changes_nothing(instrumented, calls):
    from otel_blame.instrumentation._safety import HOOK_ERRORS
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import raising

    with ScriptedLLM(SEQUENTIAL_SCRIPT) as llm, intercept_messages(raising):
        result = _crew(llm, calls).kickoff()
    assert result.raw == "It is sunny in Paris today, 21 C."
    assert [s[2] for s in _summary(instrumented.steps())][1:] == [
        "Paris: sunny, 21 C",
        "Paris: sunny, 21 C",
        "It is sunny in Paris today, 21 C.",
    ]
    assert set(HOOK_ERRORS.by_site()) == {"intercept"}


# -- both shapes of the GenAI conventions ----------------------------------------------------------


@SHAPES
def test_both_convention_shapes_read_back_the_same(instrumented, calls, latest):
    """A sequential crew with a tool, then one whose tool raises."""
    broken = [
        call("lookup_broken", city="Paris"),
        "The index is down: no data.",
        "Final Answer: No data today.",
    ]

    def run() -> None:
        with ScriptedLLM(SEQUENTIAL_SCRIPT) as llm:
            _crew(llm, calls).kickoff()
        with ScriptedLLM(broken, default="Final Answer: no data") as llm:
            _crew(llm, calls, tools=[LookupBroken()]).kickoff()

    crew, broken_crew = read_back(instrumented, latest, run)
    assert [(s[0], s[2], s[6]) for s in crew["steps"]] == [
        ("researcher", "message", False),
        ("researcher", "tool", False),
        ("researcher", "message", False),
        ("writer", "message", False),
    ]
    assert crew["steps"][1][3:5] == ("Paris: sunny, 21 C", "lookup_weather")
    assert crew["task"][0] == "weather_crew" and crew["task"][4] == "It is sunny in Paris today, 21 C."
    tools = [s for s in broken_crew["steps"] if s[2] == "tool"]
    assert tools and all(s[6] and "index offline" in s[3] for s in tools)
    assert {f[:2] for f in broken_crew["dependency_failures"]} == {("lookup_broken", "tool_error")}
