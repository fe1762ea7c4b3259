"""Wiring only: receivers -> write-ahead log -> assembler -> analysis -> enrich+export -> exporter.

Each stage lives in its own module and consumes through the one interface of :mod:`.stage`; this
module builds them, connects each to the next, starts and stops them in order, and answers the
receivers (it is their handler). A trace passes through here once, when its request arrives.
Embed it in-process::

    from otel_blame.processor import BlameProcessor, load_config

    config = load_config(overrides={"exporter": {"endpoint": "127.0.0.1:4317"},
                                    "receivers": {"grpc_endpoint": "127.0.0.1:0"}})
    with BlameProcessor(config) as processor:
        ...  # send OTLP to processor.grpc_endpoint / processor.http_endpoint

Extension points: ``http_routes`` (Starlette routes or mounts added to the HTTP receiver's app,
behind the same bearer token), ``listeners`` / :meth:`BlameProcessor.add_listener` (called with
each blame, see :mod:`.listeners`), and ``extensions``: callables run at start with the listener
and route lists and the culprit metrics, which may add to them and return what to close on stop
(and where already-stored blames are read; what they return may also offer shared cross-run
statistics, ``shared_cross_run``, and a pattern book, ``pattern_book``). ``otel-blame serve``
plugs the blame store and the web UI in this way (:mod:`otel_blame.commands.serve`); the processor
itself knows neither.
"""

from __future__ import annotations

import logging
import multiprocessing
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from otel_blame.alerting.metrics import CulpritMetrics
from otel_blame.alerting.webhook import WebhookNotifier
from otel_blame.processor.analyser import AnalysisStage
from otel_blame.processor.assembler import AssemblyStage, TraceAssembler
from otel_blame.processor.attributor import AttributionRunner
from otel_blame.processor.config import ConfigError, ProcessorConfig
from otel_blame.processor.counters import Counters, ProcessorCollector
from otel_blame.processor.cross_run import FILE_NAME as CROSS_RUN_FILE
from otel_blame.processor.cross_run import CrossRunStatistics
from otel_blame.processor.decision import FailureDetector
from otel_blame.processor.enrich_export import EnrichExportStage
from otel_blame.processor.enricher import BlameEnricher
from otel_blame.processor.errors import Accepted, NotAccepting
from otel_blame.processor.exporter import OTLPExporter
from otel_blame.processor.ingest import Ingest
from otel_blame.processor.late import BlameRecord, LateVerdicts
from otel_blame.processor.listeners import (
    AlertingListener,
    AttributionListener,
    BlameListeners,
    CrossRunCounter,
    MetricsListener,
    PatternAlertingListener,
    VerdictBus,
    VerdictListener,
)
from otel_blame.processor.patterns import FILE_NAME as PATTERNS_FILE
from otel_blame.processor.patterns import LocalPatternBook, PatternBook
from otel_blame.processor.receivers import GRPCReceiver, HTTPReceiver
from otel_blame.processor.retention import RetainedTraces
from otel_blame.processor.shards import ReceivingProcesses
from otel_blame.processor.wal import KIND_LOGS, KIND_TRACES, WriteAheadLog
from otel_blame.redaction import Redactor

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

log = logging.getLogger(__name__)


class Attachment(Protocol):
    """What an extension returns: closed on stop; may answer a verdict from blames stored elsewhere."""

    def close(self) -> None: ...

    def stored_blame(self, trace_id: str) -> BlameRecord | None: ...


# (listeners, http_routes, metrics) -> what to close on stop, or None
Extension = Callable[[list[AttributionListener], list["BaseRoute"], CulpritMetrics], Attachment | None]


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
        extensions: Sequence[Extension] = (),
    ) -> None:
        self.config = config
        self.metrics = metrics or CulpritMetrics(
            count_undecided=config.alerting.count_undecided, max_patterns=config.patterns.max_series
        )
        self.counters = Counters()
        self._redactor = redactor or Redactor()
        self._enricher = enricher or BlameEnricher()
        self._http_routes = list(http_routes)
        self._listeners = list(listeners)
        self._extensions = list(extensions)
        AttributionRunner(config.attribution, redactor)  # checks the method names before anything starts
        self._detector = FailureDetector(config.detection)
        self._assembler = TraceAssembler(config.assembly)
        self._retained = RetainedTraces(config.verdicts)
        self._attachments: list[Attachment] = []
        self._routes: list[BaseRoute] = []
        self._blame_listeners = BlameListeners()
        self._wal: WriteAheadLog | None = None
        self._exporter: OTLPExporter | None = None
        self._notifier: WebhookNotifier | None = None
        self._cross_run: CrossRunStatistics | None = None
        self._patterns: PatternBook | None = None
        self._bus: VerdictBus | None = None
        self._analysis: AnalysisStage | None = None
        self._export: EnrichExportStage | None = None
        self._late: LateVerdicts | None = None
        self._stage: AssemblyStage | None = None
        self._ingest: Ingest | None = None
        self._grpc: GRPCReceiver | None = None
        self._shards: ReceivingProcesses | None = None  # receiving processes (receivers.grpc_processes)
        self._http: HTTPReceiver | None = None
        self._started = False
        self.metrics.registry.register(ProcessorCollector(self.stats))

    def add_listener(self, listener: AttributionListener) -> None:
        """Call ``listener`` with every blame assigned (see :mod:`otel_blame.processor.listeners`)."""
        self._listeners.append(listener)
        if self._started:
            self._blame_listeners.listeners.append(listener)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> BlameProcessor:
        if self._started:
            return self
        config = self.config
        shared = None  # with receiving processes, wal.max_bytes bounds all their logs and this one together
        if config.receivers.grpc_endpoint and config.receivers.grpc_processes:
            shared = multiprocessing.get_context("forkserver").Value("q", 0)
        wal = self._wal = WriteAheadLog(
            config.wal.dir, config.wal.max_bytes, config.wal.reserve_bytes, shared=shared
        )
        try:
            self._build(wal)
            assert self._ingest is not None
            assert self._analysis is not None
            self._analysis.wait_ready(timeout=60)
            self._ingest.replay()
            if shared is not None:
                assert self._stage is not None
                self._shards = ReceivingProcesses(
                    config,
                    config.receivers.grpc_processes,
                    assembly=self._stage,
                    release_own=wal.release,
                    shared_bytes=shared,
                )
                self._shards.start()
            elif config.receivers.grpc_endpoint:
                self._grpc = GRPCReceiver(config.receivers.grpc_endpoint, config.receivers, self)
            if config.receivers.http_endpoint:
                self._http = HTTPReceiver(
                    config.receivers.http_endpoint, config.receivers, self, self._routes
                )
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
            "otel-blame processor ready: grpc=%s http=%s downstream=%s wal=%s method=%s analysis workers=%d",
            self.grpc_endpoint,
            self.http_endpoint,
            config.exporter.endpoint,
            config.wal.dir,
            config.attribution.method,
            self._analysis.workers if self._analysis is not None else 0,
        )
        return self

    def _build(self, wal: WriteAheadLog) -> None:
        """Build and link the chain, last stage first."""
        config = self.config
        listeners, self._routes = list(self._listeners), list(self._http_routes)  # this start's own
        for extension in self._extensions:
            attached = extension(listeners, self._routes, self.metrics)
            if attached is not None:
                self._attachments.append(attached)
        self._blame_listeners.listeners = listeners
        exporter = self._exporter = OTLPExporter(config.exporter, self._delivered)
        if config.alerting.webhook is not None:
            self._notifier = WebhookNotifier(config.alerting.webhook)
        queued: list[VerdictListener] = []
        if config.cross_run.enabled:
            try:  # in a shared store an extension offers (replicas then count every run), else SQLite
                shared = next(
                    (
                        found
                        for attached in self._attachments
                        if (offer := getattr(attached, "shared_cross_run", None)) is not None
                        and (found := offer(config.cross_run)) is not None
                    ),
                    None,
                )
                self._cross_run = shared or CrossRunStatistics(
                    config.cross_run,
                    config.cross_run.path or config.wal.dir / CROSS_RUN_FILE,
                    min_free_bytes=config.wal.reserve_bytes,
                )
            except (OSError, sqlite3.Error) as error:
                raise ConfigError(f"cross_run: cannot open its statistics: {error}") from None
            queued.append(CrossRunCounter(self._cross_run, config.cross_run, self.counters))
        if config.patterns.enabled:
            self._patterns = self._pattern_book()
            queued.append(PatternAlertingListener(config.alerting, self.counters, self._notifier))
        queued.append(AlertingListener(config.alerting, self.counters, self._notifier))
        bus = self._bus = VerdictBus(
            inline=[MetricsListener(self.metrics, self.counters)],
            keeping=[self._blame_listeners],
            queued=queued,
            kept=self._blame_kept,
            counters=self.counters,
        )
        export = self._export = EnrichExportStage(
            config.enrichment,
            wal=wal,
            exporter=exporter,
            retained=self._retained,
            bus=bus,
            counters=self.counters,
        )
        analysis = self._analysis = AnalysisStage(
            config,
            out=export,
            counters=self.counters,
            redactor=self._redactor,
            wal=wal,
            enricher=self._enricher,
            cross_run=self._cross_run,
            patterns=self._patterns,
        )
        self._late = LateVerdicts(
            assembler=self._assembler,
            retained=self._retained,
            analysis=analysis,
            export=export,
            counters=self.counters,
            stored_blame=self._stored_blame,
        )
        stage = self._stage = AssemblyStage(
            self._assembler, config.assembly, complete=analysis, forward=exporter, late=self._late
        )
        self._ingest = Ingest(
            wal, config.wal, stage, exporter, self.counters, self._detector.failure_reason, analysis.resume
        )
        stage.start()

    def _pattern_book(self) -> PatternBook:
        """The book an extension offers (a blame store: every replica sharing it assigns the same
        patterns, and the UI reads them), else SQLite next to the write-ahead log."""
        config = self.config
        for attached in self._attachments:
            offer = getattr(attached, "pattern_book", None)
            if offer is not None and (book := offer(config.patterns)) is not None:
                return book
        try:
            return LocalPatternBook(config.patterns, config.patterns.path or config.wal.dir / PATTERNS_FILE)
        except (OSError, sqlite3.Error) as error:
            raise ConfigError(f"patterns: cannot open the pattern book: {error}") from None

    def stop(self, timeout: float | None = None) -> bool:
        """Stop receiving, complete and analyse every buffered trace, flush downstream; True only when
        the write-ahead log is empty afterwards (everything delivered and deleted).

        Whatever is not delivered within the timeout stays in the write-ahead log for the next start."""
        if not self._started:
            return True
        deadline = time.monotonic() + (self.config.shutdown_timeout if timeout is None else timeout)
        assert self._ingest is not None and self._stage is not None and self._analysis is not None
        assert self._exporter is not None and self._wal is not None and self._bus is not None
        assert self._export is not None
        self._ingest.accepting = False
        if self._grpc is not None:
            self._grpc.stop(grace=min(2.0, max(0.0, deadline - time.monotonic())))
        if self._shards is not None:  # returns once what they stored reached the assembler
            self._shards.stop_receiving(grace=min(2.0, max(0.0, deadline - time.monotonic())))
        self._stage.stop()
        self._stage.drain()
        self._analysis.wait_idle(deadline)
        self._bus.wait_idle(deadline)
        self._export.wait_idle(deadline)
        self._exporter.flush(max(0.0, deadline - time.monotonic()))
        shards = self._shards
        self._teardown()
        delivered = self._wal.empty and (shards is None or shards.empty)
        self._started = False
        kept = (self._wal.rows_on_disk or 0) + (shards.rows_left if shards is not None else 0)
        outcome = "all delivered" if delivered else f"{kept} rows kept in the logs"
        log.info("otel-blame processor stopped (%s)", outcome)
        return delivered

    def _teardown(self) -> None:
        if self._http is not None:
            self._http.stop()
        if self._stage is not None:
            self._stage.stop()
        if self._analysis is not None:
            self._analysis.close()
        if self._bus is not None:  # before the export: a verdict's blamed spans leave from the bus
            self._bus.close()
        if self._export is not None:
            self._export.close()
        if self._exporter is not None:
            self._exporter.close()
        if self._shards is not None:  # after the exporter: the last releases reach them first
            self._shards.close()
            self._shards = None
        if self._notifier is not None:
            self._notifier.close(timeout=2)
        if self._wal is not None:
            self._wal.close()
        if self._cross_run is not None:
            self._cross_run.close()
            self._cross_run = None
        if self._patterns is not None:
            self._patterns.close()
            self._patterns = None
        for attached in self._attachments:
            attached.close()
        self._attachments = []

    def __enter__(self) -> BlameProcessor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def ready(self) -> bool:
        return self._ingest is not None and self._ingest.accepting

    @property
    def grpc_endpoint(self) -> str | None:
        if self._shards is not None:
            return self._shards.endpoint
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

    def submit_verdict(
        self, trace_id: str, outcome: str, expected_output: str | None = None
    ) -> dict[str, Any]:
        """A failure (or success) known only after the trace completed. Returns what was done (see docs)."""
        if not self.ready or self._late is None:
            raise NotAccepting("the processor is not accepting data right now")
        if self._shards is not None:  # every span acknowledged so far is in the assembler first
            self._shards.stats()
        return self._late.submit_verdict(trace_id, outcome, expected_output)

    def _delivered(self, refs: list[int]) -> None:
        """The exporter's deliveries: each log row released in the log that holds it."""
        if self._shards is not None:
            self._shards.release(refs)
        elif self._wal is not None:
            self._wal.release(refs)

    def _blame_kept(self, trace_id: str) -> bool:
        """Whether a blame of this trace is kept already (by a listener that keeps blames durably)."""
        return self._stored_blame(trace_id) is not None

    def _stored_blame(self, trace_id: str) -> BlameRecord | None:
        for attached in self._attachments:
            stored = attached.stored_blame(trace_id)
            if stored is not None:
                return stored
        return None

    # -- observability -----------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters and gauges of every component, for tests, benchmarks and /metrics (the receiving
        processes asked first: what they acknowledged has reached the assembler by then)."""
        from_shards = self._shards.stats() if self._shards is not None else {}
        out: dict[str, Any] = self.counters.snapshot()
        out.update({f"assembly_{key}": value for key, value in vars(self._assembler.stats()).items()})
        if self._analysis is not None:
            out.update(
                analysis_pending_traces=self._analysis.pending, analysis_workers=self._analysis.workers
            )
        if self._exporter is not None:
            out.update(
                exported_spans=self._exporter.exported_spans,
                exported_log_records=self._exporter.exported_log_records,
                export_failed_attempts=self._exporter.failed_attempts,
                export_rejected_items=self._exporter.rejected_items,
                export_refused_log_records=self._exporter.refused_log_records,
                export_pending_items=self._exporter.pending,
            )
        if self._wal is not None:
            out.update(self._wal.stats(), wal_failed_commits=self._wal.failed_commits)
        out.update(retained_traces=len(self._retained), retained_bytes=self._retained.size_bytes)
        for key, value in from_shards.items():  # what the receiving processes counted and hold
            out[key] = out.get(key, 0) + value
        return out

    def render_metrics(self) -> tuple[bytes, str]:
        """The Prometheus exposition of the culprit counters and the processor's own, and its type."""
        return generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST
