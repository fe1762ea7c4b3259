"""The one rule for a turn that raises, checked the same way for every framework: its envelope span
ends with status ERROR, ``error.type`` and an ``exception`` event, it is a step of its agent whose
message is ``{Type}: {message}``, and the trajectory the processor builds marks that step an error."""

from __future__ import annotations

import json

from opentelemetry.trace import StatusCode

from otel_blame import semconv
from otel_blame.conventions import sdk_spans_to_proto, trajectory_from_spans


def assert_failed_turn_is_error_step(spans, agent: str, error_type: str, kind: str = "message"):
    """The last failed step of ``agent`` follows the rule; returns its span."""
    failed = [
        s
        for s in spans.steps()
        if s.attributes[semconv.GEN_AI_AGENT_NAME] == agent and s.status.status_code is StatusCode.ERROR
    ]
    assert failed, f"no error step of {agent!r}"
    step = failed[-1]
    assert step.attributes[semconv.STEP_KIND] == kind
    assert step.attributes[semconv.ERROR_TYPE] == error_type
    assert step.status.description and step.status.description.startswith(error_type.rsplit(".")[-1])
    assert any(e.name == "exception" for e in step.events)
    part = json.loads(step.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]
    assert (part.get("content") or part.get("response")).startswith(f"{error_type.rsplit('.')[-1]}: ")
    trajectory = trajectory_from_spans(sdk_spans_to_proto(spans.all()))
    in_trajectory = [t for t in trajectory.steps if t.span_id == format(step.context.span_id, "016x")]
    assert len(in_trajectory) == 1 and in_trajectory[0].is_error and in_trajectory[0].agent == agent
    return step
