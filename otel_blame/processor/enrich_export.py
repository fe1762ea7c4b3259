"""The last stage before the exporter: analysed traces in, spans (enriched or not) out, verdicts published.

For each :class:`~otel_blame.processor.analyser.Analysed` item it forwards the trace as it arrived,
or exports its spans with the blame written onto them, or, for a trace that went out already,
exports one late ``blame {agent}`` span (durable in the write-ahead log before it is sent): both
made where the blame was concluded (:func:`~otel_blame.processor.analysis.conclude`, in the
analysis worker as a rule). It keeps completed traces for late verdicts and publishes each
trace's verdict to the listeners (:mod:`.listeners`), each blame's spans leaving only once the
listeners that keep blames have it.

Late blame spans of traces forwarded first (:mod:`.analyser`) come in bursts when a backlog
drains; :class:`LateSpanWriter` stores all that wait in one log row (one fsync) and sends them as
one request, instead of one durable write each. Once that row is stored, the deferred analysis
jobs it answers (:mod:`.jobs`) leave the log: their blame is kept, in the blame listeners and in
the late span on its way downstream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otel_blame.processor.analyser import Analysed, Handling
from otel_blame.processor.assembler import BufferedTrace
from otel_blame.processor.batching import BatchingWorker
from otel_blame.processor.config import EnrichmentConfig
from otel_blame.processor.counters import Counters
from otel_blame.processor.enricher import EvaluationEvent, evaluation_log_request
from otel_blame.processor.exporter import LOGS, TRACES, ExportItem, OTLPExporter
from otel_blame.processor.listeners import TraceVerdict, VerdictBus
from otel_blame.processor.retention import RetainedTraces
from otel_blame.processor.wal import (
    KIND_DIRECT_LOGS,
    KIND_DIRECT_TRACES,
    WALClosed,
    WALFull,
    WALStorageError,
    WriteAheadLog,
)
from otel_blame.trajectory import Outcome

log = logging.getLogger(__name__)


class EnrichExportStage:
    """A :class:`~otel_blame.processor.stage.Consumer` of analysed traces."""

    def __init__(
        self,
        config: EnrichmentConfig,
        *,
        wal: WriteAheadLog,
        exporter: OTLPExporter,
        retained: RetainedTraces,
        bus: VerdictBus,
        counters: Counters,
    ) -> None:
        self._config = config
        self._wal = wal
        self._exporter = exporter
        self._retained = retained
        self._bus = bus
        self._counters = counters
        self._late_spans = LateSpanWriter(wal, exporter, counters)

    def wait_idle(self, deadline: float) -> bool:
        return self._late_spans.wait_idle(deadline)

    def close(self) -> None:
        self._late_spans.close()

    def consume(self, item: Analysed) -> None:
        trace, handling = item.trace, item.handling
        if handling == Handling.UNCHANGED:
            self._forward(trace)
        elif handling in (Handling.SUCCESS, Handling.DEFERRED):
            self._forward(trace)
            self._retain(trace)
        elif handling == Handling.OBSERVED:
            self._publish(item, Outcome.SUCCESS if trace.has_root else Outcome.UNKNOWN)
        elif item.late:
            if item.attribution is None:
                self._publish(item, Outcome.FAILURE)
                if item.job_row:  # nothing to blame: the job is done
                    self._wal.release([item.job_row])
            else:
                self.blame_late(item, remember=True)
        elif item.attribution is None:  # failed, but not attributed: on unchanged, counted
            self._publish(item, Outcome.FAILURE)
            self._forward(trace)
            self._retain(trace)
        else:
            self._export_blamed(item)

    def _export_blamed(self, item: Analysed) -> None:
        """The trace's spans with their blame, once the blame is kept."""
        trace, analysis, blamed = item.trace, item.analysis, item.blamed
        assert analysis is not None and blamed is not None
        enriched, evaluation = blamed.payload, blamed.evaluation
        self._retained.keep(
            trace.trace_id, time.monotonic(), [enriched], trace.log_payloads, blamed.attribution
        )

        def export() -> None:  # once the blame is kept
            self._exporter.consume(ExportItem(TRACES, enriched, trace.span_refs, trace.spans))
            if trace.log_payloads:
                logs = b"".join(trace.log_payloads)
                self._exporter.consume(ExportItem(LOGS, logs, trace.log_refs, trace.log_records))
            if evaluation is not None:
                self._send_evaluation_log(evaluation, analysis.resource, trace.trace_id.hex())

        self._publish(item, Outcome.FAILURE, then=export)

    def blame_late(self, item: Analysed, *, remember: bool) -> str:
        """One ``blame {agent}`` span for a trace that went out already; returns its span id.

        ``remember`` (a trace forwarded first, a late failed root): the span joins the next batch
        of late spans, and the blame is noted on the retained copy (a later verdict finds it).
        Otherwise (a verdict waiting for its answer) it is stored now, and the log's error raised
        when it cannot be (the verdict then asks to retry)."""
        analysis, attribution, blamed = item.analysis, item.attribution, item.blamed
        assert analysis is not None and attribution is not None and blamed is not None
        payload, evaluation = blamed.payload, blamed.evaluation
        assert evaluation is not None  # a late blame span always carries its evaluation
        trace_hex = item.trace.trace_id.hex()
        if remember:
            kept = self._retained.get(item.trace.trace_id, time.monotonic())
            if kept is not None:
                with kept.lock:
                    kept.attribution = kept.attribution or attribution

            def export() -> None:  # once the blame is kept
                self._late_spans.put(LateSpan(payload, item.job_row))
                self._send_evaluation_log(evaluation, analysis.resource, trace_hex)

        else:
            row = self._wal.append(KIND_DIRECT_TRACES, payload, parts=1)

            def export() -> None:  # once the blame is kept
                self._exporter.consume(ExportItem(TRACES, payload, [row], 1))
                self._send_evaluation_log(evaluation, analysis.resource, trace_hex)

        self._publish(item, Outcome.FAILURE, then=export)
        return evaluation.span_id.hex()

    def _publish(self, item: Analysed, outcome: Outcome, then: Callable[[], None] | None = None) -> None:
        """The trace's verdict to the listeners; ``then`` (its blamed spans leave) once the blame is kept."""
        analysis = item.analysis
        self._bus.publish(
            TraceVerdict(
                trace_id=item.trace.trace_id.hex(),
                outcome=outcome.value,
                service=analysis.service if analysis is not None else "",
                workflow_service=analysis.workflow_service if analysis is not None else "",
                trajectory=analysis.trajectory if analysis is not None else None,
                attribution=item.attribution,
                listened=item.blamed.listened if item.blamed is not None else None,
                cause=item.blamed.cause if item.blamed is not None else None,
                pattern=item.blamed.pattern if item.blamed is not None else None,
                late=item.late,
                finished_at_unix=time.time(),
                replayed=item.trace.replayed,
            ),
            then,
        )

    def _forward(self, trace: BufferedTrace) -> None:
        for export in trace.export_items():
            self._exporter.consume(export)

    def _retain(self, trace: BufferedTrace) -> None:
        self._retained.keep(trace.trace_id, time.monotonic(), trace.span_payloads, trace.log_payloads)

    def _send_evaluation_log(self, evaluation: EvaluationEvent, resource: bytes, trace_hex: str) -> None:
        """The evaluation event as a log record (unless turned off), durable like a late span. The
        blame is already on the spans, so a log that cannot store it, or a downstream that takes no
        logs, costs only this copy."""
        if not self._config.evaluation_log_records:
            return
        if not self._exporter.accepts_logs():
            self._counters.add("evaluation_logs_refused")
            return
        payload = evaluation_log_request(evaluation, Resource.FromString(resource) if resource else None)
        try:
            row = self._wal.append(KIND_DIRECT_LOGS, payload, parts=1)
        except (WALFull, WALStorageError, WALClosed) as error:
            self._counters.add("evaluation_logs_dropped")
            log.warning("trace %s: evaluation log record not sent: %s", trace_hex, error)
            return
        self._exporter.consume(ExportItem(LOGS, payload, [row], 1))


@dataclass(frozen=True, slots=True)
class LateSpan:
    """A late ``blame {agent}`` span (a request payload), and the deferred job it answers (0: none)."""

    payload: bytes
    job_row: int = 0


class LateSpanWriter:
    """Stores the late blame spans that wait in one write-ahead log row and sends them as one
    request (serialised requests concatenate into one), on its own thread; then releases the
    deferred jobs they answer. A batch the log cannot store is dropped (counted) and its jobs stay
    in the log, to be analysed again on the next start."""

    def __init__(
        self, wal: WriteAheadLog, exporter: OTLPExporter, counters: Counters, max_batch: int = 1000
    ) -> None:
        self._wal = wal
        self._exporter = exporter
        self._counters = counters
        self._worker: BatchingWorker[LateSpan] = BatchingWorker(
            self._write, name="otel-blame-late-spans", max_batch=max_batch
        )

    def put(self, span: LateSpan) -> None:
        self._worker.put(span)

    def wait_idle(self, deadline: float) -> bool:
        return self._worker.wait_idle(deadline)

    def close(self) -> None:
        self._worker.close()

    def _write(self, batch: list[LateSpan]) -> None:
        body = b"".join(span.payload for span in batch)
        try:
            row = self._wal.append(KIND_DIRECT_TRACES, body, parts=1)
        except (WALFull, WALStorageError, WALClosed) as error:
            self._counters.add("late_blames_dropped", len(batch))
            log.warning("%d late blame span(s) not sent: %s", len(batch), error)
            return
        self._exporter.consume(ExportItem(TRACES, body, [row], len(batch)))
        jobs = [span.job_row for span in batch if span.job_row]
        if jobs:
            self._wal.release(jobs)
