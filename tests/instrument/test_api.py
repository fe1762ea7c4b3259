"""The plain API: task / record_message / set_outcome, content handling, context and safety."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry.trace import StatusCode

from otel_blame import semconv
from otel_blame.instrumentation import _executor as executor_context
from otel_blame.instrumentation import (
    configure,
    current_task,
    hook_error_count,
    record_message,
    reset_configuration,
    set_outcome,
    task,
)
from otel_blame.redaction import Redactor
from tests.instrument.shapes import SHAPES, assert_shape, reading, use_shape
from tests.instrument.steps import step_kind, step_role


def _content(span) -> str:
    messages = json.loads(span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert len(messages) == 1
    return "".join(part.get("content", "") for part in messages[0]["parts"])


def test_task_and_messages_make_a_root_and_ordered_children(spans):
    with task("solve", input="what is 6*7?", expected_output="42", conversation_id="conv-1") as run:
        assert current_task() is run
        assert record_message("planner", "let's compute") == "let's compute"  # the text as it goes out
        assert record_message("coder", "6*7 = 42", role="Coder (-> Critic)") == "6*7 = 42"
        assert record_message("critic", "looks right", role="user") == "looks right"
        assert run.steps_recorded == 3
        set_outcome(True, final_output="42")
    assert current_task() is None
    root = spans.root()
    assert root.name == "invoke_workflow solve" and root.parent is None
    attrs = root.attributes
    assert attrs[semconv.GEN_AI_OPERATION_NAME] == "invoke_workflow"
    assert attrs[semconv.GEN_AI_CONVERSATION_ID] == "conv-1"
    assert attrs[semconv.TASK_INPUT] == "what is 6*7?" and attrs[semconv.TASK_EXPECTED_OUTPUT] == "42"
    assert attrs[semconv.TASK_OUTCOME] == "success" and attrs[semconv.TASK_FINAL_OUTPUT] == "42"
    steps = spans.steps()
    assert [s.name for s in steps] == ["invoke_agent planner", "invoke_agent coder", "invoke_agent critic"]
    assert [s.attributes[semconv.STEP_INDEX] for s in steps] == [0, 1, 2]
    for step in steps:
        assert step.parent.span_id == root.context.span_id
        assert step.context.trace_id == root.context.trace_id
        assert semconv.GEN_AI_CONVERSATION_ID not in step.attributes  # on the root only (moved)
        assert step.attributes[semconv.GEN_AI_OPERATION_NAME] == "invoke_agent"
    coder = steps[1]
    assert coder.attributes[semconv.GEN_AI_AGENT_NAME] == "coder"
    assert step_role(coder) == "Coder (-> Critic)"
    message = json.loads(coder.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]
    # the speaker is gen_ai.agent.name, not repeated in the JSON (moved)
    assert message == {"role": "assistant", "parts": [{"type": "text", "content": "6*7 = 42"}]}
    assert json.loads(steps[2].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["role"] == "user"


def test_failure_outcome_sets_error_status(spans):
    with task("t"):
        record_message("a", "x")
        set_outcome(False, reason="wrong answer")
    root = spans.root()
    assert root.attributes[semconv.TASK_OUTCOME] == "failure"
    assert root.attributes[semconv.TASK_OUTCOME_REASON] == "wrong answer"
    assert root.status.status_code is StatusCode.ERROR and root.status.description == "wrong answer"


def test_tool_and_code_execution_steps(spans):
    with task("t"):
        record_message(
            "coder", None, tool_calls=[{"id": "c1", "function": {"name": "run", "arguments": "{}"}}]
        )
        record_message("executor", "ok", role="tool", kind="tool", tool_name="run", tool_call_id="c1")
        record_message("executor", "exitcode: 0\nCode output: 42", kind="code_execution")
    call, tool, code = spans.steps()
    parts = json.loads(call.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"]
    assert parts == [{"type": "tool_call", "name": "run", "arguments": "{}", "id": "c1"}]
    assert (
        tool.name == "execute_tool run" and tool.attributes[semconv.GEN_AI_OPERATION_NAME] == "execute_tool"
    )
    assert step_kind(tool) == "tool" and tool.attributes[semconv.GEN_AI_TOOL_CALL_ID] == "c1"
    response = json.loads(tool.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]
    assert response == {"type": "tool_call_response", "id": "c1", "response": "ok"}
    assert code.name == "invoke_agent executor" and step_kind(code) == "code_execution"


def test_no_content_switch(spans, monkeypatch):
    monkeypatch.setenv(semconv.ENV_CAPTURE_MESSAGE_CONTENT, "NO_CONTENT")
    with task("t", input="secret input"):
        record_message("a", "secret message")
        set_outcome(True, final_output="secret output")
    everything = json.dumps([dict(s.attributes) for s in spans.all()])
    assert "secret" not in everything
    assert spans.steps()[0].attributes[semconv.STEP_INDEX] == 0


def test_content_cap_with_marker_and_configurable(spans):
    with task("t"):
        record_message("a", "é" * 40_000)  # 80,000 bytes of UTF-8
    step = spans.steps()[0]
    text = _content(step)
    assert step.attributes[semconv.CONTENT_TRUNCATED] is True
    assert "[otel-blame: truncated; the message had 80000 bytes]" in text
    kept = text.split("…[otel-blame")[0]
    assert len(kept.encode()) <= 64 * 1024 and set(kept) == {"é"}

    configure(max_content_bytes=1000)
    with task("t2"):
        record_message("a", "x" * 1000)
        record_message("a", "x" * 1001)
    exact, over = [s for s in spans.steps() if s.context.trace_id != step.context.trace_id]
    assert semconv.CONTENT_TRUNCATED not in exact.attributes and _content(exact) == "x" * 1000
    assert over.attributes[semconv.CONTENT_TRUNCATED] is True
    with pytest.raises(ValueError):
        configure(max_content_bytes=-5)


def test_redaction_before_export_and_across_the_cut(spans):
    configure(max_content_bytes=1000, redactor=Redactor(lambda t: t.replace("Zeus", "[codename]")))
    secret = "sk-" + "A1b2C3d4" * 4
    with task("t", input="mail me at boss@corp.example"):
        record_message("a", "Zeus uses " + secret)
        record_message("a", "y" * 990 + " " + secret)  # the key straddles the 1000-byte cut
    everything = json.dumps([dict(s.attributes) for s in spans.all()])
    assert (
        secret[:12] not in everything and "boss@corp.example" not in everything and "Zeus" not in everything
    )
    first, second = spans.steps()
    assert first.attributes[semconv.CONTENT_REDACTED] is True
    assert second.attributes[semconv.CONTENT_TRUNCATED] is True
    configure(redactor=None)
    with task("t3"):
        record_message("a", "plain a@b.io")
    assert "a@b.io" in json.dumps([dict(s.attributes) for s in spans.all()])


@pytest.mark.parametrize(
    ("agent", "content", "expected_agent", "expected_content"),
    [
        (None, None, "unknown", ""),
        (b"bytes-agent", b"caf\xc3\xa9 \xff", "bytes-agent", "café \ufffd"),
        (42, {"answer": 42, "nested": [1, None]}, "42", '{"answer": 42, "nested": [1, null]}'),
        ("", ["a", 1], "unknown", '["a", 1]'),
        (type("Named", (), {"name": "has-name"})(), 3.5, "has-name", "3.5"),
    ],
)
def test_bad_inputs_are_recorded_not_raised(spans, agent, content, expected_agent, expected_content):
    with task(name=None):
        assert record_message(agent, content, role=None) == expected_content
    step = spans.steps()[0]
    assert step.attributes[semconv.GEN_AI_AGENT_NAME] == expected_agent
    assert _content(step) == expected_content
    assert hook_error_count() == 0


def test_ten_megabytes_is_capped_quickly(spans):
    big = "word " * 2_000_000
    with task("t", input=big):
        record_message("a", big)
    step = spans.steps()[0]
    assert len(step.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]) < 70 * 1024
    assert len(spans.root().attributes[semconv.TASK_INPUT]) < 70 * 1024
    assert "the message had 10000000 bytes" in _content(step)


def test_app_exceptions_pass_through_unchanged_and_are_recorded(spans):
    error = KeyError("missing")
    with pytest.raises(KeyError) as caught:
        with task("t"):
            record_message("a", "about to fail")
            raise error
    assert caught.value is error
    root = spans.root()
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes[semconv.TASK_OUTCOME] == "failure"
    assert root.attributes[semconv.ERROR_TYPE] == "KeyError"
    assert [e.name for e in root.events] == ["exception"]
    assert current_task() is None


def test_hook_failures_are_swallowed_counted_and_logged_once(spans, monkeypatch, caplog):
    import otel_blame.instrumentation.core as core

    def broken(*args, **kwargs):
        raise RuntimeError("our bug")

    monkeypatch.setattr(core, "prepare", broken)
    with task("t") as run:
        assert record_message("a", "x") == "x"  # the message goes out unchanged
        assert record_message("a", "y") == "y"
        set_outcome(True, final_output="z")
        assert run is not None
    assert hook_error_count() == 3
    assert sum("record_message failed" in r.getMessage() for r in caplog.records) == 1

    monkeypatch.setattr(core, "tracer", broken)
    ran = []
    with task("t2") as run:
        ran.append(run)
        record_message("a", "x")
    assert ran == [None] and hook_error_count() >= 4


def test_decorator_sync_and_async(spans):
    @task("sync-task")
    def work(x):
        record_message("a", f"got {x}")
        return x * 2

    @task("async-task", input="in")
    async def awork():
        record_message("a", "one")
        await asyncio.sleep(0)
        record_message("b", "two")
        return "done"

    assert work(2) == 4 and work(3) == 6
    assert asyncio.run(awork()) == "done"
    names = sorted(r.name for r in spans.roots())
    assert names == ["invoke_workflow async-task", "invoke_workflow sync-task", "invoke_workflow sync-task"]
    for root in spans.roots():
        children = [s for s in spans.steps() if s.parent.span_id == root.context.span_id]
        assert [c.attributes[semconv.STEP_INDEX] for c in children] == list(range(len(children)))


def test_nested_task_numbers_its_own_steps(spans):
    with task("outer") as outer:
        record_message("a", "o0")
        with task("inner") as inner:
            record_message("b", "i0")
            record_message("c", "i1")
        record_message("a", "o1")
    outer_root = next(r for r in spans.roots() if r.name == "invoke_workflow outer")
    inner_root = next(r for r in spans.roots() if r.name == "invoke_workflow inner")
    assert inner_root.parent.span_id == outer_root.context.span_id
    by_parent = {}
    for step in spans.steps():
        by_parent.setdefault(step.parent.span_id, []).append(
            (step.attributes[semconv.STEP_INDEX], _content(step))
        )
    assert by_parent[outer_root.context.span_id] == [(0, "o0"), (1, "o1")]
    assert by_parent[inner_root.context.span_id] == [(0, "i0"), (1, "i1")]
    assert outer.steps_recorded == 2 and inner.steps_recorded == 2


def test_asyncio_gather_of_agents_numbers_in_order_of_messages(spans):
    order = []

    async def agent(name, delays):
        for turn, delay in enumerate(delays):
            await asyncio.sleep(delay)
            order.append(f"{name}{turn}")
            record_message(name, f"{name}{turn}")

    async def main():
        async with task("gather"):
            await asyncio.gather(agent("a", [0.03, 0.03]), agent("b", [0.01, 0.04]), agent("c", [0.045]))

    asyncio.run(main())
    steps = spans.steps()
    assert [_content(s) for s in steps] == order
    assert [s.attributes[semconv.STEP_INDEX] for s in steps] == list(range(5))
    root = spans.root()
    assert all(s.parent.span_id == root.context.span_id for s in steps)


def test_to_thread_and_run_in_executor_keep_task_and_parent(spans):
    instrumentor = executor_context.ExecutorContextInstrumentor()
    instrumentor.instrument()
    try:

        async def main():
            async with task("threads"):
                record_message("main", "m0")
                await asyncio.to_thread(record_message, "thread", "t1")
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(None, record_message, "executor", "e2")
                with ThreadPoolExecutor(max_workers=2) as pool:
                    await loop.run_in_executor(pool, record_message, "pool", "p3")

        asyncio.run(main())
    finally:
        instrumentor.uninstrument()
    steps = spans.steps()
    root = spans.root()
    assert [(_content(s), s.attributes[semconv.STEP_INDEX]) for s in steps] == [
        ("m0", 0),
        ("t1", 1),
        ("e2", 2),
        ("p3", 3),
    ]
    assert all(s.parent.span_id == root.context.span_id for s in steps)
    assert not executor_context.installed()


def test_many_threads_get_unique_gapless_indices(spans):
    with task("threads") as run:

        def worker(n):
            for i in range(50):
                run.record_message(f"w{n}", f"{n}-{i}")

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    steps = spans.steps()
    assert sorted(s.attributes[semconv.STEP_INDEX] for s in steps) == list(range(400))
    root = spans.root()
    assert all(s.parent.span_id == root.context.span_id for s in steps)
    # each worker's own messages keep their order
    for n in range(8):
        mine = [
            int(_content(s).split("-")[1])
            for s in steps
            if s.attributes[semconv.GEN_AI_AGENT_NAME] == f"w{n}"
        ]
        assert mine == list(range(50))


def test_outside_a_task_spans_have_no_index_and_outcome_is_ignored(spans):
    assert record_message("lonely", "hi") == "hi"
    set_outcome(False)
    (span,) = spans.all()
    assert semconv.STEP_INDEX not in span.attributes and span.name == "invoke_agent lonely"
    assert hook_error_count() == 0


def test_odd_tool_calls_are_kept(spans):
    with task("t"):
        assert (
            record_message("a", None, tool_calls=["raw call text", {"name": "direct", "arguments": {"x": 1}}])
            == ""
        )
    parts = json.loads(spans.steps()[0].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"]
    assert parts == [
        {"type": "tool_call", "name": "unknown", "arguments": "raw call text"},
        {"type": "tool_call", "name": "direct", "arguments": '{"x": 1}'},
    ]


# -- the message path -----------------------------------------------------------------------------


def test_the_message_path_changes_messages_tool_calls_and_results(spans):
    from otel_blame.instrumentation import agent_turn
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import Rewriter

    rewriter = Rewriter(
        ("message", "planner", "6*7", "7*7"),
        ("tool_call", "coder", '"a": 6', '"a": 7'),
        ("tool", "coder", "49", "48"),
        ("message", "coder", "is 48", "is 47"),
    )
    got = []

    def multiply(a: int, b: int) -> int:
        got.append((a, b))
        return a * b

    with intercept_messages(rewriter), task("t") as run:
        assert record_message("planner", "compute 6*7") == "compute 7*7"
        with agent_turn("coder") as turn:
            assert turn.as_tool(multiply)(6, b=7) == "48"  # the changed result, as text
        with agent_turn("coder") as turn:
            assert turn.answer("it is 48") == "it is 47"
    assert got == [(7, 7)] and rewriter.unused == []
    assert [_content(s) for s in spans.steps()] == ["compute 7*7", "48", "it is 47"]
    assert spans.steps()[1].name == "execute_tool multiply"
    assert [(o.kind, o.step, o.agent, o.framework) for o in rewriter.seen] == [
        ("message", 0, "planner", "api"),
        ("tool_call", 1, "coder", "api"),
        ("tool", 1, "coder", "api"),
        ("message", 2, "coder", "api"),
    ]
    assert rewriter.seen[1].tool_name == "multiply" and json.loads(rewriter.seen[1].text) == {"a": 6, "b": 7}
    assert run.remembered_steps()[0].content == "compute 7*7"


def test_an_interceptor_that_raises_changes_nothing(spans):
    from otel_blame.instrumentation import agent_turn
    from otel_blame.instrumentation._safety import HOOK_ERRORS
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import raising

    with intercept_messages(raising), task("t"):
        assert record_message("planner", "compute 6*7") == "compute 6*7"
        with agent_turn("coder") as turn:
            assert turn.as_tool(lambda a, b: a * b)(6, 7) == 42
    assert [_content(s) for s in spans.steps()] == ["compute 6*7", "42"]
    assert HOOK_ERRORS.by_site() == {"intercept": 3}


# -- both shapes of the GenAI conventions ----------------------------------------------------------


def _divide(a: int, b: int) -> float:
    return a / b


def _calculation_run() -> None:
    """A run with a message, a tool call, its result, a tool that raises and an error the app reports."""
    from otel_blame.instrumentation import agent_turn

    with task("calc", input="What is 6*7, and 1/0?", expected_output="42") as run:
        record_message("user", "What is 6*7, and 1/0?", role="user")
        with agent_turn("coder", agent_id="coder/1") as turn:
            turn.answer("", tool_calls=[{"id": "c1", "name": "multiply", "arguments": {"a": 6, "b": 7}}])
        record_message("coder", "42", role="tool", kind="tool", tool_name="multiply", tool_call_id="c1")
        with pytest.raises(ZeroDivisionError), agent_turn("coder") as turn:
            turn.as_tool(_divide, tool_call_id="c2")(1, 0)
        record_message("coder", "quota exceeded", role="tool", kind="tool", tool_name="lookup", is_error=True)
        record_message("coder", "6*7 is 41.", agent_id="coder/1")
        run.set_outcome(False, final_output="6*7 is 41.", reason="wrong product")


CALCULATION_READING = [
    {
        "task": ("calc", "calc", "What is 6*7, and 1/0?", "42", "6*7 is 41."),
        "outcome": ("failure", "wrong product"),
        "steps": [
            ("user", "user", "message", "What is 6*7, and 1/0?", None, None, False),
            ("coder", "assistant", "message", 'tool_call multiply({"a": 6, "b": 7})', None, None, False),
            ("coder", "tool", "tool", "42", "multiply", None, False),
            ("coder", "tool", "tool", "ZeroDivisionError: division by zero", "_divide", None, True),
            ("coder", "tool", "tool", "quota exceeded", "lookup", None, True),
            ("coder", "assistant", "message", "6*7 is 41.", None, None, False),
        ],
        "dependency_failures": [
            ("_divide", "tool_error", "ZeroDivisionError", 3),
            ("lookup", "tool_error", "quota exceeded", 4),
        ],
    }
]


@SHAPES
def test_both_convention_shapes_read_back_the_same(spans, latest):
    use_shape(latest)
    _calculation_run()
    assert_shape(spans, latest, tools=1)
    assert reading(spans) == CALCULATION_READING


def test_the_shape_follows_otel_semconv_stability_opt_in_as_contrib_reads_it(spans, monkeypatch):
    """``gen_ai_latest_experimental`` among the comma-separated values selects the latest shape, read
    by opentelemetry-instrumentation's helper (once per process, as for the contrib instrumentations)."""
    from opentelemetry.instrumentation._semconv import _OpenTelemetrySemanticConventionStability

    from otel_blame.instrumentation import current_settings

    monkeypatch.setattr(_OpenTelemetrySemanticConventionStability, "_initialized", False)
    monkeypatch.setattr(
        _OpenTelemetrySemanticConventionStability, "_OTEL_SEMCONV_STABILITY_SIGNAL_MAPPING", {}
    )
    monkeypatch.setenv(semconv.ENV_SEMCONV_STABILITY_OPT_IN, "http/dup, gen_ai_latest_experimental")
    assert current_settings().latest_genai_conventions is True
    _calculation_run()
    assert_shape(spans, latest=True)
    # read once per process: a later change of the variable changes nothing, as in contrib
    monkeypatch.setenv(semconv.ENV_SEMCONV_STABILITY_OPT_IN, "http")
    assert current_settings().latest_genai_conventions is True
    configure(latest_genai_conventions=False)  # code overrides the environment
    assert current_settings().latest_genai_conventions is False
    # a process that starts without the value emits the legacy shape
    reset_configuration()
    monkeypatch.setattr(_OpenTelemetrySemanticConventionStability, "_initialized", False)
    assert current_settings().latest_genai_conventions is False


def test_the_latest_shape_says_what_the_contrib_handler_says(spans, monkeypatch):
    """Our latest-shape spans against the ones opentelemetry-util-genai (the handler the contrib GenAI
    instrumentations share) makes for the same workflow, agent and tool: same name, kind, and every
    attribute it sets with the same value (ours add the otel_blame.* ones)."""
    handler_module = pytest.importorskip("opentelemetry.util.genai.handler")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_blame.instrumentation import agent_turn

    monkeypatch.setenv(semconv.ENV_CAPTURE_MESSAGE_CONTENT, "SPAN_ONLY")
    theirs = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(theirs))
    handler = handler_module.TelemetryHandler(tracer_provider=provider)
    with handler.workflow("calc"):
        with handler.invoke_local_agent(agent_name="coder"):
            with handler.tool("multiply", tool_call_id="c1") as tool:
                tool.tool_result = "42"
    use_shape(True)
    with task("calc"):
        with agent_turn("coder") as turn:
            turn.answer("I will multiply.")
            record_message("coder", "42", role="tool", kind="tool", tool_name="multiply", tool_call_id="c1")
    ours = {span.name: span for span in spans.all()}
    for reference in theirs.get_finished_spans():
        span = ours[reference.name]
        assert span.kind == reference.kind, reference.name
        said = {key: value for key, value in reference.attributes.items()}
        assert {key: span.attributes.get(key) for key in said} == said, reference.name
    assert set(ours) >= {"invoke_workflow calc", "invoke_agent coder", "execute_tool multiply"}
    provider.shutdown()
