"""Microsoft AutoGen AgentChat (``autogen-agentchat``) through ``AgentChatInstrumentor``: real teams
(RoundRobinGroupChat, SelectorGroupChat, Swarm), real tools and handoffs, the real OpenAI client of
``autogen-ext`` against the scripted server."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from otel_blame import semconv
from otel_blame.conventions import sdk_spans_to_proto, trajectory_from_spans
from otel_blame.instrumentation import hook_error_count, task
from tests.instrument.failed_turns import assert_failed_turn_is_error_step
from tests.instrument.shapes import SHAPES, read_back
from tests.instrument.steps import step_kind
from tests.support import Reply, ScriptedLLM

pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext.models.openai")

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.base import TaskResult  # noqa: E402
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination  # noqa: E402
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat, Swarm  # noqa: E402
from autogen_core.models import ModelFamily, ModelInfo  # noqa: E402
from autogen_ext.models.openai import OpenAIChatCompletionClient  # noqa: E402

from otel_blame.instrumentation.agentchat import AgentChatInstrumentor  # noqa: E402

QUESTION = "What is the weather in Paris?"
MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    family=ModelFamily.UNKNOWN,
    structured_output=False,
)


def lookup_weather(city: str) -> str:
    """Look up today's weather for a city."""
    return f"{city}: sunny, 21 C"


def lookup_broken(city: str) -> str:
    """Look up something from an index that is offline."""
    raise ValueError("index offline")


class ModelCalls:
    """Every HTTP request the model client sends, as a span made where the request is made: its
    parent is whatever span was current then (what the contrib openai-v2 instrumentation sees)."""

    def __init__(self, provider) -> None:
        self.tracer = provider.get_tracer("model-call-probe")

    async def on_request(self, request: httpx.Request) -> None:
        span = self.tracer.start_span("chat scripted-model", attributes={"gen_ai.operation.name": "chat"})
        span.end()

    def client(self, llm: ScriptedLLM, max_retries: int = 0) -> OpenAIChatCompletionClient:
        return OpenAIChatCompletionClient(
            model="scripted-model",
            base_url=llm.base_url,
            api_key="test-key",
            model_info=MODEL_INFO,
            max_retries=max_retries,
            parallel_tool_calls=False,
            http_client=httpx.AsyncClient(event_hooks={"request": [self.on_request]}),
        )


@pytest.fixture(autouse=True)
def no_global_tracer_provider(monkeypatch) -> None:
    """Each test starts with OpenTelemetry's default: no process-wide tracer provider.

    autogen-core's runtime and AgentChat trace through the *global* provider (``autogen send`` /
    ``process`` spans, their own ``invoke_agent``), and carry the trace context across the runtime's
    asyncio tasks in each message envelope. Without a global provider those spans are non-recording
    and pass the publisher's span on unchanged, so a turn's parent is our root. Once anything in the
    same process installs a global provider for good (``logfire.configure`` in an earlier test did),
    their spans become real, sit between our root and our turns, and are exported elsewhere: the
    parent ids these tests compare then differ. That (not load) made two tests fail in full runs.
    The layout under a global provider is checked on its own below."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)


@pytest.fixture
def instrumented(spans, monkeypatch) -> Iterator:
    monkeypatch.delenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", raising=False)
    instrumentor = AgentChatInstrumentor()
    instrumentor.instrument(tracer_provider=spans.provider)
    yield spans
    instrumentor.uninstrument()


@pytest.fixture
def calls(spans) -> ModelCalls:
    return ModelCalls(spans.provider)


def _summary(steps) -> list[tuple[str, str, str, str]]:
    out = []
    for step in steps:
        text = ""
        if semconv.GEN_AI_OUTPUT_MESSAGES in step.attributes:
            message = json.loads(step.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]
            text = " | ".join(
                p.get("content") or p.get("response") or f"call {p.get('name')}" for p in message["parts"]
            )
        out.append((step.attributes[semconv.GEN_AI_AGENT_NAME], step_kind(step), step.name, text))
    return out


def _trajectory(spans):
    return trajectory_from_spans(sdk_spans_to_proto(spans.all()))


def _model_calls(spans):
    probes = (s for s in spans.all() if s.instrumentation_scope.name == "model-call-probe")
    return sorted(probes, key=lambda s: s.start_time)


def _by_id(spans):
    return {s.context.span_id: s for s in spans.all()}


def _assert_model_calls_nest_under_turns(spans, expected_agents: list[str | None]) -> None:
    """Each model call's parent is the turn of the agent that made it (None: not a turn, e.g. the
    selector), and that turn's span encloses the call."""
    by_id = _by_id(spans)
    found = []
    for call in _model_calls(spans):
        parent = by_id.get(call.parent.span_id) if call.parent else None
        if parent is not None and parent.attributes.get(semconv.GEN_AI_OPERATION_NAME) == "invoke_agent":
            assert parent.start_time <= call.start_time and call.end_time <= parent.end_time
            found.append(parent.attributes[semconv.GEN_AI_AGENT_NAME])
        else:
            found.append(None)
    assert found == expected_agents


# -- RoundRobinGroupChat: a tool, two agents ----------------------------------------------------

ROUND_ROBIN_SCRIPT = [
    Reply(tool_calls=[{"id": "call_1", "name": "lookup_weather", "arguments": {"city": "Paris"}}]),
    "APPROVE: sunny it is.",
]
ROUND_ROBIN_STEPS = [
    ("user", "message", "invoke_agent user", QUESTION),
    ("researcher", "message", "invoke_agent researcher", "call lookup_weather"),
    ("researcher", "tool", "execute_tool lookup_weather", "Paris: sunny, 21 C"),
    ("researcher", "message", "invoke_agent researcher", "Paris: sunny, 21 C"),
    ("reviewer", "message", "invoke_agent reviewer", "APPROVE: sunny it is."),
]


def _round_robin(llm: ScriptedLLM, calls: ModelCalls) -> RoundRobinGroupChat:
    researcher = AssistantAgent(
        "researcher", model_client=calls.client(llm), tools=[lookup_weather], description="Finds facts."
    )
    reviewer = AssistantAgent("reviewer", model_client=calls.client(llm), description="Checks the answer.")
    return RoundRobinGroupChat(
        [researcher, reviewer], termination_condition=TextMentionTermination("APPROVE"), name="weather_team"
    )


def test_round_robin_turns_are_envelopes_with_tools_under_them(instrumented, calls):
    spans = instrumented
    with ScriptedLLM(ROUND_ROBIN_SCRIPT) as llm:
        result = asyncio.run(_round_robin(llm, calls).run(task=QUESTION))
        assert llm.calls == 2
    assert [type(m).__name__ for m in result.messages] == [
        "TextMessage",
        "ToolCallRequestEvent",
        "ToolCallExecutionEvent",
        "ToolCallSummaryMessage",
        "TextMessage",
    ]
    steps = spans.steps()
    assert _summary(steps) == ROUND_ROBIN_STEPS
    assert [s.attributes[semconv.STEP_INDEX] for s in steps] == list(range(len(steps)))

    root = spans.root()
    assert root.name == "invoke_workflow weather_team"
    assert root.attributes[semconv.TASK_INPUT] == QUESTION
    assert root.attributes[semconv.TASK_FINAL_OUTPUT] == "APPROVE: sunny it is."
    assert root.attributes[semconv.INSTRUMENTATION_SOURCE] == "agentchat"
    assert len({s.context.trace_id for s in spans.all()}) == 1

    # the turns are children of the root; the tool request and the tool run are children of the turn
    user, request, tool, researcher_turn, reviewer_turn = steps
    for step in (user, researcher_turn, reviewer_turn):
        assert step.parent.span_id == root.context.span_id
    assert request.parent.span_id == researcher_turn.context.span_id
    assert tool.parent.span_id == researcher_turn.context.span_id
    assert tool.attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert researcher_turn.attributes[semconv.GEN_AI_AGENT_DESCRIPTION] == "Finds facts."
    # the turn lasts as long as the agent worked: it encloses its tool run and its model call
    assert researcher_turn.start_time <= request.start_time and tool.end_time <= researcher_turn.end_time
    assert researcher_turn.end_time <= reviewer_turn.start_time
    _assert_model_calls_nest_under_turns(spans, ["researcher", "reviewer"])

    trajectory = _trajectory(spans)
    assert [(s.agent, s.kind.value) for s in trajectory.steps] == [(a, k) for a, k, _, _ in ROUND_ROBIN_STEPS]
    assert trajectory.steps[1].content == 'tool_call lookup_weather({"city": "Paris"})'
    assert trajectory.steps[2].tool_name == "lookup_weather"
    assert trajectory.task.input == QUESTION
    assert not any(s.is_error for s in trajectory.steps)


# -- Swarm: handoffs ---------------------------------------------------------------------------------

SWARM_SCRIPT = [
    Reply(tool_calls=[{"id": "call_h1", "name": "transfer_to_researcher", "arguments": {}}]),
    Reply(tool_calls=[{"id": "call_t1", "name": "lookup_weather", "arguments": {"city": "Paris"}}]),
    Reply(tool_calls=[{"id": "call_h2", "name": "transfer_to_writer", "arguments": {}}]),
    "Paris is sunny, 21 C. TERMINATE",
]


def _swarm(llm: ScriptedLLM, calls: ModelCalls) -> Swarm:
    triage = AssistantAgent("triage", model_client=calls.client(llm), handoffs=["researcher"])
    researcher = AssistantAgent(
        "researcher", model_client=calls.client(llm), tools=[lookup_weather], handoffs=["writer"]
    )
    writer = AssistantAgent("writer", model_client=calls.client(llm))
    return Swarm([triage, researcher, writer], termination_condition=TextMentionTermination("TERMINATE"))


def test_swarm_handoffs_are_steps_of_the_agent_handing_off(instrumented, calls):
    spans = instrumented
    with ScriptedLLM(SWARM_SCRIPT) as llm:
        result = asyncio.run(_swarm(llm, calls).run(task=QUESTION))
        assert llm.calls == 4
    assert result.messages[-1].content == "Paris is sunny, 21 C. TERMINATE"
    handoff_text = "Transferred to {}, adopting the role of {} immediately."
    expected = [
        ("user", "message", QUESTION),
        ("triage", "message", "call transfer_to_researcher"),
        ("triage", "tool", handoff_text.format("researcher", "researcher")),
        ("triage", "message", handoff_text.format("researcher", "researcher")),
        ("researcher", "message", "call lookup_weather"),
        ("researcher", "tool", "Paris: sunny, 21 C"),
        ("researcher", "message", "Paris: sunny, 21 C"),
        ("researcher", "message", "call transfer_to_writer"),
        ("researcher", "tool", handoff_text.format("writer", "writer")),
        ("researcher", "message", handoff_text.format("writer", "writer")),
        ("writer", "message", "Paris is sunny, 21 C. TERMINATE"),
    ]
    steps = spans.steps()
    assert [(a, k, t) for a, k, _, t in _summary(steps)] == expected
    # one step per message AgentChat reports, in its order, by the same agents
    assert [m.source for m in result.messages] == [s.attributes[semconv.GEN_AI_AGENT_NAME] for s in steps]
    handoffs = [s for s in steps if s.attributes.get("otel_blame.agentchat.handoff_target")]
    assert [
        (s.attributes[semconv.GEN_AI_AGENT_NAME], s.attributes["otel_blame.agentchat.handoff_target"])
        for s in handoffs
    ] == [
        ("triage", "researcher"),
        ("researcher", "writer"),
    ]
    assert spans.root().name == "invoke_workflow Swarm"
    _assert_model_calls_nest_under_turns(spans, ["triage", "researcher", "researcher", "writer"])
    trajectory = _trajectory(spans)
    assert [s.agent for s in trajectory.steps] == [a for a, _, _ in expected]
    assert [s.tool_name for s in trajectory.steps if s.kind.value == "tool"] == [
        "transfer_to_researcher",
        "lookup_weather",
        "transfer_to_writer",
    ]


# -- SelectorGroupChat: the selector's model calls are not steps ----------------------------------


def test_selector_group_chat_inside_a_user_task(instrumented, calls):
    spans = instrumented
    script = ["planner", "Plan: check 97.", "analyst", "97 is prime.", "planner", "Done. TERMINATE"]

    async def main(llm):
        planner = AssistantAgent("planner", model_client=calls.client(llm), description="Plans.")
        analyst = AssistantAgent("analyst", model_client=calls.client(llm), description="Analyses.")
        team = SelectorGroupChat(
            [planner, analyst],
            model_client=calls.client(llm),
            termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(8),
            allow_repeated_speaker=True,
        )
        async with task("primality", input="Is 97 prime?"):
            return [item async for item in team.run_stream(task="Is 97 prime?")]

    with ScriptedLLM(script) as llm:
        items = asyncio.run(main(llm))
        assert llm.calls == 6
    assert isinstance(items[-1], TaskResult)
    assert [(a, t) for a, _, _, t in _summary(spans.steps())] == [
        ("user", "Is 97 prime?"),
        ("planner", "Plan: check 97."),
        ("analyst", "97 is prime."),
        ("planner", "Done. TERMINATE"),
    ]
    root = spans.root()
    assert root.name == "invoke_workflow primality"  # the app's task: no root of ours
    assert semconv.TASK_FINAL_OUTPUT not in root.attributes
    _assert_model_calls_nest_under_turns(spans, [None, "planner", None, "analyst", None, "planner"])


# -- failures ------------------------------------------------------------------------------------------


def test_a_failing_tool_is_an_error_step_and_the_run_goes_on(instrumented, calls):
    spans = instrumented
    script = [Reply(tool_calls=[{"id": "c1", "name": "lookup_broken", "arguments": {"city": "Paris"}}])]
    with ScriptedLLM(script) as llm:
        agent = AssistantAgent("searcher", model_client=calls.client(llm), tools=[lookup_broken])
        result = asyncio.run(agent.run(task="find it"))
    assert result.messages[-1].content == "index offline"
    steps = spans.steps()
    assert [(a, k) for a, k, _, _ in _summary(steps)] == [
        ("user", "message"),
        ("searcher", "message"),
        ("searcher", "tool"),
        ("searcher", "message"),
    ]
    tool = steps[2]
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.attributes[semconv.ERROR_TYPE] == "ValueError"
    assert spans.root().name == "invoke_workflow searcher"
    trajectory = _trajectory(spans)
    assert [s.is_error for s in trajectory.steps] == [False, False, True, False]


async def _failing_run(llm: ScriptedLLM, calls: ModelCalls):
    team = RoundRobinGroupChat(
        [AssistantAgent("fragile", model_client=calls.client(llm))],
        termination_condition=MaxMessageTermination(3),
    )
    with pytest.raises(Exception) as caught:
        await team.run(task="hello")
    return caught.value


def test_the_apps_exceptions_pass_through_and_the_failed_run_has_a_trajectory(spans, calls, monkeypatch):
    with ScriptedLLM([Reply(status=400, content="bad request")]) as llm:
        plain = asyncio.run(_failing_run(llm, calls))
    assert spans.all() == [] or all(s.name == "chat scripted-model" for s in spans.all())
    spans.exporter.clear()

    instrumentor = AgentChatInstrumentor()
    instrumentor.instrument(tracer_provider=spans.provider)
    try:
        with ScriptedLLM([Reply(status=400, content="bad request")]) as llm:
            hooked = asyncio.run(_failing_run(llm, calls))
    finally:
        instrumentor.uninstrument()
    # AgentChat re-raises an agent's error as its own, with the traceback in the message
    assert type(hooked) is type(plain)
    assert (
        str(hooked).splitlines()[0]
        == str(plain).splitlines()[0]
        == "BadRequestError: Error code: 400 - bad request"
    )

    root = spans.root()
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes[semconv.TASK_OUTCOME] == "failure"
    assert root.attributes[semconv.ERROR_TYPE] == type(hooked).__qualname__
    # the turn that raised is an error step of its agent, under the root, enclosing its model call
    turn = next(s for s in spans.all() if s.name == "invoke_agent fragile")
    assert turn.status.status_code is StatusCode.ERROR
    assert turn.attributes[semconv.ERROR_TYPE] == "BadRequestError"
    assert turn.parent.span_id == root.context.span_id
    _assert_model_calls_nest_under_turns(spans, ["fragile"])
    assert_failed_turn_is_error_step(spans, "fragile", "BadRequestError")
    trajectory = _trajectory(spans)
    assert trajectory.outcome.value == "failure"
    assert [(s.agent, s.is_error) for s in trajectory.steps] == [("user", False), ("fragile", True)]
    assert trajectory.steps[1].content.startswith("BadRequestError: Error code: 400")


def test_a_hook_error_does_not_break_the_run(instrumented, calls, monkeypatch):
    from otel_blame.instrumentation.agentchat import _hooks

    def broken(*args, **kwargs):
        raise RuntimeError("bug in otel-blame")

    monkeypatch.setattr(_hooks, "record_message", broken)
    monkeypatch.setattr(_hooks, "_message_text", broken)
    before = hook_error_count()
    with ScriptedLLM(ROUND_ROBIN_SCRIPT) as llm:
        result = asyncio.run(_round_robin(llm, calls).run(task=QUESTION))
    assert result.messages[-1].content == "APPROVE: sunny it is."
    assert hook_error_count() > before
    # what did not depend on the broken helpers is still recorded: the turns and the tool run
    assert [(a, k) for a, k, _, _ in _summary(instrumented.steps())] == [
        ("researcher", "tool"),
        ("researcher", "message"),
        ("reviewer", "message"),
    ]
    assert instrumented.root().status.status_code is not StatusCode.ERROR


# -- the instrumentor's contract ----------------------------------------------------------------------


def test_uninstrument_restores_every_patched_function(spans, calls):
    from autogen_agentchat import agents as agentchat_agents
    from autogen_agentchat.agents import BaseChatAgent
    from autogen_agentchat.teams import BaseGroupChat
    from autogen_core.tools import BaseTool

    patched = [(BaseGroupChat, "run_stream"), (BaseChatAgent, "run"), (BaseChatAgent, "run_stream")]
    patched += [(BaseTool, "run_json")]
    for name in (
        "BaseChatAgent",
        "AssistantAgent",
        "CodeExecutorAgent",
        "UserProxyAgent",
        "SocietyOfMindAgent",
    ):
        patched.append((getattr(agentchat_agents, name), "on_messages_stream"))
    originals = [vars(owner)[name] for owner, name in patched]
    instrumentor = AgentChatInstrumentor()
    instrumentor.instrument(tracer_provider=spans.provider)
    assert all(vars(owner)[name] is not o for (owner, name), o in zip(patched, originals, strict=True))
    instrumentor.uninstrument()
    assert all(vars(owner)[name] is o for (owner, name), o in zip(patched, originals, strict=True))
    with ScriptedLLM(ROUND_ROBIN_SCRIPT) as llm:
        asyncio.run(_round_robin(llm, calls).run(task=QUESTION))
    assert spans.steps() == [] and spans.roots() == []


def test_an_unsupported_version_is_skipped_with_one_warning(spans, caplog, monkeypatch):
    from autogen_agentchat.teams import BaseGroupChat

    monkeypatch.setattr(AgentChatInstrumentor, "instruments", ("autogen-agentchat >= 99",))
    original = vars(BaseGroupChat)["run_stream"]
    instrumentor = AgentChatInstrumentor()
    with caplog.at_level(logging.WARNING):
        instrumentor.instrument(tracer_provider=spans.provider)
    try:
        assert vars(BaseGroupChat)["run_stream"] is original
        messages = [r.getMessage() for r in caplog.records if "autogen-agentchat" in r.getMessage()]
        assert len(messages) == 1, messages
        assert "autogen-agentchat >= 99" in messages[0]
        assert instrumentor.patched == []
    finally:
        instrumentor.uninstrument()


def test_no_trace_context_leaks_into_the_caller(instrumented, calls):
    with ScriptedLLM(ROUND_ROBIN_SCRIPT) as llm:

        async def main():
            before = trace.get_current_span()
            await _round_robin(llm, calls).run(task=QUESTION)
            return before, trace.get_current_span()

        before, after = asyncio.run(main())
    assert after is before


def test_with_the_contrib_openai_v2_instrumentation_chat_spans_nest_under_the_turns(instrumented, calls):
    """The contrib ``opentelemetry-instrumentation-openai-v2`` on as well: each of its ``chat`` spans
    is a child of the turn of the agent that made the call, and inside that turn's time."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    spans = instrumented
    openai_v2 = OpenAIInstrumentor()
    openai_v2.instrument(tracer_provider=spans.provider)
    try:
        with ScriptedLLM(ROUND_ROBIN_SCRIPT) as llm:
            asyncio.run(_round_robin(llm, calls).run(task=QUESTION))
    finally:
        openai_v2.uninstrument()
    by_id = _by_id(spans)
    chats = sorted(
        (
            s
            for s in spans.all()
            if s.attributes.get(semconv.GEN_AI_OPERATION_NAME) == "chat"
            and s.instrumentation_scope.name != "model-call-probe"
        ),
        key=lambda s: s.start_time,
    )
    assert len(chats) == 2
    turns = [by_id[c.parent.span_id] for c in chats]
    assert [t.attributes[semconv.GEN_AI_AGENT_NAME] for t in turns] == ["researcher", "reviewer"]
    assert all(t.name.startswith("invoke_agent ") for t in turns)
    assert all(
        t.start_time <= c.start_time and c.end_time <= t.end_time for t, c in zip(turns, chats, strict=True)
    )
    # the steps are unchanged by the second instrumentation: no duplicate steps
    assert _summary(spans.steps()) == ROUND_ROBIN_STEPS
    assert [(s.agent, s.kind.value) for s in _trajectory(spans).steps] == [
        (a, k) for a, k, _, _ in ROUND_ROBIN_STEPS
    ]


def test_with_a_global_tracer_provider_turns_nest_under_agentchats_own_spans(
    instrumented, calls, monkeypatch
):
    """The app's provider installed process-wide (the usual set-up): autogen-core's runtime spans and
    AgentChat's own ``invoke_agent`` span are real and in the same trace; each of our turns is a child
    of AgentChat's span of the same agent, the steps are unchanged, and every step still descends
    from our root."""
    spans = instrumented
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", spans.provider)
    with ScriptedLLM(ROUND_ROBIN_SCRIPT) as llm:
        asyncio.run(_round_robin(llm, calls).run(task=QUESTION))
    assert _summary(spans.steps()) == ROUND_ROBIN_STEPS
    by_id = _by_id(spans)
    root = spans.root()
    assert any(s.name.startswith("autogen process") for s in spans.all())  # the runtime's spans are real

    def ancestors(span):
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            yield span

    steps = spans.steps()
    assert all(root in list(ancestors(step)) for step in steps)
    user, request, tool, researcher_turn, reviewer_turn = steps
    for turn in (researcher_turn, reviewer_turn):
        agentchats = by_id[turn.parent.span_id]  # AgentChat's own span of the same agent turn
        assert (agentchats.instrumentation_scope.name, agentchats.name) == ("autogen-core", turn.name)
    assert request.parent.span_id == tool.parent.span_id == researcher_turn.context.span_id
    _assert_model_calls_nest_under_turns(spans, ["researcher", "reviewer"])


# -- the message path -----------------------------------------------------------------------------


def test_the_message_path_changes_what_the_tool_and_the_next_agent_get(instrumented, calls):
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import Rewriter, sent_to_model

    spans = instrumented
    rewriter = Rewriter(
        ("tool_call", "researcher", "Paris", "Rome"), ("tool", "researcher", "sunny", "rainy")
    )
    with ScriptedLLM(ROUND_ROBIN_SCRIPT) as llm, intercept_messages(rewriter):
        result = asyncio.run(_round_robin(llm, calls).run(task=QUESTION))
        assert "Rome: rainy, 21 C" in sent_to_model(llm, 1)  # the reviewer got the changed result
    assert rewriter.unused == []
    assert result.messages[1].content[0].arguments == '{"city": "Rome"}'
    summary = _summary(spans.steps())
    assert summary[2] == ("researcher", "tool", "execute_tool lookup_weather", "Rome: rainy, 21 C")
    assert [(o.kind, o.step) for o in rewriter.changed] == [("tool_call", 1), ("tool", 2)]
    assert {o.framework for o in rewriter.seen} == {"agentchat"}


def test_a_changed_message_reaches_the_next_agent(instrumented, calls):
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import Rewriter, sent_to_model

    script = ["Paris is sunny.", "APPROVE: sunny it is."]
    rewriter = Rewriter(("message", "researcher", "sunny", "snowy"))
    with ScriptedLLM(script) as llm, intercept_messages(rewriter):
        result = asyncio.run(_round_robin(llm, calls).run(task=QUESTION))
        assert "Paris is snowy." in sent_to_model(llm, 1) and "Paris is sunny." not in sent_to_model(llm, 1)
    assert result.messages[1].content == "Paris is snowy."
    assert _summary(instrumented.steps())[1][3] == "Paris is snowy."


def test_an_interceptor_that_raises_changes_nothing(instrumented, calls):
    from otel_blame.instrumentation._safety import HOOK_ERRORS
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import raising

    with ScriptedLLM(ROUND_ROBIN_SCRIPT) as llm, intercept_messages(raising):
        asyncio.run(_round_robin(llm, calls).run(task=QUESTION))
    assert _summary(instrumented.steps()) == ROUND_ROBIN_STEPS
    assert set(HOOK_ERRORS.by_site()) == {"intercept"}


# -- both shapes of the GenAI conventions ----------------------------------------------------------


@SHAPES
def test_both_convention_shapes_read_back_the_same(instrumented, calls, latest):
    """A round robin with a tool, then an agent whose tool raises."""
    broken = [Reply(tool_calls=[{"id": "c1", "name": "lookup_broken", "arguments": {"city": "Paris"}}])]

    def run() -> None:
        with ScriptedLLM(ROUND_ROBIN_SCRIPT) as llm:
            asyncio.run(_round_robin(llm, calls).run(task=QUESTION))
        with ScriptedLLM(broken) as llm:
            agent = AssistantAgent("searcher", model_client=calls.client(llm), tools=[lookup_broken])
            asyncio.run(agent.run(task="find it"))

    team, searcher = read_back(instrumented, latest, run)
    assert [(s[0], s[2], s[3]) for s in team["steps"]] == [
        (agent, kind, text if kind != "message" or not text.startswith("call ") else _TOOL_CALL_TEXT)
        for agent, kind, _, text in ROUND_ROBIN_STEPS
    ]
    assert [(s[0], s[2], s[3], s[6]) for s in searcher["steps"]] == [
        ("user", "message", "find it", False),
        ("searcher", "message", 'tool_call lookup_broken({"city": "Paris"})', False),
        ("searcher", "tool", "ValueError: index offline", True),
        ("searcher", "message", "index offline", False),
    ]
    assert searcher["dependency_failures"] == [("lookup_broken", "tool_error", "ValueError", 2)]


_TOOL_CALL_TEXT = 'tool_call lookup_weather({"city": "Paris"})'
