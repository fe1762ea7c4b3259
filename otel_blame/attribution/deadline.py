"""A time budget for one attribution, honoured by the LLM client, so a timeout needs no extra thread.

The processor gives each attribution ``attribution.timeout`` seconds. Running the method on a
second thread pool and abandoning it at the deadline would leave that thread blocked on the
endpoint; instead the budget is set for the calling thread with :func:`attribution_deadline`,
and :class:`~otel_blame.attribution.llm_client.LLMClient` reads it: each request's timeout is the
time left, a concurrency slot is waited for no longer, and a retry is made only while the wait
before it still ends in time. When the budget is spent, :class:`DeadlineExceeded` is raised.
Outside a deadline (``otel-blame attribute``, the benchmarks) nothing changes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from otel_blame.attribution.base import AttributionError

__all__ = ["DeadlineExceeded", "attribution_deadline", "time_left"]

_deadline: ContextVar[float | None] = ContextVar("otel_blame_attribution_deadline", default=None)


class DeadlineExceeded(AttributionError):
    """The attribution's time budget ran out."""


@contextmanager
def attribution_deadline(at_monotonic: float | None) -> Iterator[None]:
    """Within the block, LLM requests end by ``at_monotonic`` (``time.monotonic()`` clock).

    A deadline already set further out is tightened, never loosened."""
    outer = _deadline.get()
    if at_monotonic is None or (outer is not None and outer < at_monotonic):
        at_monotonic = outer
    token = _deadline.set(at_monotonic)
    try:
        yield
    finally:
        _deadline.reset(token)


def time_left() -> float | None:
    """Seconds left before the current deadline (may be negative), or None when there is none."""
    at = _deadline.get()
    return None if at is None else at - time.monotonic()
