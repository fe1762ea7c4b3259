"""Recently completed agent traces, kept for late verdicts (bounded by age, count and bytes)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from otel_blame.attribution.result import Attribution
from otel_blame.processor.config import VerdictsConfig


@dataclass
class RetainedTrace:
    trace_id: bytes
    released_at: float
    span_payloads: list[bytes]
    log_payloads: list[bytes]
    attribution: Attribution | None = None
    size: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class RetainedTraces:
    """Thread-safe LRU by release time; the oldest go first when a bound is reached."""

    def __init__(self, config: VerdictsConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._traces: OrderedDict[bytes, RetainedTrace] = OrderedDict()
        self._bytes = 0
        self.evicted = 0

    def keep(
        self,
        trace_id: bytes,
        now: float,
        span_payloads: list[bytes],
        log_payloads: list[bytes],
        attribution: Attribution | None = None,
    ) -> None:
        if self._config.max_traces == 0 or self._config.retention == 0:
            return
        size = sum(map(len, span_payloads)) + sum(map(len, log_payloads))
        if size > self._config.max_bytes:
            return
        with self._lock:
            old = self._traces.pop(trace_id, None)
            if old is not None:
                self._bytes -= old.size
            self._traces[trace_id] = RetainedTrace(
                trace_id, now, list(span_payloads), list(log_payloads), attribution, size
            )
            self._bytes += size
            self._evict_locked(now)

    def add_late(self, trace_id: bytes, payload: bytes, *, logs: bool) -> None:
        """Spans (or log records) that arrived after the trace was released."""
        with self._lock:
            trace = self._traces.get(trace_id)
            if trace is None or self._bytes + len(payload) > self._config.max_bytes:
                return
            (trace.log_payloads if logs else trace.span_payloads).append(payload)
            trace.size += len(payload)
            self._bytes += len(payload)

    def get(self, trace_id: bytes, now: float) -> RetainedTrace | None:
        with self._lock:
            self._evict_locked(now)
            return self._traces.get(trace_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._traces)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def _evict_locked(self, now: float) -> None:
        config = self._config
        while self._traces:
            oldest = next(iter(self._traces.values()))
            if (
                len(self._traces) > config.max_traces
                or self._bytes > config.max_bytes
                or now - oldest.released_at > config.retention
            ):
                self._traces.popitem(last=False)
                self._bytes -= oldest.size
                self.evicted += 1
            else:
                break
