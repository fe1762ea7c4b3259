"""attribute_current_task: the offline verdict on the task in progress, from its own recorded steps;
the message interceptor: what it returns is what is sent and recorded."""

from __future__ import annotations

import pytest

from otel_blame.instrumentation import agent_turn, attribute_current_task, record_message, task
from otel_blame.instrumentation._interception import intercept_messages


def test_it_blames_the_recorded_steps_of_the_running_task(instrumented):
    with task("sum", input="What is 2 + 2?", expected_output="4") as run:
        record_message("user", "What is 2 + 2?", role="user")
        with agent_turn("solver") as turn:
            turn.answer("2 + 2 = 5. Final answer: 5")
        record_message(
            "checker", "The tool failed: connection refused", kind="tool", tool_name="calc", is_error=True
        )
        attribution = attribute_current_task()
        steps = run.remembered_steps()
    assert attribution is not None
    assert (attribution.agent, attribution.step) in {(s.agent, s.index) for s in steps}
    assert attribution.method == "heuristic"
    assert [(s.agent, s.kind, s.is_error) for s in steps] == [
        ("user", "message", False),
        ("solver", "message", False),
        ("checker", "tool", True),
    ]
    assert run.input == "What is 2 + 2?" and run.expected_output == "4"
    span_steps = sorted(
        (s.attributes["otel_blame.step.index"], s.attributes["gen_ai.agent.name"])
        for s in instrumented.get_finished_spans()
        if "otel_blame.step.index" in (s.attributes or {})
    )
    assert span_steps == [(s.index, s.agent) for s in steps]  # the step numbers the processor sees


def test_outside_a_task_or_before_a_step_there_is_nothing_to_blame(instrumented):
    assert attribute_current_task() is None
    with task("empty"):
        assert attribute_current_task() is None


def test_llm_methods_are_refused(instrumented):
    with task("t"):
        record_message("a", "x")
        with pytest.raises(ValueError, match="offline methods only"):
            attribute_current_task(method="all_at_once")


def test_only_one_interceptor_at_a_time():
    with intercept_messages(lambda outgoing: None):
        with pytest.raises(RuntimeError, match="already installed"):
            with intercept_messages(lambda outgoing: None):
                pass
    with intercept_messages(lambda outgoing: None):  # released again
        pass


def test_remembered_content_is_bounded_per_task(instrumented, monkeypatch):
    from otel_blame.instrumentation import core

    monkeypatch.setattr(core, "MAX_REMEMBERED_CHARS", 25)
    with task("long") as run:
        for number in range(4):
            record_message(f"agent{number}", "0123456789")  # 10 characters each
        steps = run.remembered_steps()
    assert [s.content for s in steps] == ["0123456789", "0123456789", "", ""]
    assert [s.agent for s in steps] == ["agent0", "agent1", "agent2", "agent3"]  # the steps are all kept
