"""The plain instrumentation API, for apps without a supported framework (or beside one).

``task`` opens a run (root span ``invoke_workflow {name}``), ``agent_turn`` one agent turn (the
envelope span ``invoke_agent {agent}``: the turn's LLM and tool spans nest under it),
``AgentTurn.answer`` and ``record_message`` record a message and return its text as it goes out
(the message path: an installed interceptor may change it), ``AgentTurn.as_tool(function)`` runs a
function as the turn's tool, ``set_outcome`` marks the run's result. A thin facade: everything
lives in :mod:`otel_blame.instrumentation.core`.
"""

from __future__ import annotations

from otel_blame.instrumentation.core import (
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
    "TaskRun",
    "agent_turn",
    "current_task",
    "current_trace_id",
    "last_trace_id",
    "record_message",
    "set_outcome",
    "task",
]
