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

_MARKER = "__otel_blame_context_propagating__"
_original: Any = None


def _wrap(original: Any) -> Any:
    @functools.wraps(original)
    def run_in_executor(self: asyncio.AbstractEventLoop, executor: Any, func: Any, *args: Any) -> Any:
        try:
            context = contextvars.copy_context()
            bound = functools.partial(context.run, func)
        except Exception:  # never stand between the app and its executor
            bound = func
        return original(self, executor, bound, *args)

    setattr(run_in_executor, _MARKER, True)
    return run_in_executor


def install() -> None:
    """Patch ``asyncio.BaseEventLoop.run_in_executor`` (idempotent)."""
    global _original
    current = asyncio.BaseEventLoop.run_in_executor
    if getattr(current, _MARKER, False):
        return
    _original = current
    asyncio.BaseEventLoop.run_in_executor = _wrap(current)  # type: ignore[method-assign]


def uninstall() -> None:
    """Put the original ``run_in_executor`` back."""
    global _original
    if _original is not None and getattr(asyncio.BaseEventLoop.run_in_executor, _MARKER, False):
        asyncio.BaseEventLoop.run_in_executor = _original  # type: ignore[method-assign]
    _original = None


def installed() -> bool:
    return bool(getattr(asyncio.BaseEventLoop.run_in_executor, _MARKER, False))
