"""The last stage before the exporter: analysed traces in, spans (enriched or not) out, verdicts published.

For each :class:`~otel_blame.processor.analyser.Analysed` item it forwards the trace as it arrived,
or writes the blame onto its spans (:class:`~otel_blame.processor.enricher.BlameEnricher`) and
exports those, or, for a trace that went out already, exports one late ``blame {agent}`` span
(durable in the write-ahead log before it is sent); it keeps completed traces for late verdicts
and publishes each trace's verdict to the listeners (:mod:`.listeners`).
"""

from __future__ import annotations

import logging
import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otel_blame.attribution.result import Attribution
from otel_blame.processor.analyser import Analysed, Handling
from otel_blame.processor.assembler import BufferedTrace
from otel_blame.processor.config import EnrichmentConfig
from otel_blame.processor.counters import Counters
from otel_blame.processor.enricher import BlameEnricher, EvaluationEvent, evaluation_log_request
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
        enricher: BlameEnricher,
        bus: VerdictBus,
        counters: Counters,
    ) -> None:
        self._config = config
        self._wal = wal
        self._exporter = exporter
        self._retained = retained
        self._enricher = enricher
        self._bus = bus
        self._counters = counters

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
            else:
                self.blame_late(item, remember=True)
        elif item.attribution is None:  # failed, but not attributed: on unchanged, counted
            self._publish(item, Outcome.FAILURE)
            self._forward(trace)
            self._retain(trace)
        else:
            self._enrich_and_export(item, item.attribution)

    def _enrich_and_export(self, item: Analysed, attribution: Attribution) -> None:
        trace, analysis = item.trace, item.analysis
        assert analysis is not None and analysis.trajectory is not None
        request = ExportTraceServiceRequest.FromString(b"".join(trace.span_payloads))
        evaluation = self._enricher.enrich(request.resource_spans, analysis.trajectory, attribution)
        enriched = request.SerializeToString()
        self._publish(item, Outcome.FAILURE)
        self._exporter.consume(ExportItem(TRACES, enriched, trace.span_refs, trace.spans))
        if trace.log_payloads:
            logs = b"".join(trace.log_payloads)
            self._exporter.consume(ExportItem(LOGS, logs, trace.log_refs, trace.log_records))
        self._retained.keep(trace.trace_id, time.monotonic(), [enriched], trace.log_payloads, attribution)
        if evaluation is not None:
            self._send_evaluation_log(evaluation, analysis.resource, trace.trace_id.hex())

    def blame_late(self, item: Analysed, *, remember: bool) -> str:
        """One ``blame {agent}`` span for a trace that went out already; returns its span id.

        Raises the log's error when the span cannot be stored (a verdict then asks to retry);
        ``remember``: also note the blame on the retained copy (a later verdict finds it)."""
        analysis, attribution = item.analysis, item.attribution
        assert analysis is not None and analysis.trajectory is not None and attribution is not None
        resource = Resource.FromString(analysis.resource) if analysis.resource else None
        payload, evaluation = self._enricher.late_blame_span(analysis.trajectory, attribution, resource)
        try:
            row = self._wal.append(KIND_DIRECT_TRACES, payload, parts=1)
        except (WALFull, WALStorageError, WALClosed) as error:
            if not remember:
                raise
            self._counters.add("late_blames_dropped")
            log.warning("trace %s: late blame span not sent: %s", item.trace.trace_id.hex(), error)
            self._publish(item, Outcome.FAILURE)
            return evaluation.span_id.hex()
        self._publish(item, Outcome.FAILURE)
        self._exporter.consume(ExportItem(TRACES, payload, [row], 1))
        if remember:
            kept = self._retained.get(item.trace.trace_id, time.monotonic())
            if kept is not None:
                with kept.lock:
                    kept.attribution = kept.attribution or attribution
        self._send_evaluation_log(evaluation, analysis.resource, item.trace.trace_id.hex())
        return evaluation.span_id.hex()

    def _publish(self, item: Analysed, outcome: Outcome) -> None:
        analysis = item.analysis
        self._bus.publish(
            TraceVerdict(
                trace_id=item.trace.trace_id.hex(),
                outcome=outcome.value,
                service=analysis.service if analysis is not None else "",
                workflow_service=analysis.workflow_service if analysis is not None else "",
                trajectory=analysis.trajectory if analysis is not None else None,
                attribution=item.attribution,
                late=item.late,
                finished_at_unix=time.time(),
            )
        )

    def _forward(self, trace: BufferedTrace) -> None:
        for export in trace.export_items():
            self._exporter.consume(export)

    def _retain(self, trace: BufferedTrace) -> None:
        self._retained.keep(trace.trace_id, time.monotonic(), trace.span_payloads, trace.log_payloads)

    def _send_evaluation_log(self, evaluation: EvaluationEvent, resource: bytes, trace_hex: str) -> None:
        """The evaluation event as a log record (when configured), durable like a late span. The blame
        is already on the spans, so a log that cannot store it costs only this copy."""
        if not self._config.evaluation_log_records:
            return
        payload = evaluation_log_request(evaluation, Resource.FromString(resource) if resource else None)
        try:
            row = self._wal.append(KIND_DIRECT_LOGS, payload, parts=1)
        except (WALFull, WALStorageError, WALClosed) as error:
            self._counters.add("evaluation_logs_dropped")
            log.warning("trace %s: evaluation log record not sent: %s", trace_hex, error)
            return
        self._exporter.consume(ExportItem(LOGS, payload, [row], 1))
