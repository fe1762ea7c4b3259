"""Sync and async wrappers from one definition: a hook is an ``enter`` / ``leave`` pair.

Every framework hook that wraps a call does the same around it: open something (a task root, an
agent turn, a tool envelope), maybe change the call's arguments, call through, close it with the
result or the error, maybe change the result. :class:`Around` holds that pair once and builds the
``wrapt`` wrapper for a plain function, a coroutine function, a generator and an async generator,
so no hook writes sync and async twins. A failure inside ``enter`` or ``leave`` is counted and
the app's call goes on untouched (see :mod:`otel_blame.instrumentation._safety`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from otel_blame.instrumentation._safety import HOOK_ERRORS

#: ``enter`` returns ``(state, args, kwargs)`` to wrap the call (with those arguments), or None to
#: call through untouched
Opened = tuple[Any, tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Around:
    """``enter(wrapped, instance, args, kwargs) -> Opened | None``; ``leave(state, result, error)``
    returns what the caller gets (the result, or a replacement); with an error it is re-raised."""

    site: str
    enter: Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Opened | None]
    leave: Callable[[Any, Any, BaseException | None], Any]
    #: for generators: called with each item before it is handed on
    each: Callable[[Any, Any], None] | None = None

    def _open(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Opened | None:
        try:
            return self.enter(wrapped, instance, args, kwargs)
        except Exception:
            HOOK_ERRORS.record(self.site)
            return None

    def _item(self, state: Any, item: Any) -> None:
        if self.each is not None:
            try:
                self.each(state, item)
            except Exception:
                HOOK_ERRORS.record(self.site)

    def _close(self, state: Any, result: Any, error: BaseException | None) -> Any:
        try:
            return self.leave(state, result, error)
        except Exception:
            HOOK_ERRORS.record(self.site)
            return result

    def decorate(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` wrapped (a coroutine function stays one); ``enter`` gets no instance."""
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def call_async(*args: Any, **kwargs: Any) -> Any:
                return await self.coroutine(function, None, args, kwargs)

            return call_async

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.sync(function, None, args, kwargs)

        return call

    def sync(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        opened = self._open(wrapped, instance, args, kwargs)
        if opened is None:
            return wrapped(*args, **kwargs)
        state, args, kwargs = opened
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as error:
            self._close(state, None, error)
            raise
        return self._close(state, result, None)

    async def coroutine(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        opened = self._open(wrapped, instance, args, kwargs)
        if opened is None:
            return await wrapped(*args, **kwargs)
        state, args, kwargs = opened
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as error:
            self._close(state, None, error)
            raise
        return self._close(state, result, None)

    def generator(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Iterator[Any]:
        opened = self._open(wrapped, instance, args, kwargs)
        if opened is None:
            yield from wrapped(*args, **kwargs)
            return
        state, args, kwargs = opened
        items = wrapped(*args, **kwargs)
        try:
            for item in items:
                self._item(state, item)
                yield item
        except BaseException as error:
            self._close(state, None, None if isinstance(error, GeneratorExit) else error)
            raise
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # a consumer that stops early stops the app's generator too
        self._close(state, None, None)

    async def async_generator(
        self, wrapped: Any, instance: Any, args: Any, kwargs: Any
    ) -> AsyncIterator[Any]:
        opened = self._open(wrapped, instance, args, kwargs)
        if opened is None:
            async for item in wrapped(*args, **kwargs):
                yield item
            return
        state, args, kwargs = opened
        items = wrapped(*args, **kwargs)
        try:
            async for item in items:
                self._item(state, item)
                yield item
        except BaseException as error:
            self._close(state, None, None if isinstance(error, GeneratorExit) else error)
            raise
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()  # a consumer that stops early stops the app's generator too
        self._close(state, None, None)
