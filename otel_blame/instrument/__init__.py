"""The documented public API of otel-blame's instrumentation (kept stable).

The implementation lives in :mod:`otel_blame.instrumentation`; this module re-exports it, so
``from otel_blame.instrument import task, record_message, set_outcome, OtelBlameInstrumentor``
keeps working.
"""

from __future__ import annotations

from typing import Any

from otel_blame.instrumentation import (
    AgentTurn,
    CaptureSettings,
    TaskRun,
    agent_turn,
    configure,
    current_settings,
    current_task,
    current_trace_id,
    hook_error_count,
    last_trace_id,
    record_message,
    reset_configuration,
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
