"""Classic ``autogen`` (AG2 0.x) through the instrumentor: real agents, real openai client, scripted LLM."""

from __future__ import annotations

import asyncio
import json

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import StatusCode

from otel_blame import semconv
from otel_blame.conventions import trajectory_from_spans
from otel_blame.instrumentation import hook_error_count, set_outcome, task
from tests.instrument.failed_turns import assert_failed_turn_is_error_step
from tests.instrument.shapes import SHAPES, read_back
from tests.instrument.steps import step_kind
from tests.support import RecordingOTLPSink, ScriptedLLM

from .autogen_fixtures import QUESTION, SCRIPT, build_group_chat, llm_config

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _text(span) -> str:
    message = json.loads(span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]
    return "".join(part.get("content", "") for part in message["parts"])


def _chat_history_matches(steps, history) -> None:
    assert len(steps) == len(history)
    for step, message in zip(steps, history, strict=True):
        assert step.attributes[semconv.GEN_AI_AGENT_NAME] == message["name"]
        assert _text(step) == message["content"]


def _manager_turn(spans, root):
    """The group chat manager's turn: an ``invoke_agent`` span without a step, under the root."""
    (manager,) = [s for s in spans.all() if s.name == "invoke_agent chat_manager"]
    assert semconv.STEP_INDEX not in manager.attributes and manager.parent.span_id == root.context.span_id
    return manager


def test_group_chat_with_code_executor_one_span_per_message(instrumented, tmp_path):
    spans = instrumented
    with ScriptedLLM(SCRIPT) as llm, RecordingOTLPSink() as sink:
        exporter = OTLPSpanExporter(endpoint=sink.endpoint, insecure=True, timeout=10)
        spans.provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
        chat = build_group_chat(llm, tmp_path)
        result = chat.planner.initiate_chat(chat.manager, message=QUESTION, silent=True)
        assert llm.calls == 3
        assert spans.provider.force_flush(10_000)
        history = result.chat_history
        assert [m["name"] for m in history] == ["planner", "coder", "executor", "reviewer", "planner"]
        assert "Code output: 42" in history[2]["content"]

        # span count == message count, in order, with the right parent and attributes
        steps = spans.steps()
        _chat_history_matches(steps, history)
        root = spans.root()
        assert root.name == "invoke_workflow planner -> chat_manager" and root.parent is None
        assert root.attributes[semconv.TASK_INPUT] == QUESTION
        assert root.attributes[semconv.TASK_FINAL_OUTPUT] == result.summary
        assert root.attributes[semconv.INSTRUMENTATION_SOURCE] == "autogen"
        assert root.attributes[semconv.GEN_AI_CONVERSATION_ID]  # the conversation id lives on the root
        # envelope spans: the manager's turn (no message of its own) encloses the members' turns;
        # the first message, sent by initiate_chat, comes from no turn
        manager = _manager_turn(spans, root)
        for index, step in enumerate(steps):
            assert step.attributes[semconv.STEP_INDEX] == index
            parent = root if index == 0 else manager
            assert step.parent.span_id == parent.context.span_id
            assert semconv.GEN_AI_CONVERSATION_ID not in step.attributes  # the root has it (moved)
            assert step.name == f"invoke_agent {step.attributes[semconv.GEN_AI_AGENT_NAME]}"
            assert step.start_time <= step.end_time
        assert [step_kind(s) for s in steps] == [
            "message",
            "message",
            "code_execution",
            "message",
            "message",
        ]
        starts = [s.start_time for s in steps]
        assert starts == sorted(starts)
        # the executor's step spans the real code run (started when it began its reply)
        assert steps[2].end_time - steps[2].start_time > 0
        # relays by the manager are not steps; + the root and the manager's turn
        assert len(spans.all()) == len(history) + 2

        # the same spans through the real OTLP/gRPC exporter
        received = sink.wait_for_spans(len(spans.all()), timeout=15)
        by_id = {r.span_id: r.span for r in received}
        for step in steps:
            proto = by_id[format(step.context.span_id, "016x")]
            attributes = {kv.key: kv.value for kv in proto.attributes}
            assert attributes[semconv.STEP_INDEX].int_value == step.attributes[semconv.STEP_INDEX]
            assert (
                attributes[semconv.GEN_AI_OUTPUT_MESSAGES].string_value
                == (step.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
            )
            assert proto.parent_span_id.hex() == format(step.parent.span_id, "016x")

        # and the processor's one way of turning spans into a trajectory agrees
        resource_spans = [rs for request in sink.trace_requests for rs in request.resource_spans]
        trajectory = trajectory_from_spans(resource_spans)
        assert [s.agent for s in trajectory.steps] == [m["name"] for m in history]
        assert [s.content for s in trajectory.steps] == [m["content"] for m in history]
        assert trajectory.steps[2].kind == "code_execution"
        assert trajectory.task.input == QUESTION


def test_user_task_wraps_the_chat_and_outcome_is_set(instrumented, tmp_path):
    spans = instrumented
    with ScriptedLLM(SCRIPT) as llm:
        chat = build_group_chat(llm, tmp_path)
        with task("arith", input=QUESTION, expected_output="42"):
            result = chat.planner.initiate_chat(chat.manager, message=QUESTION, silent=True)
            set_outcome("42" in result.summary, final_output=result.summary)
    root = spans.root()  # exactly one root: no automatic one inside the user's task
    assert root.name == "invoke_workflow arith"
    assert root.attributes[semconv.TASK_OUTCOME] == "success"
    _chat_history_matches(spans.steps(), result.chat_history)


def test_async_two_agent_chat(instrumented):
    from autogen import ConversableAgent

    spans = instrumented
    with ScriptedLLM(["hello, bob", "second answer"]) as llm:
        alice = ConversableAgent("alice", llm_config=llm_config(llm), human_input_mode="NEVER")
        bob = ConversableAgent("bob", llm_config=False, human_input_mode="NEVER", default_auto_reply="go on")

        async def main():
            return await bob.a_initiate_chat(alice, message="hi alice", max_turns=2, silent=True)

        result = asyncio.run(main())
    assert [m["content"] for m in result.chat_history] == ["hi alice", "hello, bob", "go on", "second answer"]
    _chat_history_matches(spans.steps(), result.chat_history)
    assert spans.root().name == "invoke_workflow bob -> alice"


def test_run_in_a_background_thread_joins_the_callers_task(instrumented):
    from autogen import ConversableAgent

    spans = instrumented
    with ScriptedLLM(["hello back", "bye"]) as llm:
        alice = ConversableAgent("alice", llm_config=llm_config(llm), human_input_mode="NEVER")
        bob = ConversableAgent("bob", llm_config=False, human_input_mode="NEVER", default_auto_reply="ok")
        with task("outer"):
            response = bob.run(alice, message="hi", max_turns=2, silent=True)
            for _ in response.events:  # drives the chat thread to its end
                pass
    assert [m["content"] for m in response.messages] == ["hi", "hello back", "ok", "bye"]
    root = spans.root()
    assert root.name == "invoke_workflow outer"
    steps = spans.steps()
    assert [_text(s) for s in steps] == ["hi", "hello back", "ok", "bye"]
    assert all(s.parent.span_id == root.context.span_id for s in steps)


def test_tool_calls_and_results_are_steps(instrumented):
    from autogen import ConversableAgent, register_function

    from tests.support import Reply

    spans = instrumented
    script = [Reply(tool_calls=[{"id": "call_1", "name": "multiply", "arguments": {"a": 6, "b": 7}}]), "42"]
    with ScriptedLLM(script) as llm:
        assistant = ConversableAgent("assistant", llm_config=llm_config(llm), human_input_mode="NEVER")
        user = ConversableAgent(
            "user", llm_config=False, human_input_mode="NEVER", default_auto_reply="thanks"
        )

        def multiply(a: int, b: int) -> int:
            return a * b

        register_function(multiply, caller=assistant, executor=user, description="multiply two numbers")
        user.initiate_chat(assistant, message="6*7?", max_turns=2, silent=True)
    steps = spans.steps()
    kinds = [(s.attributes[semconv.GEN_AI_AGENT_NAME], step_kind(s)) for s in steps]
    assert kinds == [
        ("user", "message"),
        ("assistant", "message"),
        ("user", "tool"),
        ("assistant", "message"),
    ]
    call = json.loads(steps[1].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"]
    assert call[-1]["type"] == "tool_call" and call[-1]["name"] == "multiply" and call[-1]["id"] == "call_1"
    tool = steps[2]
    assert tool.name == "execute_tool multiply" and tool.attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert "42" in json.loads(tool.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["response"]


def test_an_agent_that_raises_fails_the_task_and_the_error_passes_through(instrumented, tmp_path):
    from autogen import Agent, ConversableAgent

    spans = instrumented
    error = RuntimeError("tool backend down")

    def explode(recipient, messages=None, sender=None, config=None):
        raise error

    with ScriptedLLM(["first reply"]) as llm:
        alice = ConversableAgent("alice", llm_config=llm_config(llm), human_input_mode="NEVER")
        bob = ConversableAgent("bob", llm_config=False, human_input_mode="NEVER")
        bob.register_reply([Agent, None], explode)
        with pytest.raises(RuntimeError) as caught:
            bob.initiate_chat(alice, message="start", max_turns=3, silent=True)
    assert caught.value is error
    root = spans.root()
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes[semconv.TASK_OUTCOME] == "failure"
    assert any(e.attributes[semconv.EXCEPTION_MESSAGE] == "tool backend down" for e in root.events)
    # bob's turn raised: the error step of bob, after the two messages
    assert [_text(s) for s in spans.steps()] == ["start", "first reply", "RuntimeError: tool backend down"]
    assert_failed_turn_is_error_step(spans, "bob", "RuntimeError")


def test_hook_failures_never_break_the_chat(instrumented, tmp_path, monkeypatch):
    import otel_blame.instrumentation.autogen._hooks as hooks

    def broken(*args, **kwargs):
        raise RuntimeError("bug in otel-blame")

    monkeypatch.setattr(hooks, "_answer", broken)
    with ScriptedLLM(SCRIPT) as llm:
        chat = build_group_chat(llm, tmp_path)
        result = chat.planner.initiate_chat(chat.manager, message=QUESTION, silent=True)
    assert len(result.chat_history) == 5
    assert hook_error_count() == 5
    assert instrumented.steps() == []


def test_with_ag2_builtin_tracing_on_our_steps_are_not_duplicated(instrumented, tmp_path):
    from autogen.opentelemetry import instrument_agent

    spans = instrumented
    with ScriptedLLM(SCRIPT) as llm:
        chat = build_group_chat(llm, tmp_path)
        for agent in [*chat.members, chat.manager]:
            instrument_agent(agent, tracer_provider=spans.provider)
        result = chat.planner.initiate_chat(chat.manager, message=QUESTION, silent=True)
    ag2_spans = [s for s in spans.all() if s.attributes.get("ag2.span.type")]
    assert {s.attributes["ag2.span.type"] for s in ag2_spans} >= {"conversation", "agent", "code_execution"}
    assert all(semconv.STEP_INDEX not in s.attributes for s in ag2_spans)
    steps = spans.steps()
    _chat_history_matches(steps, result.chat_history)
    assert [s.attributes[semconv.STEP_INDEX] for s in steps] == list(range(5))
    trace_ids = {s.context.trace_id for s in spans.all()}
    assert len(trace_ids) == 1  # AG2's spans and ours form one trace
    root = spans.root()
    assert all(s.parent is not None and s.context.trace_id == root.context.trace_id for s in steps), (
        "every step lies under the task root's trace"
    )


def test_uninstrument_restores_the_originals(spans, monkeypatch):
    from autogen.agentchat.conversable_agent import ConversableAgent

    from otel_blame.instrumentation import OtelBlameInstrumentor

    names = ["_process_message_before_send", "generate_reply", "initiate_chat", "a_initiate_chat", "run"]
    before = {name: ConversableAgent.__dict__[name] for name in names}
    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument()
    try:
        assert all(ConversableAgent.__dict__[name] is not before[name] for name in names)
        assert {"otel_blame_ag2", "otel_blame_autogen"} <= set(instrumentor.instrumented_frameworks)
    finally:
        instrumentor.uninstrument()
    assert all(ConversableAgent.__dict__[name] is before[name] for name in names)
    assert instrumentor.instrumented_frameworks == []


@pytest.mark.parametrize(
    ("disabled", "expected"),
    [
        ("otel_blame_autogen", ["otel_blame_ag2"]),
        ("otel_blame_ag2, otel_blame_autogen", []),
        ("otel_blame", []),
    ],
)
def test_disabled_instrumentations_are_honoured(spans, monkeypatch, disabled, expected):
    from autogen.agentchat.conversable_agent import ConversableAgent

    from otel_blame.instrumentation import OtelBlameInstrumentor

    original = ConversableAgent.__dict__["_process_message_before_send"]
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", disabled)
    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument()
    try:
        # other installed frameworks (openai-agents, ...) are hooked too; this test is about these two
        ag2_parts = [
            p for p in instrumentor.instrumented_frameworks if p in ("otel_blame_ag2", "otel_blame_autogen")
        ]
        assert ag2_parts == expected
        assert ConversableAgent.__dict__["_process_message_before_send"] is original
    finally:
        instrumentor.uninstrument()


def test_trajectory_with_ag2_builtin_tracing_has_one_step_per_message(instrumented, tmp_path):
    from autogen.opentelemetry import instrument_agent

    from otel_blame.conventions import sdk_spans_to_proto

    spans = instrumented
    with ScriptedLLM(SCRIPT) as llm:
        chat = build_group_chat(llm, tmp_path)
        for agent in [*chat.members, chat.manager]:
            instrument_agent(agent, tracer_provider=spans.provider)
        result = chat.planner.initiate_chat(chat.manager, message=QUESTION, silent=True)
    trajectory = trajectory_from_spans(sdk_spans_to_proto(spans.all()))
    assert [s.agent for s in trajectory.steps] == [m["name"] for m in result.chat_history]
    assert [s.content for s in trajectory.steps] == [m["content"] for m in result.chat_history]
    assert [s.kind for s in trajectory.steps][2] == "code_execution"
    step_spans = {format(s.context.span_id, "016x") for s in spans.steps()}
    assert {s.span_id for s in trajectory.steps} == step_spans


def test_async_group_chat_with_code_executor(instrumented, tmp_path):
    spans = instrumented
    with ScriptedLLM(SCRIPT) as llm:
        chat = build_group_chat(llm, tmp_path)
        result = asyncio.run(chat.planner.a_initiate_chat(chat.manager, message=QUESTION, silent=True))
    assert [m["name"] for m in result.chat_history] == ["planner", "coder", "executor", "reviewer", "planner"]
    steps = spans.steps()
    _chat_history_matches(steps, result.chat_history)
    assert step_kind(steps[2]) == "code_execution"
    root = spans.root()
    manager = _manager_turn(spans, root)
    assert all(s.parent.span_id == manager.context.span_id for s in steps[1:])


# -- the message path -----------------------------------------------------------------------------


def _multiply_chat(llm, got):
    from autogen import ConversableAgent, register_function

    assistant = ConversableAgent("assistant", llm_config=llm_config(llm), human_input_mode="NEVER")
    user = ConversableAgent("user", llm_config=False, human_input_mode="NEVER", default_auto_reply="thanks")

    def multiply(a: int, b: int) -> int:
        got.append((a, b))
        return a * b

    register_function(multiply, caller=assistant, executor=user, description="multiply two numbers")
    return user, assistant


def test_the_message_path_changes_what_the_recipient_and_the_tool_get(instrumented):
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import Rewriter, sent_to_model
    from tests.support import Reply

    spans = instrumented
    script = [Reply(tool_calls=[{"id": "call_1", "name": "multiply", "arguments": {"a": 6, "b": 7}}]), "42"]
    got = []
    rewriter = Rewriter(
        ("message", "user", "6*7?", "7*7?"),
        ("tool_call", "assistant", '"a": 6', '"a": 7'),
        ("tool", "user", "49", "48"),
    )
    with ScriptedLLM(script) as llm, intercept_messages(rewriter):
        user, assistant = _multiply_chat(llm, got)
        result = user.initiate_chat(assistant, message="6*7?", max_turns=2, silent=True)
        assert "7*7?" in sent_to_model(llm, 0) and "6*7?" not in sent_to_model(llm, 0)
        assert "48" in sent_to_model(llm, 1)
    assert got == [(7, 7)] and rewriter.unused == []
    assert result.chat_history[0]["content"] == "7*7?"
    steps = spans.steps()
    assert _text(steps[0]) == "7*7?"
    call = json.loads(steps[1].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][-1]
    assert json.loads(call["arguments"]) == {"a": 7, "b": 7}
    assert "48" in json.loads(steps[2].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["response"]
    assert [(o.kind, o.step) for o in rewriter.changed] == [("message", 0), ("tool_call", 1), ("tool", 2)]
    assert {o.framework for o in rewriter.seen} == {"autogen"}


def test_an_interceptor_that_raises_changes_nothing(instrumented, tmp_path):
    from otel_blame.instrumentation._safety import HOOK_ERRORS
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import raising

    with ScriptedLLM(SCRIPT) as llm, intercept_messages(raising):
        chat = build_group_chat(llm, tmp_path)
        result = chat.planner.initiate_chat(chat.manager, message=QUESTION, silent=True)
    _chat_history_matches(instrumented.steps(), result.chat_history)
    assert set(HOOK_ERRORS.by_site()) == {"intercept"}


# -- both shapes of the GenAI conventions ----------------------------------------------------------


@SHAPES
def test_both_convention_shapes_read_back_the_same(instrumented, latest, tmp_path):
    """A tool chat (a result and a tool that raises) and a group chat with a code executor."""
    from autogen import register_function

    from tests.support import Reply

    def divide(a: int, b: int) -> float:
        return a / b

    script = [
        Reply(tool_calls=[{"id": "call_1", "name": "multiply", "arguments": {"a": 6, "b": 7}}]),
        Reply(tool_calls=[{"id": "call_2", "name": "divide", "arguments": {"a": 1, "b": 0}}]),
        "42, and 1/0 failed",
    ]

    def run() -> None:
        with ScriptedLLM(script) as llm:
            user, assistant = _multiply_chat(llm, [])
            register_function(divide, caller=assistant, executor=user, description="divide two numbers")
            user.initiate_chat(assistant, message="6*7 and 1/0?", max_turns=3, silent=True)
        with ScriptedLLM(SCRIPT) as llm:
            chat = build_group_chat(llm, tmp_path)
            chat.planner.initiate_chat(chat.manager, message=QUESTION, silent=True)

    tool_chat, group_chat = read_back(instrumented, latest, run)
    assert tool_chat["task"][2:] == ("6*7 and 1/0?", None, "42, and 1/0 failed")
    assert [step[:3] for step in tool_chat["steps"]] == [
        ("user", "assistant", "message"),
        ("assistant", "assistant", "message"),
        ("user", "tool", "tool"),
        ("assistant", "assistant", "message"),
        ("user", "tool", "tool"),
        ("assistant", "assistant", "message"),
    ]
    tools = [(step[3], step[4], step[6]) for step in tool_chat["steps"] if step[2] == "tool"]
    assert tools == [("42", "multiply", False), ("Error: division by zero", "divide", True)]
    assert [failure[:3] for failure in tool_chat["dependency_failures"]] == [
        ("divide", "tool_error", "Error: division by zero")
    ]
    assert [step[:3] for step in group_chat["steps"]] == [
        ("planner", "assistant", "message"),
        ("coder", "assistant", "message"),
        ("executor", "assistant", "code_execution"),
        ("reviewer", "assistant", "message"),
        ("planner", "assistant", "message"),
    ]
    assert "42" in group_chat["steps"][2][3]
