"""Reading a step span the way the processor does: the kind and role a span implies when it does
not carry ``otel_blame.step.kind`` / ``otel_blame.step.role`` (documented in docs/semconv.md)."""

from __future__ import annotations

import json

from otel_blame import semconv


def step_kind(span) -> str:
    """``code_execution`` is declared; a tool result is an ``execute_tool`` span; else a message."""
    declared = span.attributes.get(semconv.STEP_KIND)
    if declared:
        return declared
    return (
        "tool" if span.attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_EXECUTE_TOOL else "message"
    )


def step_role(span) -> str:
    """Another label is declared; a message role is the role in ``gen_ai.output.messages``."""
    declared = span.attributes.get(semconv.STEP_ROLE)
    if declared:
        return declared
    return json.loads(span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["role"]
