"""The pipeline that wires the components: receivers -> write-ahead log -> assembler -> failure
detection -> attribution -> enrichment -> exporter, plus late verdicts and metrics.

Embed it in-process::

    from otel_blame.processor import BlameProcessor, load_config

    config = load_config(overrides={"exporter": {"endpoint": "127.0.0.1:4317"},
                                    "receivers": {"grpc_endpoint": "127.0.0.1:0"}})
    with BlameProcessor(config) as processor:
        ...  # send OTLP to processor.grpc_endpoint / processor.http_endpoint
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otel_blame import semconv as sc
from otel_blame.alerting.metrics import CulpritMetrics
from otel_blame.alerting.repeated import RepeatedCulpritDetector
from otel_blame.alerting.webhook import WebhookNotifier
from otel_blame.attribution.result import Attribution
from otel_blame.conventions import NoTrajectory, attributes_to_dict, build_trajectory, trajectory_from_spans
from otel_blame.processor.assembler import BufferedTrace, Route, TraceAssembler
from otel_blame.processor.attributor import AttributionRunner
from otel_blame.processor.config import ProcessorConfig
from otel_blame.processor.detector import FailureDetector
from otel_blame.processor.enricher import BlameEnricher
from otel_blame.processor.errors import Backpressure, InvalidRequest, NotAccepting, VerdictNotFound
from otel_blame.processor.exporter import LOGS, TRACES, OTLPExporter
from otel_blame.processor.grpc_receiver import GRPCReceiver
from otel_blame.processor.http_receiver import HTTPReceiver
from otel_blame.processor.retention import RetainedTraces
from otel_blame.processor.wal import (
    KIND_DIRECT_TRACES,
    KIND_LOGS,
    KIND_TRACES,
    WALClosed,
    WALFull,
    WriteAheadLog,
)
from otel_blame.processor.wire import DecodeError, TraceGroup, count_spans, split_logs, split_traces
from otel_blame.redaction import Redactor
from otel_blame.trajectory import Outcome, Trajectory

log = logging.getLogger(__name__)


class BlameProcessor:
    """One processor instance: ``start()``/``stop()`` or use as a context manager."""

    def __init__(
        self,
        config: ProcessorConfig,
        *,
        redactor: Redactor | None = None,
        metrics: CulpritMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or CulpritMetrics()
        self._detector = FailureDetector(config.detection)
        self._assembler = TraceAssembler(config.assembly)
        self._enricher = BlameEnricher()
        self._retained = RetainedTraces(config.verdicts)
        self._runner = AttributionRunner(config.attribution, redactor)
        self._analysis = ThreadPoolExecutor(
            max_workers=config.attribution.workers, thread_name_prefix="otel-blame-analyse"
        )
        self._analysis_lock = threading.Condition()
        self._analysis_pending = 0
        self._repeated = RepeatedCulpritDetector(config.alerting.repeated_culprit)
        self._notifier: WebhookNotifier | None = None
        self._wal: WriteAheadLog | None = None
        self._exporter: OTLPExporter | None = None
        self._grpc: GRPCReceiver | None = None
        self._http: HTTPReceiver | None = None
        self._ticker: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._accepting = False
        self._started = False
        self._counter_lock = threading.Lock()
        self._warned: set[tuple[str, str]] = set()  # (service, what): logged once each
        self.counters: dict[str, int] = {
            "received_spans": 0,
            "received_log_records": 0,
            "rejected_requests": 0,
            "attributed_traces": 0,
            "fallback_attributions": 0,
            "unattributed_failed_traces": 0,
            "no_trajectory_traces": 0,
            "agent_from_service_traces": 0,  # a step's agent was named by nothing but the service
            "late_root_failures": 0,
            "analysis_overflow_traces": 0,
            "verdicts": 0,
            "replayed_rows": 0,
            "alerts": 0,
        }

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> BlameProcessor:
        config = self.config
        if self._started:
            return self
        self._wal = WriteAheadLog(config.wal.dir, config.wal.max_bytes)
        if config.alerting.webhook is not None:
            self._notifier = WebhookNotifier(config.alerting.webhook)
        self._exporter = OTLPExporter(config.exporter, self._wal.release)
        self._ticker = threading.Thread(target=self._tick_loop, name="otel-blame-assembler", daemon=True)
        self._ticker.start()
        try:
            self._replay()
            if config.receivers.grpc_endpoint:
                self._grpc = GRPCReceiver(config.receivers.grpc_endpoint, config.receivers, self)
            if config.receivers.http_endpoint:
                self._http = HTTPReceiver(config.receivers.http_endpoint, config.receivers, self)
        except BaseException:  # e.g. a port in use: leave nothing running behind
            self._stop_event.set()
            self._exporter.close()
            self._wal.close()
            if self._notifier is not None:
                self._notifier.close(timeout=1)
            raise
        self._accepting = True
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
        """Stop receiving, complete every buffered trace, flush downstream; True if all was delivered.

        Whatever is not delivered within the timeout stays in the write-ahead log for the next start."""
        if not self._started:
            return True
        deadline = time.monotonic() + (self.config.shutdown_timeout if timeout is None else timeout)
        self._accepting = False
        if self._grpc is not None:
            self._grpc.stop(grace=min(2.0, max(0.0, deadline - time.monotonic())))
        for trace in self._assembler.drain(time.monotonic()):
            self._complete(trace)
        with self._analysis_lock:
            while self._analysis_pending and time.monotonic() < deadline:
                self._analysis_lock.wait(0.1)
        self._stop_event.set()
        assert self._exporter is not None and self._wal is not None
        delivered = self._exporter.flush(max(0.0, deadline - time.monotonic()))
        if self._http is not None:
            self._http.stop()
        self._exporter.close()
        self._analysis.shutdown(wait=False, cancel_futures=True)
        self._runner.close()
        if self._notifier is not None:
            self._notifier.close(timeout=min(5.0, max(0.1, deadline - time.monotonic())))
        if self._ticker is not None:
            self._ticker.join(2)
        self._wal.close()
        self._started = False
        log.info(
            "otel-blame processor stopped (%s)", "all delivered" if delivered else "rest kept in the log"
        )
        return delivered

    def __enter__(self) -> BlameProcessor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def ready(self) -> bool:
        return self._accepting

    @property
    def grpc_endpoint(self) -> str | None:
        return self._grpc.endpoint if self._grpc is not None else None

    @property
    def http_endpoint(self) -> str | None:
        return self._http.endpoint if self._http is not None else None

    # -- ingest (called by the receivers, or directly when embedded) -------------------------
    def accept_traces(self, body: bytes) -> None:
        """Store one ExportTraceServiceRequest durably and route it; raises an IngestError if not."""
        self._accept(KIND_TRACES, body)

    def accept_logs(self, body: bytes) -> None:
        self._accept(KIND_LOGS, body)

    def _accept(self, kind: str, body: bytes) -> None:
        if not self._accepting or self._wal is None:
            raise NotAccepting("the processor is not accepting data right now")
        try:
            groups = self._split(kind, body)
        except DecodeError as error:
            self._count("rejected_requests")
            raise InvalidRequest(str(error)) from None
        if not groups:
            return
        try:
            row = self._wal.append(kind, body, parts=len(groups))
        except WALFull as error:
            self._count("rejected_requests")
            raise Backpressure(str(error), self.config.wal.retry_after_seconds) from None
        except (WALClosed, TimeoutError) as error:
            raise NotAccepting(str(error)) from None
        self._count(
            "received_spans" if kind == KIND_TRACES else "received_log_records", sum(g.items for g in groups)
        )
        self._route(kind, groups, row)

    def _split(self, kind: str, body: bytes) -> list[TraceGroup]:
        if kind == KIND_LOGS:
            return split_logs(body)
        return split_traces(body, self._detector.is_failed)

    def _route(self, kind: str, groups: list[TraceGroup], row: int) -> None:
        assert self._exporter is not None
        now = time.monotonic()
        logs = kind == KIND_LOGS
        export_kind = LOGS if logs else TRACES
        for group in groups:
            if logs and not group.trace_id:
                self._exporter.submit(export_kind, group.payload, [row], group.items)
                continue
            route, trace = self._assembler.add(group, row, now, logs=logs)
            if route == Route.BUFFERED:
                continue
            if route == Route.OVERFLOW and trace is not None:
                self._forward(trace)
                continue
            if route == Route.LATE:
                self._retained.add_late(group.trace_id, group.payload, logs=logs)
                if not logs and group.root_failed:
                    self._late_root_failed(group.trace_id)
            self._exporter.submit(export_kind, group.payload, [row], group.items)

    def _replay(self) -> None:
        """Deliver what a previous run acknowledged but did not deliver (at least once)."""
        assert self._wal is not None and self._exporter is not None
        for row in self._wal.recovered():
            self._count("replayed_rows")
            if row.kind == KIND_DIRECT_TRACES:
                self._wal.adopt(row, 1)
                self._exporter.submit(TRACES, row.body, [row.row_id], count_spans(row.body))
                continue
            try:
                groups = self._split(row.kind, row.body)
            except DecodeError:
                log.error("write-ahead log row %d is unreadable; removing it", row.row_id)
                self._wal.adopt(row, 0)
                continue
            self._wal.adopt(row, len(groups))
            self._route(row.kind, groups, row.row_id)
        if self._wal.recovered_rows:
            log.info("replayed %d requests from the write-ahead log", self._wal.recovered_rows)

    # -- completion --------------------------------------------------------------------------
    def _tick_loop(self) -> None:
        interval = self.config.assembly.tick_seconds
        while not self._stop_event.wait(interval):
            try:
                for trace in self._assembler.due(time.monotonic()):
                    self._complete(trace)
            except Exception:  # never let the assembler thread die
                log.exception("completing traces failed")

    def _forward(self, trace: BufferedTrace) -> None:
        """Send a trace on exactly as it arrived."""
        assert self._exporter is not None
        if trace.span_payloads:
            self._exporter.submit(TRACES, b"".join(trace.span_payloads), trace.span_refs, trace.spans)
        if trace.log_payloads:
            self._exporter.submit(LOGS, b"".join(trace.log_payloads), trace.log_refs, trace.log_records)

    def _complete(self, trace: BufferedTrace) -> None:
        now = time.monotonic()
        if trace.overflowed or not trace.has_agent or not trace.span_payloads:
            self._forward(trace)
            return
        failed = trace.root_failed or trace.verdict_failed
        if not failed and trace.has_root:
            self._forward(trace)
            self._retained.keep(trace.trace_id, now, trace.span_payloads, trace.log_payloads)
            self.metrics.record_trace(Outcome.SUCCESS if trace.has_root else Outcome.UNKNOWN, False)
            return
        with self._analysis_lock:
            if self._analysis_pending >= self.config.assembly.max_traces:
                self._count("analysis_overflow_traces")
                self._forward(trace)
                return
            self._analysis_pending += 1
        try:
            self._analysis.submit(self._analyse, trace)
        except RuntimeError:  # shutting down
            self._analysis_done()
            self._forward(trace)

    def _late_root_failed(self, trace_id: bytes) -> None:
        """The failed root of a trace released without it (a task longer than max_wait): blame it
        as a late verdict would, with a ``blame {agent}`` span."""
        self._count("late_root_failures")

        def blame() -> None:
            try:
                self.submit_verdict(trace_id.hex(), "failure")
            except (VerdictNotFound, ValueError, NotAccepting) as error:
                log.info("trace %s: failed root arrived late; not attributed: %s", trace_id.hex(), error)
            except Exception:
                log.exception("trace %s: attributing a late failed root failed", trace_id.hex())

        try:
            self._analysis.submit(blame)
        except RuntimeError:  # shutting down
            pass

    def _analysis_done(self) -> None:
        with self._analysis_lock:
            self._analysis_pending -= 1
            self._analysis_lock.notify_all()

    def _analyse(self, trace: BufferedTrace) -> None:
        """Worker: parse, decide, attribute and enrich one trace; on any error send it on as is."""
        try:
            self._analyse_or_raise(trace)
        except Exception:
            log.exception("analysing trace %s failed; forwarding it unchanged", trace.trace_id.hex())
            self._forward(trace)
        finally:
            self._analysis_done()

    def _analyse_or_raise(self, trace: BufferedTrace) -> None:
        assert self._exporter is not None
        request = ExportTraceServiceRequest.FromString(b"".join(trace.span_payloads))
        logs = (
            ExportLogsServiceRequest.FromString(b"".join(trace.log_payloads)) if trace.log_payloads else None
        )
        resource_spans = list(request.resource_spans)
        try:
            built = build_trajectory(resource_spans, list(logs.resource_logs) if logs else ())
        except ValueError as error:
            log.debug("trace %s: %s; forwarding it unchanged", trace.trace_id.hex(), error)
            self._count("no_trajectory_traces")
            roots = (
                s for rs in resource_spans for ss in rs.scope_spans for s in ss.spans if not s.parent_span_id
            )
            if trace.root_failed or trace.verdict_failed or any(self._detector.is_failed(r) for r in roots):
                self._count("unattributed_failed_traces")
                service = error.service if isinstance(error, NoTrajectory) else None
                reason = error.reason if isinstance(error, NoTrajectory) else str(error)
                self._warn_once(
                    service or "unknown_service", "no_trajectory", f"failed trace not attributed: {reason}"
                )
            self._forward(trace)
            return
        trajectory = built.trajectory
        if built.notes.guessed:
            self._count("agent_from_service_traces")
            self._warn_once(
                built.notes.service,
                "agent_from_service",
                f"{built.notes.agent_from_service} step(s) of trace {trace.trace_id.hex()} name no agent "
                "(no agent span, graph node or system prompt names one); blamed as the service",
            )
        failed = trace.root_failed or trace.verdict_failed
        if not failed:
            root = self._find_span(request, trajectory.root_span_id)
            failed = root is not None and self._detector.is_failed(root)
        if not failed:
            self._forward(trace)
            self._retained.keep(trace.trace_id, time.monotonic(), trace.span_payloads, trace.log_payloads)
            self.metrics.record_trace(trajectory.outcome.value, False)
            return
        trajectory = self._as_failed(trajectory, trace.expected_output)
        outcome = self._runner.attribute(trajectory)
        attribution = outcome.attribution
        if outcome.fell_back:
            self._count("fallback_attributions")
        if attribution is None:
            self._count("unattributed_failed_traces")
            self.metrics.record_trace(Outcome.FAILURE, False)
            self._forward(trace)
            self._retained.keep(trace.trace_id, time.monotonic(), trace.span_payloads, trace.log_payloads)
            return
        self._enricher.enrich(resource_spans, trajectory, attribution)
        enriched = request.SerializeToString()
        self._exporter.submit(TRACES, enriched, trace.span_refs, trace.spans)
        if trace.log_payloads:
            self._exporter.submit(LOGS, b"".join(trace.log_payloads), trace.log_refs, trace.log_records)
        self._retained.keep(trace.trace_id, time.monotonic(), [enriched], trace.log_payloads, attribution)
        self._record_blame(
            attribution, self._service_of(request, trajectory.root_span_id), trace.trace_id.hex()
        )

    @staticmethod
    def _as_failed(trajectory: Trajectory, expected_output: str | None) -> Trajectory:
        task = trajectory.task
        if expected_output is not None:
            task = task.model_copy(update={"expected_output": expected_output})
        return trajectory.model_copy(update={"outcome": Outcome.FAILURE, "task": task})

    @staticmethod
    def _find_span(request: ExportTraceServiceRequest, span_id_hex: str | None):  # noqa: ANN205
        if not span_id_hex:
            return None
        wanted = bytes.fromhex(span_id_hex)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    if span.span_id == wanted:
                        return span
        return None

    @staticmethod
    def _resource_of(request: ExportTraceServiceRequest, span_id_hex: str | None) -> Resource | None:
        if not span_id_hex:
            return None
        wanted = bytes.fromhex(span_id_hex)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                if any(span.span_id == wanted for span in scope.spans):
                    return resource.resource
        return None

    def _service_of(self, request: ExportTraceServiceRequest, span_id_hex: str | None) -> str:
        resource = self._resource_of(request, span_id_hex)
        if resource is None:
            return ""
        return str(attributes_to_dict(resource.attributes).get(sc.SERVICE_NAME, ""))

    def _record_blame(self, attribution: Attribution, service: str, trace_id: str) -> None:
        self._count("attributed_traces")
        self.metrics.record_trace(Outcome.FAILURE, True)
        self.metrics.record_attribution(attribution, service)
        alert = self._repeated.observe(service, attribution.agent, trace_id)
        if alert is not None:
            self._count("alerts")
            log.warning(
                "agent %r of %r blamed %d times in %.0f s",
                alert.agent,
                service,
                alert.count,
                alert.window_seconds,
            )
            if self._notifier is not None:
                self._notifier.notify(alert)

    # -- late verdicts -----------------------------------------------------------------------
    def submit_verdict(
        self, trace_id: str, outcome: str, expected_output: str | None = None
    ) -> dict[str, Any]:
        """A failure known only after the trace completed. Returns what was done (see docs)."""
        if not self._accepting or self._wal is None or self._exporter is None:
            raise NotAccepting("the processor is not accepting data right now")
        try:
            raw_id = bytes.fromhex(trace_id)
        except ValueError:
            raw_id = b""
        if len(raw_id) != 16:
            raise ValueError(f"trace_id must be 32 hex digits, got {trace_id!r}")
        self._count("verdicts")
        if outcome != "failure":
            return {"status": "recorded", "trace_id": trace_id}
        if self._assembler.mark_failed(raw_id, expected_output):
            return {
                "status": "pending",
                "trace_id": trace_id,
                "detail": "attributed when the trace completes",
            }
        retained = self._retained.get(raw_id, time.monotonic())
        if retained is None:
            raise VerdictNotFound(f"trace {trace_id} is not among the recently completed traces")
        with retained.lock:
            if retained.attribution is not None:
                return self._verdict_answer(trace_id, "already_attributed", retained.attribution, None)
            request = ExportTraceServiceRequest.FromString(b"".join(retained.span_payloads))
            logs = (
                ExportLogsServiceRequest.FromString(b"".join(retained.log_payloads))
                if retained.log_payloads
                else None
            )
            try:
                trajectory = trajectory_from_spans(
                    list(request.resource_spans), list(logs.resource_logs) if logs else ()
                )
            except ValueError as error:
                raise ValueError(f"trace {trace_id} cannot be attributed: {error}") from None
            trajectory = self._as_failed(trajectory, expected_output)
            answer = self._runner.attribute(trajectory)
            if answer.fell_back:
                self._count("fallback_attributions")
            if answer.attribution is None:
                raise ValueError(f"trace {trace_id} could not be attributed: {answer.problem}")
            attribution = answer.attribution
            payload = self._enricher.late_blame_span(
                trajectory, attribution, self._resource_of(request, trajectory.root_span_id)
            )
            try:
                row = self._wal.append(KIND_DIRECT_TRACES, payload, parts=1)
            except WALFull as error:
                raise NotAccepting(str(error)) from None
            self._exporter.submit(TRACES, payload, [row], 1)
            retained.attribution = attribution
        self._record_blame(attribution, self._service_of(request, trajectory.root_span_id), trace_id)
        span_id = (
            ExportTraceServiceRequest.FromString(payload).resource_spans[0].scope_spans[0].spans[0].span_id
        )
        return self._verdict_answer(trace_id, "attributed", attribution, span_id.hex())

    @staticmethod
    def _verdict_answer(
        trace_id: str, status: str, attribution: Attribution, span_id: str | None
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

    # -- observability -----------------------------------------------------------------------
    def _warn_once(self, service: str, what: str, reason: str) -> None:
        """A trace problem the operator should fix in the app's instrumentation: logged once per service."""
        with self._counter_lock:
            if (service, what) in self._warned:
                return
            self._warned.add((service, what))
        log.warning("service %s: %s (logged once per service)", service, reason)

    def _count(self, name: str, amount: int = 1) -> None:
        with self._counter_lock:
            self.counters[name] += amount

    def stats(self) -> dict[str, Any]:
        """Counters and gauges of every component, for tests, benchmarks and /metrics."""
        assembly = self._assembler.stats()
        with self._counter_lock:
            out: dict[str, Any] = dict(self.counters)
        out.update({f"assembly_{key}": value for key, value in vars(assembly).items()})
        if self._exporter is not None:
            out.update(
                exported_spans=self._exporter.exported_spans,
                exported_log_records=self._exporter.exported_log_records,
                export_failed_attempts=self._exporter.failed_attempts,
                export_rejected_items=self._exporter.rejected_items,
                export_pending_items=self._exporter.pending,
            )
        if self._wal is not None:
            out.update(wal_bytes=self._wal.size_bytes, wal_pending_rows=self._wal.pending_rows)
        out.update(retained_traces=len(self._retained), retained_bytes=self._retained.size_bytes)
        return out

    def render_metrics(self) -> str:
        lines = [self.metrics.render().rstrip("\n")]
        for key, value in sorted(self.stats().items()):
            if isinstance(value, int | float):
                gauge = key.startswith(("assembly_buffered", "wal_", "retained_", "export_pending"))
                name = f"otel_blame_processor_{key}" + ("" if gauge else "_total")
                lines.append(f"# TYPE {name} {'gauge' if gauge else 'counter'}")
                lines.append(f"{name} {value}")
        return "\n".join(lines) + "\n"
