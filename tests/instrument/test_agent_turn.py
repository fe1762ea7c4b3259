"""The envelope form of the plain API (``agent_turn``) and the trace id helpers for late verdicts."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
from opentelemetry.trace import StatusCode

from otel_blame import semconv
from otel_blame.conventions import sdk_spans_to_proto, trajectory_from_spans
from otel_blame.instrumentation import (
    agent_turn,
    current_trace_id,
    last_trace_id,
    record_message,
    set_outcome,
    task,
)
from tests.instrument.failed_turns import assert_failed_turn_is_error_step


def _text(span) -> str:
    message = json.loads(span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]
    return "".join(p.get("content", p.get("response", p.get("arguments", ""))) for p in message["parts"])


def test_a_turn_encloses_the_work_done_in_it_and_carries_its_answer(spans):
    other = spans.provider.get_tracer("some.llm.instrumentation")
    with task("solve") as run:
        record_message("user", "what is 6*7?", role="user")
        with agent_turn("coder") as turn:
            with other.start_as_current_span("chat scripted-model"):
                time.sleep(0.01)
            with other.start_as_current_span("execute_tool python"):
                pass
            assert turn.answer("42") == "42" and turn.index == 1
        record_message("critic", "right")
        set_outcome(True, final_output="42")
    root = spans.root()
    by_name = {s.name: s for s in spans.all()}
    coder = by_name["invoke_agent coder"]
    assert coder.parent.span_id == root.context.span_id
    for child in ("chat scripted-model", "execute_tool python"):
        assert by_name[child].parent.span_id == coder.context.span_id
    assert coder.start_time <= by_name["chat scripted-model"].start_time
    assert coder.end_time >= by_name["execute_tool python"].end_time
    assert coder.end_time - coder.start_time >= 10_000_000
    assert coder.attributes[semconv.STEP_INDEX] == 1 and _text(coder) == "42"
    assert coder.attributes[semconv.GEN_AI_CONVERSATION_ID] == run.conversation_id
    assert [s.attributes[semconv.STEP_INDEX] for s in spans.steps()] == [0, 1, 2]
    assert run.trace_id_hex == format(root.context.trace_id, "032x")


def test_old_and_new_forms_give_the_same_trajectory(spans):
    def run_with(envelopes: bool) -> list[tuple]:
        spans.exporter.clear()
        with task("t", input="q"):
            record_message("user", "q", role="user")
            if envelopes:
                with agent_turn("coder") as turn:
                    turn.answer(
                        None, tool_calls=[{"id": "c1", "function": {"name": "run", "arguments": "{}"}}]
                    )
                with agent_turn("executor") as turn:
                    turn.answer("ok", "tool", kind="tool", tool_name="run", tool_call_id="c1")
                with agent_turn("coder") as turn:
                    turn.answer("done")
            else:
                record_message(
                    "coder", None, tool_calls=[{"id": "c1", "function": {"name": "run", "arguments": "{}"}}]
                )
                record_message("executor", "ok", "tool", kind="tool", tool_name="run", tool_call_id="c1")
                record_message("coder", "done")
            set_outcome(False, reason="wrong")
        trajectory = trajectory_from_spans(sdk_spans_to_proto(spans.all()))
        return [
            (s.index, s.agent, s.role, s.kind, s.content, s.tool_name, s.is_error) for s in trajectory.steps
        ]

    assert run_with(True) == run_with(False)
    tool = [s for s in spans.steps() if s.attributes[semconv.STEP_KIND] == "tool"][0]
    assert tool.name == "execute_tool run"  # a turn answered with a tool result is the tool's span


def test_a_turn_without_an_answer_is_an_agent_span_without_a_step(spans):
    with task("t"):
        with agent_turn("manager"):
            with agent_turn("member") as member:
                member.answer("hi")
    manager = next(s for s in spans.all() if s.name == "invoke_agent manager")
    (member,) = spans.steps()
    assert semconv.STEP_INDEX not in manager.attributes
    assert member.parent.span_id == manager.context.span_id


def test_a_second_answer_is_a_step_of_its_own_inside_the_turn(spans):
    with task("t"):
        with agent_turn("coder") as turn:
            turn.answer("first")
            turn.answer("second")
    first, second = spans.steps()
    assert _text(first) == "first" and _text(second) == "second"
    assert second.parent.span_id == first.context.span_id


def test_an_exception_in_a_turn_is_an_error_step_and_passes_through(spans):
    with pytest.raises(KeyError):
        with task("t"):
            with agent_turn("coder"):
                raise KeyError("boom")
    turn = assert_failed_turn_is_error_step(spans, "coder", "KeyError")
    assert turn.name == "invoke_agent coder"
    assert spans.root().attributes[semconv.TASK_OUTCOME] == "failure"


def test_a_failed_tool_turn_is_a_tool_error_step_and_cancellation_is_no_step(spans):
    with pytest.raises(ValueError):
        with task("t"):
            with agent_turn("coder").as_tool("search", "call_9"):
                raise ValueError("index offline")
    tool = assert_failed_turn_is_error_step(spans, "coder", "ValueError", kind="tool")
    assert tool.name == "execute_tool search"
    assert tool.attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_9"

    spans.exporter.clear()
    with pytest.raises(asyncio.CancelledError):
        with task("t"):
            with agent_turn("coder"):
                raise asyncio.CancelledError()
    turn = next(s for s in spans.all() if s.name == "invoke_agent coder")
    assert turn.status.status_code is StatusCode.ERROR  # recorded, but not a failure of the agent
    assert spans.steps() == []

    spans.exporter.clear()
    with task("t"):
        with agent_turn("coder") as answered:
            answered.answer("done")
            answered.fail(RuntimeError("after the answer"))  # the answered step itself fails
    (step,) = spans.steps()
    assert (
        step.status.status_code is StatusCode.ERROR and step.attributes[semconv.ERROR_TYPE] == "RuntimeError"
    )


def test_async_turns_keep_their_own_children(spans):
    other = spans.provider.get_tracer("llm")

    async def agent(name: str, delay: float) -> None:
        async with agent_turn(name) as turn:
            with other.start_as_current_span(f"chat {name}"):
                await asyncio.sleep(delay)
            turn.answer(f"{name} done")

    async def main() -> None:
        async with task("parallel"):
            await asyncio.gather(agent("a", 0.02), agent("b", 0.01))

    asyncio.run(main())
    by_name = {s.name: s for s in spans.all()}
    for name in ("a", "b"):
        assert by_name[f"chat {name}"].parent.span_id == by_name[f"invoke_agent {name}"].context.span_id
    assert [_text(s) for s in spans.steps()] == ["b done", "a done"]  # numbered as they answered


def test_a_turn_left_open_by_a_framework_ends_with_its_task(spans):
    from otel_blame.instrumentation import AgentTurn

    with task("t"):
        AgentTurn("forgotten").activate()
    assert any(s.name == "invoke_agent forgotten" for s in spans.all())
    # the task restored its own context: nothing of it is current any more
    assert current_trace_id() is None


def test_trace_id_helpers_and_the_log_line(spans, caplog):
    assert current_trace_id() is None
    with caplog.at_level(logging.INFO, logger="otel_blame.instrumentation"):
        with task("answer") as run:
            inside = current_trace_id()
            with task("inner"):
                assert current_trace_id() == inside  # a nested task is in the same trace
            record_message("a", "x")
    root = spans.roots()[-1] if spans.roots()[0].name == "invoke_workflow inner" else spans.roots()[0]
    assert inside == run.trace_id_hex == format(root.context.trace_id, "032x")
    assert last_trace_id() == inside
    lines = [r.getMessage() for r in caplog.records if "trace_id=" in r.getMessage()]
    assert len(lines) == 1  # only the root task announces its trace
    assert f"trace_id={inside}" in lines[0] and f"otel-blame verdict {inside} --failed" in lines[0]


def test_the_trace_id_line_level_can_be_raised_for_apps_without_logging_set_up(spans, caplog, monkeypatch):
    monkeypatch.setenv(semconv.ENV_TRACE_ID_LOG_LEVEL, "warning")
    with caplog.at_level(logging.INFO, logger="otel_blame.instrumentation"):
        with task("answer") as run:
            record_message("a", "x")
    (line,) = [r for r in caplog.records if "trace_id=" in r.getMessage()]
    assert line.levelno == logging.WARNING and run.trace_id_hex in line.getMessage()
