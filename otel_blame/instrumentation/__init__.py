"""Turn agent runs into OpenTelemetry spans that otel-blame's processor can attribute.

The plain API: ``task`` opens a root span per run, ``agent_turn`` wraps one agent turn in an
``invoke_agent {agent}`` envelope span (LLM and tool spans of the turn nest under it),
``record_message`` records a message that already exists, ``set_outcome`` marks the run's result,
``current_trace_id`` / ``last_trace_id`` give the trace id a late ``otel-blame verdict`` needs.
One instrumentor per framework (``otel_blame.instrumentation.<framework>``) hooks it without code
changes; ``OtelBlameInstrumentor`` instruments every installed one.
"""

from __future__ import annotations

from typing import Any

from otel_blame.instrumentation._safety import hook_error_count
from otel_blame.instrumentation._settings import (
    CaptureSettings,
    configure,
    current_settings,
    reset_configuration,
)
from otel_blame.instrumentation.api import (
    AgentTurn,
    TaskRun,
    agent_turn,
    current_task,
    current_trace_id,
    last_trace_id,
    record_message,
    set_outcome,
    task,
)

__all__ = [
    "AgentTurn",
    "CaptureSettings",
    "OtelBlameInstrumentor",
    "TaskRun",
    "agent_turn",
    "attribute_current_task",
    "configure",
    "current_settings",
    "current_task",
    "current_trace_id",
    "hook_error_count",
    "last_trace_id",
    "record_message",
    "reset_configuration",
    "set_outcome",
    "task",
]


def __getattr__(name: str) -> Any:
    if name == "attribute_current_task":  # imported on use: it needs pydantic, the spans do not
        from otel_blame.instrumentation.self_healing import attribute_current_task

        return attribute_current_task
    if name == "OtelBlameInstrumentor":
        from otel_blame.instrumentation.instrumentor import OtelBlameInstrumentor

        return OtelBlameInstrumentor
    raise AttributeError(name)
