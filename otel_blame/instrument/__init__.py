"""Turn agent messages into OpenTelemetry spans: a plain API plus hooks per framework.

``task`` opens a root span per run, ``record_message`` adds one span per agent message (step),
``set_outcome`` marks the run's result. ``OtelBlameInstrumentor`` hooks installed frameworks
(classic ``autogen``, ``ag2`` 1.x) so their messages are recorded without code changes.
"""

from __future__ import annotations

from typing import Any

from otel_blame.instrument.safety import hook_error_count
from otel_blame.instrument.settings import CaptureSettings, configure, current_settings, reset_configuration
from otel_blame.instrument.tasks import TaskRun, current_task, record_message, set_outcome, task

__all__ = [
    "CaptureSettings",
    "OtelBlameInstrumentor",
    "TaskRun",
    "configure",
    "current_settings",
    "current_task",
    "hook_error_count",
    "record_message",
    "reset_configuration",
    "set_outcome",
    "task",
]


def __getattr__(name: str) -> Any:
    if name == "OtelBlameInstrumentor":
        from otel_blame.instrument.instrumentor import OtelBlameInstrumentor

        return OtelBlameInstrumentor
    raise AttributeError(name)
