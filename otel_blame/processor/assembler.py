"""Holding the spans of each trace until the trace is whole.

A trace is complete when its root span has arrived (spans are exported when they end) and no
span came for ``quiet_period``, or ``max_wait`` after its first span. Spans of a trace already
released are forwarded at once; so are spans of traces without agent spans (configurable).
Memory is bounded: a trace that would exceed ``max_traces`` or ``max_spans_per_trace`` is
forwarded without attribution and counted, never dropped. Buffered data are the wire payloads
cut by :mod:`otel_blame.processor.wire`; there is no Python object per span.

When a trace completes, its :class:`~otel_blame.processor.decision.TraceDecision` is made from
what its groups said about their roots and from a verdict that came while it was buffered, and
the trace goes on to the next stage with it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import StrEnum

from otel_blame.processor.config import AssemblyConfig
from otel_blame.processor.decision import NOT_FAILED, UNDECIDED, TraceDecision
from otel_blame.processor.exporter import LOGS, TRACES, ExportItem
from otel_blame.processor.stage import Consumer
from otel_blame.processor.wire import TraceGroup

log = logging.getLogger(__name__)


class Route(StrEnum):
    BUFFERED = "buffered"
    FORWARD = "forward"  # send this group on as is, now
    LATE = "late"  # the trace was released already: send on now
    OVERFLOW = "overflow"  # the whole trace (returned) goes on now, unattributed


@dataclass(slots=True)
class BufferedTrace:
    trace_id: bytes
    first_seen: float
    last_seen: float
    span_payloads: list[bytes] = field(default_factory=list)
    log_payloads: list[bytes] = field(default_factory=list)
    span_refs: list[int] = field(default_factory=list)  # write-ahead log rows, one per span group
    log_refs: list[int] = field(default_factory=list)
    spans: int = 0
    log_records: int = 0
    payload_bytes: int = 0
    has_root: bool = False
    root_failure: str | None = None  # why a root span says the trace failed
    failed_root: bytes = b""
    has_agent: bool = False
    verdict_failed: bool = False  # a verdict said so while the trace was buffered
    replayed: bool = False  # some of it came from the write-ahead log of an earlier run
    expected_output: str | None = None
    overflowed: bool = False
    decision: TraceDecision = NOT_FAILED  # made once, when the trace completes

    def decide(self) -> TraceDecision:
        if self.root_failure:
            return TraceDecision(True, self.root_failure, (self.failed_root.hex(),), self.expected_output)
        if self.verdict_failed:
            return TraceDecision.verdict(self.expected_output)
        return NOT_FAILED if self.has_root else UNDECIDED

    def export_items(self) -> list[ExportItem]:
        """The trace as it arrived, to send on unchanged (its log rows are released on delivery)."""
        items = []
        if self.span_payloads:
            items.append(ExportItem(TRACES, b"".join(self.span_payloads), self.span_refs, self.spans))
        if self.log_payloads:
            items.append(ExportItem(LOGS, b"".join(self.log_payloads), self.log_refs, self.log_records))
        return items


@dataclass(frozen=True, slots=True)
class ArrivedGroups:
    """What the write-ahead log hands the assembly stage: one stored request, cut by trace id."""

    kind: str
    groups: list[TraceGroup]
    row: int
    logs: bool
    replayed: bool = False  # stored by an earlier run (replayed on start)


@dataclass(frozen=True, slots=True)
class LateGroup:
    """Spans or log records of a trace already released (they are forwarded at once too)."""

    group: TraceGroup
    logs: bool


@dataclass
class AssemblyStats:
    buffered_traces: int = 0
    buffered_spans: int = 0
    buffered_bytes: int = 0
    late_groups: int = 0
    forwarded_non_agent_groups: int = 0
    overflow_traces: int = 0
    oversized_traces: int = 0
    completed_traces: int = 0


class TraceAssembler:
    """Thread-safe. ``add`` routes each incoming group; ``due`` pops the traces now complete."""

    def __init__(self, config: AssemblyConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._buffers: dict[bytes, BufferedTrace] = {}  # in order of first arrival
        self._by_activity: OrderedDict[bytes, None] = OrderedDict()  # least recently active first
        self._released: OrderedDict[bytes, float] = OrderedDict()
        self._stats = AssemblyStats()

    def add(
        self, group: TraceGroup, ref: int, now: float, *, logs: bool = False, replayed: bool = False
    ) -> tuple[Route, BufferedTrace | None]:
        config = self._config
        with self._lock:
            trace = self._buffers.get(group.trace_id)
            if trace is None:
                if group.trace_id in self._released:
                    self._stats.late_groups += 1
                    return Route.LATE, None
                if not group.has_agent and config.forward_non_agent_immediately:
                    self._stats.forwarded_non_agent_groups += 1
                    return Route.FORWARD, None
                if len(self._buffers) >= config.max_traces:
                    self._stats.overflow_traces += 1
                    return Route.FORWARD, None
                trace = self._buffers[group.trace_id] = BufferedTrace(group.trace_id, now, now)
                self._by_activity[group.trace_id] = None
            else:
                self._by_activity.move_to_end(group.trace_id)
            trace.last_seen = now
            trace.replayed = trace.replayed or replayed
            trace.payload_bytes += len(group.payload)
            trace.has_agent = trace.has_agent or group.has_agent
            if logs:
                trace.log_payloads.append(group.payload)
                trace.log_refs.append(ref)
                trace.log_records += group.items
            else:
                trace.span_payloads.append(group.payload)
                trace.span_refs.append(ref)
                trace.spans += group.items
                trace.has_root = trace.has_root or group.has_root
                if group.root_failure and not trace.root_failure:
                    trace.root_failure, trace.failed_root = group.root_failure, group.failed_root
                if trace.spans > config.max_spans_per_trace:
                    self._stats.oversized_traces += 1
                    trace.overflowed = True
                    self._pop_locked(trace, now)
                    return Route.OVERFLOW, trace
            return Route.BUFFERED, None

    def due(self, now: float) -> list[BufferedTrace]:
        """Pop the traces whose root ended and that were quiet long enough, or waited too long."""
        quiet, max_wait = self._config.quiet_period, self._config.max_wait
        ready: dict[bytes, BufferedTrace] = {}
        with self._lock:
            for trace in self._buffers.values():
                if now - trace.first_seen < max_wait:
                    break
                ready[trace.trace_id] = trace
            for trace_id in self._by_activity:
                trace = self._buffers[trace_id]
                if now - trace.last_seen < quiet:
                    break
                if trace.has_root:
                    ready[trace_id] = trace
            for trace in ready.values():
                self._pop_locked(trace, now)
        return list(ready.values())

    def drain(self, now: float) -> list[BufferedTrace]:
        """Pop everything (shutdown)."""
        with self._lock:
            traces = list(self._buffers.values())
            for trace in traces:
                self._pop_locked(trace, now)
        return traces

    def mark_failed(self, trace_id: bytes, expected_output: str | None) -> bool:
        """A late verdict for a trace still being assembled: attribute it when complete."""
        with self._lock:
            trace = self._buffers.get(trace_id)
            if trace is None:
                return False
            trace.verdict_failed = True
            trace.expected_output = expected_output or trace.expected_output
            return True

    def is_buffered(self, trace_id: bytes) -> bool:
        with self._lock:
            return trace_id in self._buffers

    def stats(self) -> AssemblyStats:
        with self._lock:
            stats = AssemblyStats(**vars(self._stats))
            stats.buffered_traces = len(self._buffers)
            stats.buffered_spans = sum(trace.spans for trace in self._buffers.values())
            stats.buffered_bytes = sum(trace.payload_bytes for trace in self._buffers.values())
        return stats

    def _pop_locked(self, trace: BufferedTrace, now: float) -> None:
        trace.decision = trace.decide()
        del self._buffers[trace.trace_id]
        del self._by_activity[trace.trace_id]
        self._stats.completed_traces += 1
        self._released[trace.trace_id] = now
        self._released.move_to_end(trace.trace_id)
        while len(self._released) > self._config.released_memory:
            self._released.popitem(last=False)


class AssemblyStage:
    """Routes each stored request's groups (buffer them, forward them now, or add them to a released
    trace) and, on its own thread, hands every trace that completes to the next stage."""

    def __init__(
        self,
        assembler: TraceAssembler,
        config: AssemblyConfig,
        *,
        complete: Consumer[BufferedTrace],
        forward: Consumer[ExportItem],
        late: Consumer[LateGroup],
    ) -> None:
        self.assembler = assembler
        self._config = config
        self._complete = complete
        self._forward = forward
        self._late = late
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick_loop, name="otel-blame-assembler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def consume(self, item: ArrivedGroups) -> None:
        now = time.monotonic()
        row, logs = item.row, item.logs
        kind = LOGS if logs else TRACES
        for group in item.groups:
            if logs and not group.trace_id:
                self._forward.consume(ExportItem(kind, group.payload, [row], group.items))
                continue
            route, trace = self.assembler.add(group, row, now, logs=logs, replayed=item.replayed)
            if route == Route.BUFFERED:
                continue
            if route == Route.OVERFLOW and trace is not None:
                for export in trace.export_items():
                    self._forward.consume(export)
                continue
            if route == Route.LATE:
                self._late.consume(LateGroup(group, logs))
            self._forward.consume(ExportItem(kind, group.payload, [row], group.items))

    def drain(self) -> None:
        """Complete everything buffered now (shutdown)."""
        for trace in self.assembler.drain(time.monotonic()):
            self._complete.consume(trace)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)

    def _tick_loop(self) -> None:
        interval = self._config.tick_seconds
        while not self._stop.wait(interval):
            try:
                for trace in self.assembler.due(time.monotonic()):
                    self._complete.consume(trace)
            except Exception:  # never let the assembler thread die
                log.exception("completing traces failed")
