"""Both shapes of the GenAI conventions, checked the same way for every instrumentor.

Each framework's test module has one test parametrized over the shapes (``SHAPES``) that runs one of
its apps through :func:`read_back`: the spans must follow the shape asked for (:func:`assert_shape`),
and the latest shape must read back as the very trajectory the legacy shape reads as (:func:`reading`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from otel_blame import semconv
from otel_blame.conventions import sdk_spans_to_proto, trajectories_from_spans
from otel_blame.instrumentation import configure
from otel_blame.trajectory import Trajectory

SHAPES = pytest.mark.parametrize("latest", [False, True], ids=["legacy-shape", "latest-shape"])


def use_shape(latest: bool) -> None:
    """Emit the latest GenAI conventions or the legacy shape (as OTEL_SEMCONV_STABILITY_OPT_IN would)."""
    configure(latest_genai_conventions=latest)


def read_back(spans: Any, latest: bool, run: Callable[[], object], *, tools: int = 1) -> list[dict[str, Any]]:
    """Run the app in the legacy shape; for ``latest``, run it again in the latest shape and require
    the same reading. Returns the reading of the shape asked for (for the test's own expectations)."""
    use_shape(False)
    run()
    legacy = reading(spans)
    import pprint

    pprint.pprint(legacy, width=150)  # DEBUG
    if not latest:
        assert_shape(spans, False, tools=tools)
        return legacy
    spans.exporter.clear()
    use_shape(True)
    run()
    assert_shape(spans, True, tools=tools)
    assert reading(spans) == legacy
    return legacy


def reading(spans: Any) -> list[dict[str, Any]]:
    """The trajectories the processor builds from the spans, one per trace in the order the traces
    began, without what differs from run to run (span and trace ids, times, conversation ids)."""
    return [_readable(t) for t in trajectories_from_spans(sdk_spans_to_proto(spans.all()))]


def _readable(trajectory: Trajectory) -> dict[str, Any]:
    task = trajectory.task
    return {
        "task": (task.name, task.workflow, task.input, task.expected_output, task.final_output),
        "outcome": (trajectory.outcome.value, trajectory.outcome_reason),
        "steps": [
            (s.agent, s.role, s.kind.value, s.content, s.tool_name, s.arguments, s.is_error)
            for s in trajectory.steps
        ],
        "dependency_failures": [(f.name, f.kind, f.detail, f.step) for f in trajectory.dependency_failures],
    }


def _is_tool(span: Any) -> bool:
    return span.attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_EXECUTE_TOOL


def assert_shape(spans: Any, latest: bool, *, tools: int = 1) -> None:
    """The spans follow the shape asked for: the latest conventions (semantic-conventions-genai) or the
    legacy shape (docs/semconv.md, "Two shapes of the conventions"). ``tools``: how many tool steps
    with a result the app makes at least (the shapes differ most there)."""
    roots = spans.roots()
    assert roots, "no invoke_workflow root"
    steps = spans.steps()
    assert steps, "no steps"
    conversations: dict[int, set[str]] = {}
    for root in roots:
        conversations.setdefault(root.context.trace_id, set()).add(
            root.attributes[semconv.GEN_AI_CONVERSATION_ID]
        )
    results = [s for s in steps if _is_tool(s) and semconv.GEN_AI_TOOL_CALL_RESULT in s.attributes]
    tool_messages = [s for s in steps if _is_tool(s) and semconv.GEN_AI_OUTPUT_MESSAGES in s.attributes]
    for root in roots:
        assert root.kind.name == "INTERNAL"
        name = root.attributes.get(semconv.GEN_AI_WORKFLOW_NAME)
        assert name == (root.attributes[semconv.TASK_NAME] if latest else None), root.name
    for step in steps:
        assert step.kind.name == "INTERNAL"
        own = step.attributes.get(semconv.GEN_AI_CONVERSATION_ID)
        if (
            latest
        ):  # the conversation id on every step (its task's); no gen_ai.agent.id on an in-process agent
            assert own in conversations.get(step.context.trace_id, ()), step.name
            assert semconv.GEN_AI_AGENT_ID not in step.attributes, step.name
        else:  # on the root alone
            assert own is None, step.name
    if latest:
        assert not tool_messages, [s.name for s in tool_messages]  # an execute_tool span has no messages
        assert len(results) >= tools, [s.name for s in steps]
        for step in results:
            assert isinstance(step.attributes[semconv.GEN_AI_TOOL_CALL_RESULT], str)
    else:
        assert not results and len(tool_messages) >= tools, [s.name for s in steps]
        for step in tool_messages:
            (message,) = json.loads(step.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
            assert message["role"] == "tool"
