"""Wiring only: the chain receivers -> write-ahead log -> assembler -> analyser -> enricher -> exporter.

Each component lives in its own module; this one builds them, connects each to the next, starts
and stops them in order, and answers the receivers (it is their handler). Embed it in-process::

    from otel_blame.processor import BlameProcessor, load_config

    config = load_config(overrides={"exporter": {"endpoint": "127.0.0.1:4317"},
                                    "receivers": {"grpc_endpoint": "127.0.0.1:0"}})
    with BlameProcessor(config) as processor:
        ...  # send OTLP to processor.grpc_endpoint / processor.http_endpoint

Extension points: ``http_routes`` (Starlette routes or mounts added to the HTTP receiver's app,
behind the same bearer token) and ``processor.analyser.add_listener(callback)`` (called with each
finished attribution, see :mod:`otel_blame.processor.analyser`).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from otel_blame.alerting.metrics import CulpritMetrics
from otel_blame.alerting.webhook import WebhookNotifier
from otel_blame.attribution.result import Attribution
from otel_blame.processor.analyser import (
    AttributionListener,
    TraceAnalyser,
    Verdict,
    forward_unchanged,
    retained_trace,
)
from otel_blame.processor.assembler import AssemblyStage, BufferedTrace, TraceAssembler
from otel_blame.processor.attributor import AttributionRunner
from otel_blame.processor.config import ConfigError, ProcessorConfig
from otel_blame.processor.counters import Counters, ProcessorCollector
from otel_blame.processor.cross_run import FILE_NAME as CROSS_RUN_FILE
from otel_blame.processor.cross_run import CrossRunStatistics
from otel_blame.processor.detector import FailureDetector
from otel_blame.processor.enricher import BlameEnricher
from otel_blame.processor.errors import Accepted, NotAccepting, VerdictNotFound
from otel_blame.processor.exporter import LOGS, TRACES, OTLPExporter
from otel_blame.processor.ingest import Ingest
from otel_blame.processor.receivers import GRPCReceiver, HTTPReceiver
from otel_blame.processor.retention import RetainedTraces
from otel_blame.processor.wal import KIND_LOGS, KIND_TRACES, WALFull, WALStorageError, WriteAheadLog
from otel_blame.processor.wire import TraceGroup
from otel_blame.redaction import Redactor
from otel_blame.ui.attach import attach_blame_ui

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from otel_blame.store.records import StoredRun as StoredBlame

log = logging.getLogger(__name__)


class BlameProcessor:
    """One processor instance: ``start()``/``stop()`` or use as a context manager."""

    def __init__(
        self,
        config: ProcessorConfig,
        *,
        redactor: Redactor | None = None,
        metrics: CulpritMetrics | None = None,
        enricher: BlameEnricher | None = None,
        http_routes: Sequence[BaseRoute] = (),
        listeners: Sequence[AttributionListener] = (),
    ) -> None:
        self.config = config
        self.metrics = metrics or CulpritMetrics()
        self.counters = Counters()
        self._redactor = redactor or Redactor()
        self._enricher = enricher or BlameEnricher()
        self._http_routes = list(http_routes)
        self._listeners = list(listeners)
        self._blame_ui: Any = None  # the blame store and web UI, opened by start()
        self._runner = AttributionRunner(config.attribution, redactor)  # validates the method names
        self._detector = FailureDetector(config.detection)
        self._assembler = TraceAssembler(config.assembly)
        self._retained = RetainedTraces(config.verdicts)
        self._wal: WriteAheadLog | None = None
        self._exporter: OTLPExporter | None = None
        self._notifier: WebhookNotifier | None = None
        self._cross_run: CrossRunStatistics | None = None
        self._stage: AssemblyStage | None = None
        self._ingest: Ingest | None = None
        self.analyser: TraceAnalyser | None = None
        self._grpc: GRPCReceiver | None = None
        self._http: HTTPReceiver | None = None
        self._started = False
        self.metrics.registry.register(ProcessorCollector(self.stats))

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> BlameProcessor:
        if self._started:
            return self
        config = self.config
        wal = self._wal = WriteAheadLog(config.wal.dir, config.wal.max_bytes, config.wal.reserve_bytes)
        listeners, http_routes = list(self._listeners), list(self._http_routes)  # this start's own
        try:  # the blame store: a listener keeps and counts each blame; /ui/, /api/, /metrics read it
            self._blame_ui = attach_blame_ui(config, listeners, http_routes, self.metrics)
        except BaseException:
            wal.close()
            raise
        try:
            exporter = self._exporter = OTLPExporter(config.exporter, wal.release)
        except BaseException:
            wal.close()
            raise
        if config.alerting.webhook is not None:
            self._notifier = WebhookNotifier(config.alerting.webhook)
        if config.cross_run.enabled:
            try:  # in the shared store when it is one (replicas then count every run), else SQLite
                shared = getattr(self._blame_ui, "shared_cross_run", lambda _config: None)(config.cross_run)
                self._cross_run = shared or CrossRunStatistics(
                    config.cross_run,
                    config.cross_run.path or config.wal.dir / CROSS_RUN_FILE,
                    min_free_bytes=config.wal.reserve_bytes,
                )
            except (OSError, sqlite3.Error) as error:
                self._teardown()
                raise ConfigError(f"cross_run: cannot open its statistics: {error}") from None
        analyser = self.analyser = TraceAnalyser(
            config,
            wal=wal,
            exporter=exporter,
            retained=self._retained,
            counters=self.counters,
            metrics=self.metrics,
            enricher=self._enricher,
            runner=self._runner,
            redactor=self._redactor,
            notifier=self._notifier,
            cross_run=self._cross_run,
        )
        for listener in listeners:
            analyser.add_listener(listener)
        stage = self._stage = AssemblyStage(
            self._assembler,
            config.assembly,
            forward_group=self._forward_group,
            forward_trace=lambda trace: forward_unchanged(exporter, trace),
            complete=self._complete,
            late=self._late,
        )
        self._ingest = Ingest(wal, config.wal, stage, exporter, self.counters, self._detector.is_failed)
        stage.start()
        try:
            self._ingest.replay()
            if config.receivers.grpc_endpoint:
                self._grpc = GRPCReceiver(config.receivers.grpc_endpoint, config.receivers, self)
            if config.receivers.http_endpoint:
                self._http = HTTPReceiver(config.receivers.http_endpoint, config.receivers, self, http_routes)
        except BaseException:  # e.g. a port in use: leave nothing running behind
            self._teardown()
            raise
        self._ingest.accepting = True
        if self._grpc is not None:
            self._grpc.start()
        if self._http is not None:
            self._http.start()
        self._started = True
        log.info(
            "otel-blame processor ready: grpc=%s http=%s downstream=%s wal=%s method=%s",
            self.grpc_endpoint,
            self.http_endpoint,
            config.exporter.endpoint,
            config.wal.dir,
            config.attribution.method,
        )
        return self

    def stop(self, timeout: float | None = None) -> bool:
        """Stop receiving, complete every buffered trace, flush downstream; True only when the
        write-ahead log is empty afterwards (everything delivered and deleted).

        Whatever is not delivered within the timeout stays in the write-ahead log for the next start."""
        if not self._started:
            return True
        deadline = time.monotonic() + (self.config.shutdown_timeout if timeout is None else timeout)
        assert self._ingest is not None and self._stage is not None and self.analyser is not None
        assert self._exporter is not None and self._wal is not None
        self._ingest.accepting = False
        if self._grpc is not None:
            self._grpc.stop(grace=min(2.0, max(0.0, deadline - time.monotonic())))
        self._stage.stop()
        self._stage.drain()
        self.analyser.wait_idle(deadline)
        self._exporter.flush(max(0.0, deadline - time.monotonic()))
        self._teardown()
        delivered = self._wal.empty
        self._started = False
        log.info(
            "otel-blame processor stopped (%s)",
            "all delivered" if delivered else f"{self._wal.rows_on_disk} requests kept in the log",
        )
        return delivered

    def _teardown(self) -> None:
        if self._http is not None:
            self._http.stop()
        if self._stage is not None:
            self._stage.stop()
        if self._exporter is not None:
            self._exporter.close()
        if self.analyser is not None:
            self.analyser.close()
        if self._notifier is not None:
            self._notifier.close(timeout=2)
        if self._wal is not None:
            self._wal.close()
        if self._cross_run is not None:
            self._cross_run.close()
            self._cross_run = None
        if self._blame_ui is not None:
            self._blame_ui.close()
            self._blame_ui = None

    def __enter__(self) -> BlameProcessor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def ready(self) -> bool:
        return self._ingest is not None and self._ingest.accepting

    @property
    def grpc_endpoint(self) -> str | None:
        return self._grpc.endpoint if self._grpc is not None else None

    @property
    def http_endpoint(self) -> str | None:
        return self._http.endpoint if self._http is not None else None

    # -- the receivers' handler --------------------------------------------------------------
    def accept_traces(self, body: bytes) -> Accepted:
        """Store one ExportTraceServiceRequest durably and route it; raises an IngestError if not."""
        if self._ingest is None:
            raise NotAccepting("the processor is not started")
        return self._ingest.accept(KIND_TRACES, body)

    def accept_logs(self, body: bytes) -> Accepted:
        if self._ingest is None:
            raise NotAccepting("the processor is not started")
        return self._ingest.accept(KIND_LOGS, body)

    # -- links of the chain ------------------------------------------------------------------
    def _forward_group(self, kind: str, group: TraceGroup, row: int) -> None:
        assert self._exporter is not None
        self._exporter.submit(LOGS if kind == KIND_LOGS else TRACES, group.payload, [row], group.items)

    def _late(self, group: TraceGroup, logs: bool) -> None:
        self._retained.add_late(group.trace_id, group.payload, logs=logs)
        if not logs and group.root_failed and self.analyser is not None:
            self.analyser.submit_late_root(group.trace_id)

    def _complete(self, trace: BufferedTrace) -> None:
        """A trace is whole: forward it (no agent, too big, succeeded) or have it analysed."""
        assert self._exporter is not None and self.analyser is not None
        if trace.overflowed or not trace.has_agent or not trace.span_payloads:
            forward_unchanged(self._exporter, trace)
            return
        if not (trace.root_failed or trace.verdict_failed) and trace.has_root:
            forward_unchanged(self._exporter, trace)
            self._retained.keep(trace.trace_id, time.monotonic(), trace.span_payloads, trace.log_payloads)
            self.metrics.record_trace("success", False)
            self.analyser.observe(trace)  # counted in the cross-run statistics, when they are kept
            return
        self.analyser.submit(trace)

    # -- late verdicts -----------------------------------------------------------------------
    def submit_verdict(
        self, trace_id: str, outcome: str, expected_output: str | None = None
    ) -> dict[str, Any]:
        """A failure known only after the trace completed. Returns what was done (see docs)."""
        if not self.ready or self.analyser is None:
            raise NotAccepting("the processor is not accepting data right now")
        try:
            raw_id = bytes.fromhex(trace_id)
        except ValueError:
            raw_id = b""
        if len(raw_id) != 16 or not any(raw_id):
            raise ValueError(f"trace_id must be 32 hex digits, not all zero, got {trace_id!r}")
        self.counters.add("verdicts")
        if outcome == "failure" and self._assembler.mark_failed(raw_id, expected_output):
            return {
                "status": "pending",
                "trace_id": trace_id,
                "detail": "attributed when the trace completes",
            }
        if outcome != "failure" and self._assembler.is_buffered(raw_id):
            return {"status": "recorded", "trace_id": trace_id}
        stored = self._blame_ui.stored_blame(trace_id) if self._blame_ui is not None else None
        if stored is not None:  # attributed already, here or by another replica sharing the store
            if outcome != "failure":
                return {"status": "recorded", "trace_id": trace_id}
            return _verdict_answer(trace_id, "already_attributed", stored, None)
        retained = self._retained.get(raw_id, time.monotonic())
        if retained is None:
            raise VerdictNotFound(f"trace {trace_id} is not among the recently completed traces")
        if outcome != "failure":
            return {"status": "recorded", "trace_id": trace_id}
        with retained.lock:
            if retained.attribution is not None:  # no store, or its write is still in flight
                return _verdict_answer(trace_id, "already_attributed", retained.attribution, None)
            try:
                result = self.analyser.verdict(retained_trace(retained), Verdict(expected_output))
            except (WALFull, WALStorageError) as error:
                raise NotAccepting(str(error)) from None
            assert result.attribution is not None
            retained.attribution = result.attribution
        return _verdict_answer(trace_id, "attributed", result.attribution, result.blame_span_id)

    # -- observability -----------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters and gauges of every component, for tests, benchmarks and /metrics."""
        out: dict[str, Any] = self.counters.snapshot()
        out.update({f"assembly_{key}": value for key, value in vars(self._assembler.stats()).items()})
        if self._exporter is not None:
            out.update(
                exported_spans=self._exporter.exported_spans,
                exported_log_records=self._exporter.exported_log_records,
                export_failed_attempts=self._exporter.failed_attempts,
                export_rejected_items=self._exporter.rejected_items,
                export_pending_items=self._exporter.pending,
            )
        if self._wal is not None:
            out.update(
                wal_bytes=self._wal.size_bytes,
                wal_pending_rows=self._wal.pending_rows,
                wal_failed_commits=self._wal.failed_commits,
            )
        out.update(retained_traces=len(self._retained), retained_bytes=self._retained.size_bytes)
        return out

    def render_metrics(self) -> tuple[bytes, str]:
        """The Prometheus exposition of the culprit counters and the processor's own, and its type."""
        return generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST


def _verdict_answer(
    trace_id: str, status: str, attribution: Attribution | StoredBlame, span_id: str | None
) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "status": status,
        "trace_id": trace_id,
        "agent": attribution.agent,
        "step": attribution.step,
        "confidence": attribution.confidence,
        "reason": attribution.reason,
        "method": attribution.method,
    }
    if attribution.model:
        answer["model"] = attribution.model
    if span_id:
        answer["blame_span_id"] = span_id
    return answer
