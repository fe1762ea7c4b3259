"""Deprecated: import from :mod:`otel_blame.instrumentation` instead.

Kept so that ``from otel_blame.instrument import task, record_message, set_outcome,
OtelBlameInstrumentor`` keeps working for apps written against it; importing it warns
(``DeprecationWarning``). Nothing inside otel-blame imports it.
"""

from __future__ import annotations

import warnings
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

warnings.warn(
    "otel_blame.instrument is deprecated; import from otel_blame.instrumentation instead",
    DeprecationWarning,
    stacklevel=2,
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
