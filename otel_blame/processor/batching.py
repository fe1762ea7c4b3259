"""A background queue that hands what waits to one function, a batch at a time, on its own thread.

Two parts of the processor need the same unit: the late blame spans (stored in one log row, sent
as one request) and the verdict bus (listeners called with the verdicts that queued up). Each
item put is handled exactly once, in the order put; :meth:`BatchingWorker.wait_idle` says when
everything put so far was handled, and :meth:`BatchingWorker.close` handles what waits, then ends
the thread. A handler that raises is logged, and its batch counts as handled (one bad batch must
not stop the ones behind it).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

_STOP = object()


class BatchingWorker(Generic[T]):
    """``handle(batch)`` on the worker's thread with up to ``max_batch`` items at a time.

    ``capacity`` bounds the items waiting (``put`` then waits for room); 0 means unbounded."""

    def __init__(
        self, handle: Callable[[list[T]], None], *, name: str, max_batch: int = 256, capacity: int = 0
    ) -> None:
        self._handle = handle
        self._max_batch = max_batch
        self._queue: queue.Queue[T | object] = queue.Queue(capacity)
        self._waiting = 0  # put, and not handled yet
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, item: T) -> None:
        with self._idle:
            self._waiting += 1
        self._queue.put(item)

    @property
    def waiting(self) -> int:
        with self._idle:
            return self._waiting

    def wait_idle(self, deadline: float) -> bool:
        """Wait until every item put was handled, or until ``deadline`` (monotonic); True when idle."""
        with self._idle:
            while self._waiting and time.monotonic() < deadline:
                self._idle.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            return not self._waiting

    def close(self, timeout: float = 5.0) -> None:
        """Handle what waits, then end the thread (within ``timeout``)."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch: list[T] = [first]  # type: ignore[list-item]
            stop = False
            while len(batch) < self._max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                    break
                batch.append(more)  # type: ignore[arg-type]
            try:
                self._handle(batch)
            except Exception:
                log.exception("%s: handling a batch of %d failed", self._thread.name, len(batch))
            with self._idle:
                self._waiting -= len(batch)
                self._idle.notify_all()
            if stop:
                return
