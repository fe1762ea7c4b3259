"""The analysis stage: completed traces in, :class:`Analysed` traces out, analysis on every core.

It consumes each completed trace with its decision and hands on an :class:`Analysed` item:

- not an agent trace, too big: on at once, unchanged;
- not failed: on at once (``SUCCESS``); its trajectory is built afterwards, when few traces wait,
  for the cross-run statistics (``OBSERVED``);
- failed: the pure analysis (:mod:`.analysis`: parse, trajectory, attribute) runs in a worker
  process, ``attribution.workers`` of them (default: one a core), so it is not held to one core
  by the GIL. The worker also concludes the blame (:func:`~.analysis.conclude`: described,
  written onto the spans or into a late span, the trajectory redacted for the listeners) unless
  the workflow's cross-run evidence is to be read first: then that happens back here. The trace
  goes on (``ANALYSED``) to be exported. The jobs that wait while every
  worker is busy go to the next free one together, in one round trip (a
  :class:`~.batching.BatchingWorker` dispatches them): a worker that finished does not sit idle
  until this process's GIL lets it hand over one more job.

Forward first: when more than ``attribution.forward_first_backlog`` failed traces already wait
for analysis, a failed trace is not held back: it goes on at once, unchanged (``DEFERRED``), and
when its analysis is done its blame follows as the late ``blame {agent}`` span. ``consume`` never
waits for analysis, so ingest never does. The deferred job is itself a write-ahead log row
(:mod:`.jobs`), stored before the trace goes on and released once its blame is kept, so a stop
before the analysis loses nothing: the row is replayed (:meth:`AnalysisStage.resume`) and
analysed on the next start. While it waits, only the row's id is held here; the worker reads
the trace from the log. Whatever goes wrong in an analysis, the trace is forwarded exactly as it
arrived.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import queue
import sqlite3
import threading
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otel_blame.attribution.result import Attribution
from otel_blame.processor import analysis as pure
from otel_blame.processor.analysis import ATTRIBUTED, NO_TRAJECTORY, Analysis, AnalysisJob, Blamed, Concluding
from otel_blame.processor.assembler import BufferedTrace
from otel_blame.processor.attributor import AttributionRunner, uses_llm
from otel_blame.processor.batching import BatchingWorker
from otel_blame.processor.config import ProcessorConfig
from otel_blame.processor.counters import Counters
from otel_blame.processor.cross_run import CrossRunStatistics, workflow_key
from otel_blame.processor.decision import FailureDetector, TraceDecision
from otel_blame.processor.enricher import BlameEnricher
from otel_blame.processor.jobs import StoredJobReader, encode_job
from otel_blame.processor.listeners import FinishedAttribution
from otel_blame.processor.patterns import PatternBook, with_pattern
from otel_blame.processor.stage import Consumer
from otel_blame.processor.wal import KIND_ANALYSIS, WALClosed, WALFull, WriteAheadLog
from otel_blame.redaction import Redactor

__all__ = ["AnalysisStage", "Analysed", "FinishedAttribution", "Handling"]

log = logging.getLogger(__name__)


class Handling(StrEnum):
    UNCHANGED = "unchanged"  # forward as it arrived; nothing to say about it
    SUCCESS = "success"  # forward as it arrived and keep it for verdicts
    OBSERVED = "observed"  # a success already forwarded: its verdict (with its trajectory, if built)
    DEFERRED = "deferred"  # a failed trace forwarded before its analysis (forward first)
    ANALYSED = "analysed"  # a failed trace analysed: enrich and export it, or blame it late


@dataclass(frozen=True, slots=True)
class Analysed:
    trace: BufferedTrace
    handling: Handling
    analysis: Analysis | None = None
    late: bool = False  # the trace went out already: its blame goes as a late ``blame {agent}`` span
    job_row: int = 0  # its deferred job's log row: released once the blame is kept (or there is none)
    blamed: Blamed | None = None  # the concluded blame: what it writes

    @property
    def attribution(self) -> Attribution | None:
        """The final blame (cross-run weighed, described), if there is one."""
        return self.blamed.attribution if self.blamed is not None else None


def analysis_workers(config: ProcessorConfig) -> int:
    return config.attribution.workers or len(os.sched_getaffinity(0)) or 1


class AnalysisStage:
    """A :class:`~otel_blame.processor.stage.Consumer` of completed traces; owns the worker processes."""

    def __init__(
        self,
        config: ProcessorConfig,
        *,
        out: Consumer[Analysed],
        counters: Counters,
        redactor: Redactor,
        wal: WriteAheadLog,
        enricher: BlameEnricher | None = None,
        cross_run: CrossRunStatistics | None = None,
        patterns: PatternBook | None = None,
    ) -> None:
        self._config = config
        self._out = out
        self._counters = counters
        self._cross_run = cross_run
        self._patterns = patterns
        self._wal = wal
        self._concluding = Concluding(
            enricher or BlameEnricher(), redactor, config.cross_run, patterns=patterns is not None
        )
        self._jobs = StoredJobReader(wal.path)  # deferred jobs, when the analysis runs in threads here
        self.workers = analysis_workers(config)
        self._detector = FailureDetector(config.detection)
        self._redactor = redactor
        self._pool = self._start_pool(redactor)
        # (the job as scheduled, its analysis or what the analysis raised)
        self._results: queue.SimpleQueue[tuple[_Scheduled, Analysis | BaseException] | None] = (
            queue.SimpleQueue()
        )
        # batches handed to the pool and not finished: one a worker, plus one waiting for the next free
        self._slots = threading.BoundedSemaphore(self.workers + 1)
        # an LLM method's job waits on the network: one at a time, so no worker sits on a queue
        in_process = not uses_llm(config.attribution)
        self._dispatcher: BatchingWorker[_Scheduled] = BatchingWorker(
            self._dispatch, name="otel-blame-dispatch", max_batch=_MAX_JOBS_A_TRIP if in_process else 1
        )
        self._pending = 0  # jobs queued or running
        self._failed_pending = 0  # ... of which failed traces
        self._lock = threading.Condition()
        self._warned: set[tuple[str, str]] = set()  # (service, what): logged once each
        self._closed = threading.Event()
        self._finisher = threading.Thread(target=self._finish_loop, name="otel-blame-finish", daemon=True)
        self._finisher.start()

    def _start_pool(self, redactor: Redactor) -> Executor:
        """Worker processes (a fork server, so the workers do not inherit gRPC's threads). A redactor
        that cannot be sent to them (an embedding's hook, a lambda) keeps LLM attribution in threads
        here: content goes to an LLM only through the processor's own redactor."""
        attribution = self._config.attribution
        needs_redactor = attribution.redact and uses_llm(attribution)
        sent: Redactor | None = None  # in-process methods: no LLM sees content, nothing to redact
        if needs_redactor:
            try:
                pickle.dumps(redactor)
                sent = redactor
            except Exception:
                self._run_here = AttributionRunner(attribution, redactor)
                log.info("analysis in %d threads: the redactor cannot go to worker processes", self.workers)
                return ThreadPoolExecutor(self.workers, thread_name_prefix="otel-blame-analyse")
        workers_conclude = self._cross_run is None  # else the evidence is read here first
        if workers_conclude:
            try:
                pickle.dumps(self._concluding)
            except Exception:  # an embedding's redaction hook or enricher: concluded here
                workers_conclude = False
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["otel_blame.processor.analysis"])
        pool = ProcessPoolExecutor(
            self.workers,
            mp_context=context,
            initializer=pure.start_worker,
            initargs=(
                attribution,
                self._config.detection,
                sent,
                os.getpid(),
                self._wal.path,
                self._concluding if workers_conclude else None,
            ),
        )
        # start them now rather than on the first failed trace (see wait_ready)
        self._warming = [pool.submit(pure.warm_up) for _ in range(self.workers)]
        return pool

    _warming: list[Future[None]] = []

    def wait_ready(self, timeout: float) -> None:
        """Until every worker process has started (a fresh one imports the analysis first). Worker
        processes that cannot start (a main module that starts the processor when imported, without
        the ``if __name__ == "__main__":`` guard multiprocessing needs) leave the analysis in threads."""
        deadline = time.monotonic() + timeout
        try:
            for future in self._warming:
                future.result(max(0.0, deadline - time.monotonic()))
        except Exception as error:
            log.warning(
                "analysis worker processes did not start (%s: %s); analysing in %d threads instead",
                type(error).__name__,
                error,
                self.workers,
            )
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._run_here = AttributionRunner(self._config.attribution, self._redactor)
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="otel-blame-analyse")
        self._warming = []

    _run_here: AttributionRunner | None = None

    @property
    def _concluding_there(self) -> Concluding | None:
        """What the threads of this process conclude with (the processes got theirs at start)."""
        return self._concluding if self._cross_run is None else None

    def _submit(self, job: AnalysisJob) -> Future[Analysis]:
        if self._run_here is not None:
            return self._pool.submit(
                pure.analyse_one, job, self._run_here, self._detector, self._jobs, self._concluding_there
            )
        return self._pool.submit(pure.run_job, job)

    # -- the stage -------------------------------------------------------------------------------
    def consume(self, trace: BufferedTrace) -> None:
        if trace.overflowed or not trace.has_agent or not trace.span_payloads:
            self._out.consume(Analysed(trace, Handling.UNCHANGED))
            return
        if not trace.decision.failed and trace.decision.decided:
            self._out.consume(Analysed(trace, Handling.SUCCESS))
            self._observe(trace)
            return
        with self._lock:
            if self._failed_pending >= self._config.assembly.max_traces:
                self._counters.add("analysis_overflow_traces")
                overflow = True
            else:
                overflow = False
                deferred = self._failed_pending >= self._config.attribution.forward_first_backlog
        if overflow:
            self._out.consume(Analysed(trace, Handling.UNCHANGED))
            return
        if deferred:
            self._defer(trace)
        else:
            self._schedule(trace, trace.decision, late=False)

    def _defer(self, trace: BufferedTrace) -> None:
        """Forward first: the job to the log, then the trace on (unchanged), then the job to a worker
        with only its row's id. A job the log cannot take leaves its trace forwarded all the same,
        its blame then kept in memory only (counted)."""
        self._counters.add("forwarded_before_analysis")
        body = encode_job(trace.trace_id, trace.decision, trace.span_payloads, trace.log_payloads)

        def stored(row: int, error: BaseException | None) -> None:  # on the log's writer thread (or below)
            self._out.consume(Analysed(trace, Handling.DEFERRED))
            if error is not None:
                self._unkept_job(trace, error)
                return
            waiting = _deferred_trace(
                trace.trace_id, trace.first_seen, trace.last_seen, replayed=trace.replayed
            )
            self._schedule(waiting, trace.decision, late=True, job_row=row, counted=True)

        with self._lock:  # waiting from now on, so that the next failed trace sees the backlog
            self._pending += 1
            self._failed_pending += 1
        try:
            self._wal.append_then(KIND_ANALYSIS, body, 1, stored)
        except (WALFull, WALClosed) as error:  # refused at once: ``stored`` is not called by the log
            stored(0, error)

    def _unkept_job(self, trace: BufferedTrace, error: BaseException) -> None:
        self._counters.add("analysis_jobs_not_kept")
        log.warning("trace %s forwarded first; its analysis job is not kept: %s", trace.trace_id.hex(), error)
        self._schedule(trace, trace.decision, late=True, counted=True)

    def resume(self, trace_id: bytes, decision: TraceDecision, job_row: int) -> None:
        """A deferred job left in the log by an earlier run (replayed on start): analyse it now; its
        trace went out already, so its blame goes as a late span."""
        trace = _deferred_trace(trace_id, 0.0, 0.0, replayed=True)  # seen by an earlier run only
        self._schedule(trace, decision, late=True, job_row=job_row)

    def consume_late(self, trace: BufferedTrace, decision: TraceDecision) -> None:
        """A trace already exported that turned out failed (a late failed root): blame it late."""
        self._schedule(trace, decision, late=True)

    def analyse_now(self, trace: BufferedTrace, decision: TraceDecision) -> Analysed:
        """Analyse a trace already exported (a verdict) and wait for it; raises what the analysis raised."""
        job = _job(trace, decision, late=True)
        analysis = self._submit(job).result()
        return self._analysed(trace, analysis, late=True)

    def _schedule(
        self,
        trace: BufferedTrace,
        decision: TraceDecision,
        *,
        late: bool,
        job_row: int = 0,
        counted: bool = False,
    ) -> None:
        """Queue a failed trace's job for the next free worker (``counted``: already counted as waiting)."""
        if not counted:
            with self._lock:
                self._pending += 1
                self._failed_pending += 1
        job = _job(trace, decision, stored_row=job_row, late=late)
        self._dispatcher.put(_Scheduled(trace, job, observing=False))

    def _dispatch(self, batch: list[_Scheduled]) -> None:
        """Hand the jobs that waited to the pool in one task, once a worker is (about to be) free."""
        while not self._slots.acquire(timeout=0.5):
            if self._closed.is_set():
                break
        else:
            try:
                future = self._submit_many(tuple(scheduled.job for scheduled in batch))
            except RuntimeError:  # shutting down
                self._slots.release()
            else:
                future.add_done_callback(lambda done: self._collect(batch, done))
                return
        for scheduled in batch:  # not analysed: as before its analysis was asked for (a job stays in the log)
            self._done(failed=not scheduled.observing)
            if not scheduled.job.late and not scheduled.observing:
                self._out.consume(Analysed(scheduled.trace, Handling.UNCHANGED))

    def _collect(self, batch: list[_Scheduled], done: Future[list[Analysis | Exception]]) -> None:
        self._slots.release()
        try:
            results: list[Analysis | BaseException] = list(done.result())
        except BaseException as error:  # the worker died, the pool was shut down
            results = [error] * len(batch)
        for scheduled, result in zip(batch, results, strict=True):
            self._results.put((scheduled, result))

    def _submit_many(self, jobs: tuple[AnalysisJob, ...]) -> Future[list[Analysis | Exception]]:
        if self._run_here is not None:
            return self._pool.submit(
                pure.analyse_each, jobs, self._run_here, self._detector, self._jobs, self._concluding_there
            )
        return self._pool.submit(pure.run_jobs, jobs)

    def _observe(self, trace: BufferedTrace) -> None:
        """A success's trajectory for the cross-run statistics, built only while few traces wait (a
        failure's blame comes first); else its verdict goes on without one (counted as skipped)."""
        if self._cross_run is None or not self._config.cross_run.observe_successes:
            self._out.consume(Analysed(trace, Handling.OBSERVED))
            return
        with self._lock:
            busy = self._pending >= self._config.cross_run.success_backlog
            if not busy:
                self._pending += 1
        if busy:
            self._counters.add("cross_run_skipped_traces")
            self._out.consume(Analysed(trace, Handling.OBSERVED))
            return
        self._dispatcher.put(_Scheduled(trace, _job(trace, trace.decision, attribute=False), observing=True))

    # -- results ---------------------------------------------------------------------------------
    def _finish_loop(self) -> None:
        while (item := self._results.get()) is not None:
            scheduled, result = item
            trace, late, observing, job_row = (
                scheduled.trace,
                scheduled.job.late,
                scheduled.observing,
                scheduled.job.stored_row,
            )
            if self._closed.is_set():  # stopped before it finished: its rows (and job) stay in the log
                self._done(failed=not observing)
                continue
            try:
                if isinstance(result, BaseException):
                    raise result
                analysis = result
                if observing:
                    built = analysis if analysis.status == pure.BUILT else None
                    self._out.consume(Analysed(trace, Handling.OBSERVED, built))
                elif not analysis.decision.failed:  # a trace without root, decided here: it did not fail
                    self._not_failed(trace, analysis, late=late, job_row=job_row)
                else:
                    self._out.consume(self._analysed(trace, analysis, late=late, job_row=job_row))
            except Exception:
                self._counters.add("analysis_errors")
                log.exception("analysing trace %s failed; forwarding it unchanged", trace.trace_id.hex())
                if observing:
                    self._out.consume(Analysed(trace, Handling.OBSERVED))
                elif not late:
                    self._out.consume(Analysed(trace, Handling.UNCHANGED))
                elif job_row:  # the same job would fail the same way after a restart
                    self._wal.release([job_row])
            finally:
                self._done(failed=not observing)

    def _not_failed(self, trace: BufferedTrace, analysis: Analysis, *, late: bool, job_row: int) -> None:
        if not late:
            self._out.consume(Analysed(trace, Handling.SUCCESS))
        elif job_row:  # nothing to blame: the job is done
            self._wal.release([job_row])
        if analysis.status == pure.BUILT:
            self._out.consume(Analysed(trace, Handling.OBSERVED, analysis))
        else:
            self._counters.add("no_trajectory_traces")

    def _analysed(
        self, trace: BufferedTrace, analysis: Analysis, *, late: bool, job_row: int = 0
    ) -> Analysed:
        """The worker's analysis finished here: counted, and its blame concluded if the worker did not
        (weighed against the cross-run evidence, described, written)."""
        trace_hex = trace.trace_id.hex()
        if analysis.status == NO_TRAJECTORY:
            self._counters.add("no_trajectory_traces")
            log.debug("trace %s: %s; not attributed", trace_hex, analysis.problem)
            self._warn_once(
                analysis.problem_service or "unknown_service",
                "no_trajectory",
                f"failed trace not attributed: {analysis.problem}",
            )
            return Analysed(trace, Handling.ANALYSED, analysis, late=late, job_row=job_row)
        if analysis.steps_unnamed:
            self._counters.add("agent_unnamed_traces")
            self._warn_once(
                analysis.workflow_service,
                "agent_unnamed",
                f"{analysis.steps_unnamed} step(s) of trace {trace_hex} name no agent "
                "(no agent span, graph node or system prompt names one); named after the span they ran "
                'in, or "unnamed agent"',
            )
        if analysis.fell_back:
            self._counters.add("fallback_attributions")
        blamed = analysis.blamed
        if analysis.status == ATTRIBUTED and blamed is None:
            assert analysis.trajectory is not None and analysis.attribution is not None
            request, resource = None, None
            if not late:  # the trace's own spans carry the blame
                request = ExportTraceServiceRequest.FromString(b"".join(trace.span_payloads))
            elif analysis.resource:  # a late blame span carries the root's resource
                resource = Resource.FromString(analysis.resource)
            blamed = pure.conclude(
                analysis.trajectory,
                analysis.attribution,
                self._evidence(analysis),
                self._concluding,
                late=late,
                request=request,
                resource=resource,
                service=analysis.workflow_service,
            )
            if blamed.attribution.step != analysis.attribution.step:
                self._counters.add("cross_run_changed_verdicts")
        if blamed is not None:
            blamed = self._grouped(blamed)
        return Analysed(trace, Handling.ANALYSED, analysis, late, job_row, blamed)

    def _grouped(self, blamed: Blamed) -> Blamed:
        """The blame with the pattern its cause falls into (the book's answer; the candidate the
        analysis wrote when the book cannot answer: a shared store that is down)."""
        if self._patterns is None or blamed.cause is None:
            return blamed
        try:
            known = self._patterns.assign(blamed.cause, time.time())
        except Exception as error:
            self._counters.add("pattern_errors")
            log.warning("pattern book: cannot assign a pattern (%s: %s)", type(error).__name__, error)
            return blamed
        grouped = with_pattern(blamed, known)
        if grouped.payload is not blamed.payload:
            self._counters.add("patterns_joined_older")
        return grouped

    def _evidence(self, analysis: Analysis):  # noqa: ANN202 - CrossRunEvidence | None
        if self._cross_run is None or analysis.trajectory is None:
            return None
        key = workflow_key(
            analysis.workflow_service, analysis.trajectory, self._config.cross_run.workflow_key
        )
        try:
            return self._cross_run.evidence(key, analysis.trajectory)
        except sqlite3.Error as error:
            self._counters.add("cross_run_errors")
            log.warning("cross-run statistics: could not read evidence: %s", error)
            return None

    def _warn_once(self, service: str, what: str, reason: str) -> None:
        """A trace problem the operator should fix in the app's instrumentation: logged once per service."""
        with self._lock:
            if (service, what) in self._warned:
                return
            self._warned.add((service, what))
        log.warning("service %s: %s (logged once per service)", service, reason)

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def _done(self, *, failed: bool) -> None:
        with self._lock:
            self._pending -= 1
            if failed:
                self._failed_pending -= 1
            self._lock.notify_all()

    def wait_idle(self, deadline: float) -> bool:
        with self._lock:
            while self._pending and time.monotonic() < deadline:
                self._lock.wait(0.1)
            return not self._pending

    def close(self) -> None:
        """Stop: analyses not finished by now are dropped (their traces stay in the write-ahead log
        and are analysed again on the next start; a forwarded one loses only its late blame)."""
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._dispatcher.close()
        self._results.put(None)
        self._finisher.join(5)


_MAX_JOBS_A_TRIP = 16


@dataclass(frozen=True, slots=True)
class _Scheduled:
    """A job waiting for a worker, and what to do with its analysis (``job.late``; ``job.stored_row``:
    a deferred job's log row, 0 for none)."""

    trace: BufferedTrace
    job: AnalysisJob
    observing: bool  # only a success's trajectory, for the cross-run statistics


def _job(
    trace: BufferedTrace,
    decision: TraceDecision,
    *,
    attribute: bool = True,
    stored_row: int = 0,
    late: bool = False,
) -> AnalysisJob:
    """The trace's job (a deferred one's ``trace`` holds no payloads: the worker reads them from
    the log's ``stored_row``)."""
    return AnalysisJob(
        trace.trace_id,
        tuple(trace.span_payloads),
        tuple(trace.log_payloads),
        decision,
        time.monotonic(),
        attribute,
        stored_row,
        late,
    )


def _deferred_trace(trace_id: bytes, first_seen: float, last_seen: float, *, replayed: bool) -> BufferedTrace:
    """What a deferred job holds of its trace while it waits: its id (the payloads are in the log)."""
    return BufferedTrace(trace_id, first_seen, last_seen, has_root=True, has_agent=True, replayed=replayed)
