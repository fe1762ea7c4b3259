"""The log stage, between the receivers and the assembler: decode and check a request, make it
durable, hand it on.

A request is split by trace id (spans with invalid ids are left out and counted, OTLP partial
success), written to the write-ahead log as it arrived, and only then acknowledged; its groups go
on to the assembly stage. On start, rows a previous run acknowledged but did not deliver are
replayed through the same path (marked as replayed: a blame already kept for one of their traces
is not written again), and the analysis jobs a previous run deferred (:mod:`.jobs`) go back to
the analysis.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_blame.processor.assembler import ArrivedGroups
from otel_blame.processor.config import WALConfig
from otel_blame.processor.counters import Counters
from otel_blame.processor.decision import TraceDecision
from otel_blame.processor.errors import Accepted, Backpressure, InvalidRequest, NotAccepting
from otel_blame.processor.exporter import LOGS, TRACES, OTLPExporter
from otel_blame.processor.jobs import decode_header
from otel_blame.processor.stage import Consumer
from otel_blame.processor.wal import (
    KIND_ANALYSIS,
    KIND_DIRECT_LOGS,
    KIND_DIRECT_TRACES,
    KIND_LOGS,
    PendingAppend,
    WALClosed,
    WALFull,
    WALStorageError,
    WriteAheadLog,
)
from otel_blame.processor.wire import DecodeError, Groups, count_spans, split_logs, split_traces

log = logging.getLogger(__name__)


class Ingest:
    def __init__(
        self,
        wal: WriteAheadLog,
        config: WALConfig,
        assembly: Consumer[ArrivedGroups],
        exporter: OTLPExporter | None,
        counters: Counters,
        root_failure: Callable[[Span], str | None],
        resume: Callable[[bytes, TraceDecision, int], None] | None = None,
    ) -> None:
        """``exporter`` and ``resume`` take the rows only the processor's own log holds (its late
        spans and deferred jobs); a receiving process's log (:mod:`.shards`) has none."""
        self._wal = wal
        self._config = config
        self._assembly = assembly
        self._exporter = exporter
        self._counters = counters
        self._root_failure = root_failure
        self._resume = resume  # (trace id, decision, job row): a deferred analysis job, replayed
        self.accepting = False

    def split(self, kind: str, body: bytes) -> Groups:
        if kind == KIND_LOGS:
            return split_logs(body)
        return split_traces(body, self._root_failure)

    def accept(self, kind: str, body: bytes) -> Accepted:
        """Store one export request durably and route it; raises an IngestError if not stored.

        The request's commit starts before it is split, so the fsync and the split overlap; a
        request that turns out malformed, or holds only invalid ids, is deleted again."""
        if not self.accepting:
            raise NotAccepting("the processor is not accepting data right now")
        logs = kind == KIND_LOGS
        try:
            pending = self._wal.begin_append(kind, body)
        except WALFull as error:
            self._counters.add("rejected_requests")
            raise Backpressure(str(error), self._config.retry_after_seconds) from None
        except WALClosed as error:
            raise NotAccepting(str(error)) from None
        try:
            groups = self.split(kind, body)
        except DecodeError as error:
            self._counters.add("rejected_requests")
            self._discard(pending)
            raise InvalidRequest(str(error)) from None
        accepted = Accepted()
        if groups.rejected:
            self._counters.add("rejected_log_records" if logs else "rejected_spans", groups.rejected)
            noun = "log records" if logs else "spans"
            accepted = Accepted(
                groups.rejected, f"{groups.rejected} {noun} with invalid ids: {groups.rejection}"
            )
        if not groups:
            self._discard(pending)
            return accepted
        try:
            row = self._wal.finish_append(pending, parts=len(groups))
        except WALStorageError as error:
            self._counters.add("storage_errors")
            raise Backpressure(str(error), self._config.retry_after_seconds) from None
        except TimeoutError as error:
            raise NotAccepting(str(error)) from None
        self._counters.add("received_log_records" if logs else "received_spans", sum(g.items for g in groups))
        self._assembly.consume(ArrivedGroups(kind, groups, row, logs))
        return accepted

    def _discard(self, pending: PendingAppend) -> None:
        """Nothing of this request is kept: its row (if it was stored) is deleted at once."""
        try:
            self._wal.finish_append(pending, parts=0)
        except (WALStorageError, TimeoutError):
            pass  # not stored: nothing to delete

    def replay(self) -> None:
        """Deliver what a previous run acknowledged but did not deliver (at least once)."""
        for row in self._wal.recovered():
            self._counters.add("replayed_rows")
            if row.kind in (KIND_DIRECT_TRACES, KIND_DIRECT_LOGS, KIND_ANALYSIS) and (
                self._exporter is None or self._resume is None
            ):
                log.error("log row %d (%s) does not belong in this log; kept", row.row_id, row.kind)
                continue
            if row.kind == KIND_DIRECT_TRACES:
                self._wal.adopt(row, 1)
                self._exporter.submit(TRACES, row.body, [row.row_id], count_spans(row.body))
                continue
            if row.kind == KIND_DIRECT_LOGS:
                self._wal.adopt(row, 1)
                self._exporter.submit(LOGS, row.body, [row.row_id], 1)
                continue
            try:
                if row.kind == KIND_ANALYSIS:
                    trace_id, decision, _, _ = decode_header(row.body)
                    self._wal.adopt(row, 1)
                    self._resume(trace_id, decision, row.row_id)
                    continue
                groups = self.split(row.kind, row.body)
            except ValueError:  # a DecodeError, or a job that is not one
                log.error("write-ahead log row %d is unreadable; removing it", row.row_id)
                self._wal.adopt(row, 0)
                continue
            self._wal.adopt(row, len(groups))
            self._assembly.consume(
                ArrivedGroups(row.kind, groups, row.row_id, row.kind == KIND_LOGS, replayed=True)
            )
        if self._wal.recovered_rows:
            log.info("replayed %d requests from the write-ahead log", self._wal.recovered_rows)
