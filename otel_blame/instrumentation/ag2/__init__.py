"""otel-blame for ``ag2`` 1.x (module ``ag2``), through ag2's own middleware chain.

``AG2Instrumentor().instrument()`` (or ``opentelemetry-instrument``, entry point
``otel_blame_ag2``) makes every model call an ``invoke_agent {agent}`` turn and every tool run an
``execute_tool {tool}`` span; an ag2 ``Task`` is an otel-blame task.
"""

from __future__ import annotations

from otel_blame.instrumentation._base import FrameworkInstrumentor


class AG2Instrumentor(FrameworkInstrumentor):
    """Adds a middleware to every agent turn; maps ag2 ``Task`` lifecycles to tasks."""

    name = "otel_blame_ag2"
    instruments = ("ag2 >= 1.0, < 2",)

    def _patch(self) -> None:
        from otel_blame.instrumentation.ag2 import _middleware

        self._wrap("ag2.agent", "Agent._drive_scope", _middleware.drive_scope)
        self._wrap("ag2.task", "Task.__aenter__", _middleware.task_enter)
        self._wrap("ag2.task", "Task.__aexit__", _middleware.task_exit)
        self._wrap("ag2.task", "Task.complete", _middleware.task_complete)
        self._wrap("ag2.task", "Task.fail", _middleware.task_fail)


__all__ = ["AG2Instrumentor"]
