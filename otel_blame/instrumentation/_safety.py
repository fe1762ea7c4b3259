"""Never break the host app: failures inside our hooks are caught, logged once and counted."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger("otel_blame.instrumentation")

F = TypeVar("F", bound=Callable[..., Any])


class HookErrors:
    """Counts hook failures per site; logs the first failure of each site with its traceback."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def record(self, site: str) -> None:
        with self._lock:
            count = self._counts.get(site, 0) + 1
            self._counts[site] = count
        if count == 1:
            logger.exception("otel-blame: instrumentation hook %s failed; the app continues untraced", site)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def by_site(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()


HOOK_ERRORS = HookErrors()


def hook_error_count() -> int:
    """How many times an otel-blame hook failed in this process (each failure was swallowed)."""
    return HOOK_ERRORS.total


def guarded(site: str, default: Any = None) -> Callable[[F], F]:
    """Decorate an internal hook so that any exception becomes a counted, logged no-op."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except Exception:
                HOOK_ERRORS.record(site)
                return default

        return wrapper  # type: ignore[return-value]

    return decorate
