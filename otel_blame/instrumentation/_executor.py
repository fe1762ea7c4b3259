"""Carry the caller's context into ``loop.run_in_executor`` threads.

``asyncio.to_thread`` copies context variables, ``loop.run_in_executor`` does not, so a message
recorded in an executor thread would lose its task and its parent span. Patching
``BaseEventLoop.run_in_executor`` to run the function inside a copy of the caller's context
fixes both (the same thing ``asyncio.to_thread`` does).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from typing import Any

from otel_blame.instrumentation._base import FrameworkInstrumentor


def run_in_executor(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``loop.run_in_executor(executor, func, *args)`` with ``func`` run in the caller's context."""
    if len(args) >= 2:
        try:
            context = contextvars.copy_context()
            args = (args[0], functools.partial(context.run, args[1]), *args[2:])
        except Exception:  # never stand between the app and its executor
            pass
    return wrapped(*args, **kwargs)


class ExecutorContextInstrumentor(FrameworkInstrumentor):
    """Carries context into ``loop.run_in_executor`` threads (entry point ``otel_blame_executor``)."""

    name = "otel_blame_executor"

    def _patch(self) -> None:
        self._wrap("asyncio.base_events", "BaseEventLoop.run_in_executor", run_in_executor)


def installed() -> bool:
    from wrapt import BaseObjectProxy

    return isinstance(asyncio.BaseEventLoop.__dict__["run_in_executor"], BaseObjectProxy)
