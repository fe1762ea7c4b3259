"""Analysis: one ``analyse(trace, verdict?)`` for traces that complete and for late verdicts.

A trace is parsed once, failure is decided once (the root flags cut by the wire splitter, a
verdict, or the parsed root), the configured method attributes it (with timeout and fallback,
see :mod:`.attributor`), and then either the enricher writes ``blame.*`` onto the trace's spans
(a completing trace) or a ``blame {agent}`` span is made (a late verdict). Whatever goes wrong in
here, the trace is forwarded exactly as it arrived.

Listeners: :meth:`TraceAnalyser.add_listener` registers a callable that receives a
:class:`FinishedAttribution` (trace id, service, the *redacted* trajectory, the attribution,
the outcome, the wall-clock time) for every blame assigned. It runs on the analysis worker,
one call at a time (listeners need not be thread-safe, and a SQLite blame store is not written
by two workers at once, which made each wait in SQLite's busy handler: up to 100 ms a write);
a listener that raises is logged and does not affect the trace. This is how a blame store (the
web UI) plugs in.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_blame import semconv as sc
from otel_blame.alerting.metrics import CulpritMetrics
from otel_blame.alerting.repeated import RepeatedCulpritDetector
from otel_blame.alerting.webhook import WebhookNotifier
from otel_blame.attribution.cross_run import combine
from otel_blame.attribution.result import Attribution
from otel_blame.attribution.systemic import describe_failure
from otel_blame.conventions import NoTrajectory, attributes_to_dict, build_trajectory
from otel_blame.processor.assembler import BufferedTrace
from otel_blame.processor.attributor import AttributionRunner, redact_trajectory
from otel_blame.processor.config import ProcessorConfig
from otel_blame.processor.counters import Counters
from otel_blame.processor.cross_run import CrossRunStatistics, workflow_key
from otel_blame.processor.detector import FailureDetector
from otel_blame.processor.enricher import BlameEnricher, EvaluationEvent, evaluation_log_request
from otel_blame.processor.exporter import LOGS, TRACES, OTLPExporter
from otel_blame.processor.retention import RetainedTraces
from otel_blame.processor.wal import (
    KIND_DIRECT_LOGS,
    KIND_DIRECT_TRACES,
    WALClosed,
    WALFull,
    WALStorageError,
    WriteAheadLog,
)
from otel_blame.redaction import Redactor
from otel_blame.trajectory import Outcome, Trajectory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    """A failure reported after the trace was exported (``POST /v1/verdicts``)."""

    expected_output: str | None = None


@dataclass(frozen=True)
class FinishedAttribution:
    """What listeners receive for each blame assigned."""

    trace_id: str
    service: str
    trajectory: Trajectory  # redacted
    attribution: Attribution
    outcome: str
    finished_at_unix: float
    late: bool  # True: from a late verdict (a ``blame {agent}`` span), False: written onto the trace


@dataclass(frozen=True)
class AnalysisResult:
    status: str  # attributed | not_failed | no_trajectory | unattributed
    attribution: Attribution | None = None
    blame_span_id: str | None = None
    problem: str | None = None


AttributionListener = Callable[[FinishedAttribution], None]


def forward_unchanged(exporter: OTLPExporter, trace: BufferedTrace) -> None:
    """Send a trace on exactly as it arrived (its log rows are released on delivery)."""
    if trace.span_payloads:
        exporter.submit(TRACES, b"".join(trace.span_payloads), trace.span_refs, trace.spans)
    if trace.log_payloads:
        exporter.submit(LOGS, b"".join(trace.log_payloads), trace.log_refs, trace.log_records)


class TraceAnalyser:
    """Owns the one analysis worker pool; ``submit`` for completed traces, ``analyse`` to run one.

    The attribution method runs on these workers too (``attribution.workers`` of them); its
    timeout is a deadline the LLM client honours, not a second pool (see :mod:`.attributor`)."""

    def __init__(
        self,
        config: ProcessorConfig,
        *,
        wal: WriteAheadLog,
        exporter: OTLPExporter,
        retained: RetainedTraces,
        counters: Counters,
        metrics: CulpritMetrics,
        enricher: BlameEnricher,
        runner: AttributionRunner,
        redactor: Redactor,
        notifier: WebhookNotifier | None,
        cross_run: CrossRunStatistics | None = None,
    ) -> None:
        self._config = config
        self._cross_run = cross_run
        self._wal = wal
        self._exporter = exporter
        self._retained = retained
        self._counters = counters
        self._metrics = metrics
        self._enricher = enricher
        self._runner = runner
        self._redactor = redactor
        self._notifier = notifier
        self._detector = FailureDetector(config.detection)
        self._repeated = RepeatedCulpritDetector(config.alerting.repeated_culprit)
        self._listeners: list[AttributionListener] = []
        self._listener_lock = threading.Lock()  # listeners are called one at a time
        self._warned: set[tuple[str, str]] = set()  # (service, what): logged once each
        self._pool = ThreadPoolExecutor(
            max_workers=config.attribution.workers, thread_name_prefix="otel-blame-analyse"
        )
        self._pending = 0
        self._pending_lock = threading.Condition()

    # -- listeners -------------------------------------------------------------------------------
    def add_listener(self, listener: AttributionListener) -> None:
        """Call ``listener`` with every blame assigned (see the module docstring)."""
        self._listeners.append(listener)

    # -- scheduling ------------------------------------------------------------------------------
    def submit(self, trace: BufferedTrace) -> None:
        """Analyse a completed trace on the pool; when the pool is saturated, forward it as is."""
        with self._pending_lock:
            if self._pending >= self._config.assembly.max_traces:
                self._counters.add("analysis_overflow_traces")
                forward_unchanged(self._exporter, trace)
                return
            self._pending += 1
        try:
            self._pool.submit(self._run, trace, time.monotonic())
        except RuntimeError:  # shutting down
            self._done()
            forward_unchanged(self._exporter, trace)

    def observe(self, trace: BufferedTrace) -> None:
        """Count a successful trace (already forwarded) in the cross-run statistics, on the pool; skipped
        (and counted) once ``cross_run.success_backlog`` traces wait, so successes never hold back
        failures: counting one costs a parse and a trajectory, as much CPU as most of a blame."""
        if self._cross_run is None or not self._config.cross_run.observe_successes:
            return
        with self._pending_lock:
            if self._pending >= self._config.cross_run.success_backlog:
                self._counters.add("cross_run_skipped_traces")
                return
            self._pending += 1
        try:
            self._pool.submit(self._observe_success, trace)
        except RuntimeError:  # shutting down
            self._done()

    def _observe_success(self, trace: BufferedTrace) -> None:
        try:
            request = ExportTraceServiceRequest.FromString(b"".join(trace.span_payloads))
            built = build_trajectory(list(request.resource_spans))
            resource = _resource_of(request, built.trajectory.root_span_id)
            self._observe(_service(resource) or built.notes.service, built.trajectory, failed=False)
        except ValueError:
            pass  # no agent steps: nothing to count
        except Exception:
            log.exception("counting trace %s in the cross-run statistics failed", trace.trace_id.hex())
        finally:
            self._done()

    def _observe(
        self, service: str, trajectory: Trajectory, *, failed: bool, blamed_step: int | None = None
    ) -> None:
        if self._cross_run is None:
            return
        key = workflow_key(service, trajectory, self._config.cross_run.workflow_key)
        try:
            if self._cross_run.observe(key, trajectory, failed=failed, blamed_step=blamed_step):
                self._counters.add("cross_run_observed_runs")
            else:
                self._counters.add("cross_run_skipped_traces")
        except sqlite3.Error as error:
            self._counters.add("cross_run_errors")
            log.warning("cross-run statistics: could not count trace %s: %s", trajectory.trace_id, error)

    def _with_cross_run(self, service: str, trajectory: Trajectory, attribution: Attribution) -> Attribution:
        """The attribution combined with its workflow's cross-run evidence (unchanged without any)."""
        if self._cross_run is None:
            return attribution
        settings = self._config.cross_run
        try:
            evidence = self._cross_run.evidence(
                workflow_key(service, trajectory, settings.workflow_key), trajectory
            )
        except sqlite3.Error as error:
            self._counters.add("cross_run_errors")
            log.warning("cross-run statistics: could not read evidence: %s", error)
            return attribution
        combined = combine(
            trajectory,
            attribution,
            evidence,
            weight=settings.weight,
            prior_runs=settings.prior_runs,
            min_failing_runs=settings.min_failing_runs,
        )
        if combined.step != attribution.step:
            self._counters.add("cross_run_changed_verdicts")
        return combined

    def submit_late_root(self, trace_id: bytes) -> None:
        """The failed root of a trace released without it: blame it as a late verdict would."""
        self._counters.add("late_root_failures")

        def blame() -> None:
            retained = self._retained.get(trace_id, time.monotonic())
            if retained is None:
                log.info("trace %s: failed root arrived late; trace no longer retained", trace_id.hex())
                return
            try:
                self.verdict(retained_trace(retained), Verdict())
            except Exception:
                log.exception("trace %s: attributing a late failed root failed", trace_id.hex())

        try:
            self._pool.submit(blame)
        except RuntimeError:
            pass

    def wait_idle(self, deadline: float) -> None:
        with self._pending_lock:
            while self._pending and time.monotonic() < deadline:
                self._pending_lock.wait(0.1)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._runner.close()

    def _done(self) -> None:
        with self._pending_lock:
            self._pending -= 1
            self._pending_lock.notify_all()

    def _run(self, trace: BufferedTrace, submitted_at: float) -> None:
        try:
            self.analyse(trace, submitted_at=submitted_at)
        except Exception:
            self._counters.add("analysis_errors")
            log.exception("analysing trace %s failed; forwarding it unchanged", trace.trace_id.hex())
            forward_unchanged(self._exporter, trace)
        finally:
            self._done()

    # -- the analysis ----------------------------------------------------------------------------
    def analyse(
        self, trace: BufferedTrace, verdict: Verdict | None = None, *, submitted_at: float | None = None
    ) -> AnalysisResult:
        """Parse, decide, attribute, then enrich and export (or, with a verdict, add a blame span).

        ``submitted_at`` (``time.monotonic()``) is when the trace was queued: the attribution
        timeout counts from it.

        Without a verdict the trace has not been exported yet and is exported here, enriched or
        unchanged; an exception raised from here means it was not exported (the caller forwards
        it). With a verdict the trace went out already: only the blame span is exported.
        """
        trace_hex = trace.trace_id.hex()
        request = ExportTraceServiceRequest.FromString(b"".join(trace.span_payloads))
        logs = (
            ExportLogsServiceRequest.FromString(b"".join(trace.log_payloads)) if trace.log_payloads else None
        )
        try:
            built = build_trajectory(list(request.resource_spans), list(logs.resource_logs) if logs else ())
        except ValueError as error:
            log.debug("trace %s: %s; not attributed", trace_hex, error)
            self._counters.add("no_trajectory_traces")
            if verdict is not None:
                raise ValueError(f"trace {trace_hex} cannot be attributed: {error}") from None
            roots = (
                s
                for rs in request.resource_spans
                for ss in rs.scope_spans
                for s in ss.spans
                if not s.parent_span_id
            )
            if trace.root_failed or trace.verdict_failed or any(self._detector.is_failed(r) for r in roots):
                # failed, but no agent steps to blame: counted and said once per service, never silent
                self._counters.add("unattributed_failed_traces")
                self._metrics.record_trace(Outcome.FAILURE, False)
                service = error.service if isinstance(error, NoTrajectory) else None
                reason = error.reason if isinstance(error, NoTrajectory) else str(error)
                self._warn_once(
                    service or "unknown_service", "no_trajectory", f"failed trace not attributed: {reason}"
                )
            self._finish_unchanged(trace)
            return AnalysisResult("no_trajectory", problem=str(error))
        trajectory = built.trajectory
        if built.notes.guessed:
            self._counters.add("agent_from_service_traces")
            self._warn_once(
                built.notes.service,
                "agent_from_service",
                f"{built.notes.agent_from_service} step(s) of trace {trace_hex} name no agent "
                "(no agent span, graph node or system prompt names one); blamed as the service",
            )
        failed = verdict is not None or trace.root_failed or trace.verdict_failed
        if not failed:
            root = _find_span(request, trajectory.root_span_id)
            failed = root is not None and self._detector.is_failed(root)
        resource = _resource_of(request, trajectory.root_span_id)
        service = _service(resource) or built.notes.service
        if not failed:
            self._finish_unchanged(trace)
            self._metrics.record_trace(trajectory.outcome.value, False)
            if self._config.cross_run.observe_successes:
                self._observe(service, trajectory, failed=False)
            return AnalysisResult("not_failed")
        trajectory = _as_failed(trajectory, verdict.expected_output if verdict else trace.expected_output)
        outcome = self._runner.attribute(trajectory, submitted_at=submitted_at)
        if outcome.fell_back:
            self._counters.add("fallback_attributions")
        attribution = outcome.attribution
        if attribution is None:
            if verdict is not None:
                raise ValueError(f"trace {trace_hex} could not be attributed: {outcome.problem}")
            self._counters.add("unattributed_failed_traces")
            self._metrics.record_trace(Outcome.FAILURE, False)
            self._finish_unchanged(trace)
            return AnalysisResult("unattributed", problem=outcome.problem)
        attribution = self._with_cross_run(service, trajectory, attribution)
        attribution = describe_failure(trajectory, attribution)  # LLM methods leave the category open
        blame_span_id = None
        if verdict is None:
            evaluation = self._enricher.enrich(request.resource_spans, trajectory, attribution)
            enriched = request.SerializeToString()
            self._exporter.submit(TRACES, enriched, trace.span_refs, trace.spans)
            if trace.log_payloads:
                self._exporter.submit(LOGS, b"".join(trace.log_payloads), trace.log_refs, trace.log_records)
            self._retained.keep(trace.trace_id, time.monotonic(), [enriched], trace.log_payloads, attribution)
        else:
            payload, evaluation = self._enricher.late_blame_span(trajectory, attribution, resource)
            row = self._wal.append(KIND_DIRECT_TRACES, payload, parts=1)
            self._exporter.submit(TRACES, payload, [row], 1)
            blame_span_id = evaluation.span_id.hex()
        if evaluation is not None and self._config.enrichment.evaluation_log_records:
            self._send_evaluation_log(evaluation, resource, trace_hex)
        self._record_blame(trajectory, attribution, _service(resource), trace_hex, late=verdict is not None)
        self._observe(service, trajectory, failed=True, blamed_step=attribution.step)
        return AnalysisResult("attributed", attribution, blame_span_id)

    def _send_evaluation_log(
        self, evaluation: EvaluationEvent, resource: Resource | None, trace_hex: str
    ) -> None:
        """The evaluation event as a log record, durable like a late span (logged before it is sent).
        The blame is already on the spans, so a log that cannot store it costs only this copy."""
        payload = evaluation_log_request(evaluation, resource)
        try:
            row = self._wal.append(KIND_DIRECT_LOGS, payload, parts=1)
        except (WALFull, WALStorageError, WALClosed) as error:
            self._counters.add("evaluation_logs_dropped")
            log.warning("trace %s: evaluation log record not sent: %s", trace_hex, error)
            return
        self._exporter.submit(LOGS, payload, [row], 1)

    def verdict(self, trace: BufferedTrace, verdict: Verdict) -> AnalysisResult:
        return self.analyse(trace, verdict)

    def _warn_once(self, service: str, what: str, reason: str) -> None:
        """A trace problem the operator should fix in the app's instrumentation: logged once per service."""
        with self._pending_lock:
            if (service, what) in self._warned:
                return
            self._warned.add((service, what))
        log.warning("service %s: %s (logged once per service)", service, reason)

    def _finish_unchanged(self, trace: BufferedTrace) -> None:
        forward_unchanged(self._exporter, trace)
        self._retained.keep(trace.trace_id, time.monotonic(), trace.span_payloads, trace.log_payloads)

    def _record_blame(
        self, trajectory: Trajectory, attribution: Attribution, service: str, trace_id: str, *, late: bool
    ) -> None:
        self._counters.add("attributed_traces")
        self._metrics.record_trace(Outcome.FAILURE, True)
        self._metrics.record_attribution(attribution, service)
        alert = self._repeated.observe(service, attribution.agent, trace_id)
        if alert is not None:
            self._counters.add("alerts")
            log.warning(
                "agent %r of %r blamed %d times in %.0f s",
                alert.agent,
                service,
                alert.count,
                alert.window_seconds,
            )
            if self._notifier is not None:
                self._notifier.notify(alert)
        if not self._listeners:
            return
        finished = FinishedAttribution(
            trace_id=trace_id,
            service=service,
            trajectory=redact_trajectory(trajectory, self._redactor),
            attribution=attribution,
            outcome=Outcome.FAILURE.value,
            finished_at_unix=time.time(),
            late=late,
        )
        with self._listener_lock:
            for listener in list(self._listeners):
                try:
                    listener(finished)
                except Exception:
                    log.exception("attribution listener %r failed", listener)


def retained_trace(retained: Any) -> BufferedTrace:
    """A retained (already exported) trace, in the shape ``analyse`` takes."""
    now = time.monotonic()
    return BufferedTrace(
        trace_id=retained.trace_id,
        first_seen=now,
        last_seen=now,
        span_payloads=list(retained.span_payloads),
        log_payloads=list(retained.log_payloads),
        has_root=True,
        has_agent=True,
    )


def _as_failed(trajectory: Trajectory, expected_output: str | None) -> Trajectory:
    task = trajectory.task
    if expected_output is not None:
        task = task.model_copy(update={"expected_output": expected_output})
    return trajectory.model_copy(update={"outcome": Outcome.FAILURE, "task": task})


def _find_span(request: ExportTraceServiceRequest, span_id_hex: str | None) -> Span | None:
    if not span_id_hex:
        return None
    wanted = bytes.fromhex(span_id_hex)
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                if span.span_id == wanted:
                    return span
    return None


def _resource_of(request: ExportTraceServiceRequest, span_id_hex: str | None) -> Resource | None:
    if not span_id_hex:
        return None
    wanted = bytes.fromhex(span_id_hex)
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            if any(span.span_id == wanted for span in scope.spans):
                return resource.resource
    return None


def _service(resource: Resource | None) -> str:
    if resource is None:
        return ""
    return str(attributes_to_dict(resource.attributes).get(sc.SERVICE_NAME, ""))
