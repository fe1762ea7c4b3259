"""Listeners on verdicts: what happens because a trace was (or was not) blamed, outside the analysis.

The enrich+export stage publishes one :class:`TraceVerdict` per analysed agent trace on the
:class:`VerdictBus`. Three kinds of listener hear it:

- *inline* ones, called on the publishing thread before the trace is exported, cheap and
  in memory: the culprit metrics and the processor's own counters (so ``/metrics`` already counts
  a blame when its spans arrive downstream);
- *keeping* ones, called on the bus's own thread (a :class:`~.batching.BatchingWorker`), one batch
  at a time, before the batch's blamed traces are exported: the blame listeners (a blame store
  plugs in here, with :meth:`BlameProcessor.add_listener` or an extension). A blame is thus on
  disk before its spans leave and their write-ahead log rows are deleted, so a crash at any moment
  loses no blame that reached downstream;
- *queued* ones, called on the bus thread after that: cross-run counting, the new-pattern and
  pattern-surge alerts, repeated-culprit alerting, and their webhook.

The keeping and queued listeners hear only the verdicts that carry a trajectory or a blame (most
successes carry neither: their outcome is all there is, and the inline listeners count it).

None needs to be thread-safe. A blame listener is a callable taking a :class:`FinishedAttribution`
(trace id, service, the *redacted* trajectory, the attribution, the outcome, the wall-clock time,
late or not); one that also has ``consume_batch(list[FinishedAttribution])`` gets each batch in
one call instead (the blame store writes a batch in one transaction), and returns once the batch
is kept. A listener that raises is logged and changes nothing about the trace (its spans still go
on). The queue is bounded: when listeners fall behind, publishing waits, which holds back the
analysis results (never the ingest: a failed trace waiting for analysis is forwarded first and
blamed later, see :mod:`.analyser`).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from otel_blame.alerting.metrics import CulpritMetrics
from otel_blame.alerting.patterns import PatternAlertDetector
from otel_blame.alerting.repeated import RepeatedCulpritDetector
from otel_blame.alerting.webhook import WebhookNotifier
from otel_blame.attribution.result import Attribution
from otel_blame.patterns import Cause, Known, PatternDefinition
from otel_blame.processor.batching import BatchingWorker
from otel_blame.processor.config import AlertingConfig, CrossRunConfig
from otel_blame.processor.counters import Counters
from otel_blame.processor.cross_run import CrossRunStatistics, workflow_key
from otel_blame.trajectory import Outcome, Trajectory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FinishedAttribution:
    """What blame listeners receive for each blame assigned."""

    trace_id: str
    service: str
    trajectory: Trajectory  # redacted
    attribution: Attribution
    outcome: str
    finished_at_unix: float
    late: bool  # True: from a late verdict (a ``blame {agent}`` span), False: written onto the trace
    pattern: PatternDefinition | None = None  # the failure pattern it falls into (patterns on)


AttributionListener = Callable[[FinishedAttribution], None]


@dataclass(frozen=True)
class TraceVerdict:
    """What became of one analysed agent trace."""

    trace_id: str
    outcome: str  # Outcome value: "failure", "success", "unknown" (no root, not failed)
    service: str  # the root's resource service.name ("" when none)
    workflow_service: str  # the same, else the service the trajectory builder found
    trajectory: Trajectory | None  # not redacted; None when it was not built
    attribution: Attribution | None  # the blame; None when not failed, or failed and unattributed
    late: bool = False
    finished_at_unix: float = 0.0
    replayed: bool = False  # its trace (or deferred job) came back from the write-ahead log on start
    listened: Trajectory | None = None  # with a blame: the trajectory redacted, for the blame listeners
    cause: Cause | None = None  # with a blame and patterns on: what it says about its cause
    pattern: Known | None = None  # ... and the failure pattern that cause falls into (``blame.pattern``)

    @property
    def pattern_definition(self) -> PatternDefinition | None:
        if self.cause is None or self.pattern is None:
            return None
        return PatternDefinition.of(self.pattern, self.cause)

    @property
    def failed(self) -> bool:
        return self.outcome == Outcome.FAILURE

    @property
    def says_more(self) -> bool:
        """Whether it carries more than its outcome (a trajectory or a blame): only such verdicts go
        to the keeping and queued listeners, which read nothing else (the inline ones count all)."""
        return self.trajectory is not None or self.attribution is not None


class VerdictListener(Protocol):
    def on_verdicts(self, verdicts: Sequence[TraceVerdict]) -> None: ...


class MetricsListener:
    """Inline: the culprit metrics and the processor's counters of attributed and unattributed traces."""

    def __init__(self, metrics: CulpritMetrics, counters: Counters) -> None:
        self._metrics = metrics
        self._counters = counters

    def on_verdicts(self, verdicts: Sequence[TraceVerdict]) -> None:
        for verdict in verdicts:
            blamed = verdict.attribution is not None
            if verdict.failed:
                self._counters.add("attributed_traces" if blamed else "unattributed_failed_traces")
            self._metrics.record_trace(verdict.outcome, blamed)
            if verdict.attribution is not None:
                self._metrics.record_attribution(verdict.attribution, verdict.service)
            if verdict.cause is not None and verdict.pattern is not None:
                self._metrics.record_pattern(
                    verdict.service,
                    verdict.cause.signature.workflow,
                    verdict.pattern.id,
                    verdict.pattern.first_seen,
                )


class AlertingListener:
    """Queued: one alert when an agent is blamed ``threshold`` times in a window (and the webhook);
    undecided verdicts count only with ``alerting.count_undecided``."""

    def __init__(self, config: AlertingConfig, counters: Counters, notifier: WebhookNotifier | None) -> None:
        self._repeated = RepeatedCulpritDetector(config.repeated_culprit)
        self._count_undecided = config.count_undecided
        self._counters = counters
        self._notifier = notifier

    def on_verdicts(self, verdicts: Sequence[TraceVerdict]) -> None:
        for verdict in verdicts:
            if verdict.attribution is None or not (verdict.attribution.decided or self._count_undecided):
                continue
            alert = self._repeated.observe(verdict.service, verdict.attribution.agent, verdict.trace_id)
            if alert is None:
                continue
            self._counters.add("alerts")
            log.warning(
                "agent %r of %r blamed %d times in %.0f s",
                alert.agent,
                verdict.service,
                alert.count,
                alert.window_seconds,
            )
            if self._notifier is not None:
                self._notifier.notify(alert)


class PatternAlertingListener:
    """Queued: the new-pattern and pattern-surge alerts (:mod:`otel_blame.alerting.patterns`) and their
    webhook. A workflow's undecided group is not a pattern, and alerts nothing."""

    def __init__(self, config: AlertingConfig, counters: Counters, notifier: WebhookNotifier | None) -> None:
        self._detector = PatternAlertDetector(config.new_pattern, config.pattern_surge)
        self._counters = counters
        self._notifier = notifier

    def on_verdicts(self, verdicts: Sequence[TraceVerdict]) -> None:
        for verdict in verdicts:
            definition = verdict.pattern_definition
            if definition is None or verdict.cause is None or verdict.cause.undecided:
                continue
            for alert in self._detector.observe(
                verdict.service,
                definition.workflow,
                definition.id,
                definition.title,
                definition.first_seen or verdict.finished_at_unix,
                verdict.trace_id,
            ):
                self._counters.add("pattern_alerts")
                log.warning("%s: %d runs of service %r", alert.subject, alert.count, verdict.service)
                if self._notifier is not None:
                    self._notifier.notify(alert)


class CrossRunCounter:
    """Queued: every run with a trajectory counted in its workflow's cross-run statistics (a failed
    run only once blamed, with its blamed step when the verdict is decided or
    ``cross_run.count_undecided``)."""

    def __init__(self, statistics: CrossRunStatistics, settings: CrossRunConfig, counters: Counters) -> None:
        self._statistics = statistics
        self._settings = settings
        self._counters = counters

    def on_verdicts(self, verdicts: Sequence[TraceVerdict]) -> None:
        for verdict in verdicts:
            trajectory = verdict.trajectory
            if trajectory is None or (verdict.failed and verdict.attribution is None):
                continue
            key = workflow_key(verdict.workflow_service, trajectory, self._settings.workflow_key)
            attribution = verdict.attribution
            blamed_step = None
            if attribution is not None and (attribution.decided or self._settings.count_undecided):
                blamed_step = attribution.step
            try:
                counted = self._statistics.observe(
                    key, trajectory, failed=verdict.failed, blamed_step=blamed_step
                )
            except sqlite3.Error as error:
                self._counters.add("cross_run_errors")
                log.warning("cross-run statistics: could not count trace %s: %s", verdict.trace_id, error)
                continue
            self._counters.add("cross_run_observed_runs" if counted else "cross_run_skipped_traces")


class BlameListeners:
    """Keeping: the blame listeners, called with each blame and its redacted trajectory (redacted
    once for all of them, where the blame was concluded)."""

    def __init__(self) -> None:
        self.listeners: list[AttributionListener] = []

    def on_verdicts(self, verdicts: Sequence[TraceVerdict]) -> None:
        if not self.listeners:
            return
        finished = [
            FinishedAttribution(
                trace_id=verdict.trace_id,
                service=verdict.service,
                trajectory=verdict.listened,
                attribution=verdict.attribution,
                outcome=Outcome.FAILURE.value,
                finished_at_unix=verdict.finished_at_unix,
                late=verdict.late,
                pattern=verdict.pattern_definition,
            )
            for verdict in verdicts
            if verdict.attribution is not None and verdict.listened is not None
        ]
        if not finished:
            return
        for listener in list(self.listeners):
            batch: Any = getattr(listener, "consume_batch", None)
            try:
                if batch is not None:
                    batch(finished)
                    continue
                for one in finished:
                    listener(one)
            except Exception:
                log.exception("attribution listener %r failed", listener)


@dataclass(frozen=True, slots=True)
class _Published:
    verdict: TraceVerdict
    then: Callable[[], None] | None  # what waits for the verdict's blame to be kept


class VerdictBus:
    """Publishes verdicts: inline listeners at once; on the bus thread, a batch at a time, the
    ``keeping`` listeners (where a blame is kept: the blame listeners), then each verdict's ``then``
    (its trace's spans go on), then the other ``queued`` listeners.

    A blame is written once. A trace replayed from the write-ahead log after a stop may have been
    blamed, and its blame kept, before the stop (its spans had not reached the downstream yet):
    such a replayed verdict is recognised by its trace id (``kept``) and goes to no listener
    again (not stored, counted, alerted on twice); its spans still go on."""

    def __init__(
        self,
        *,
        inline: Sequence[VerdictListener] = (),
        keeping: Sequence[VerdictListener] = (),
        queued: Sequence[VerdictListener] = (),
        kept: Callable[[str], bool] | None = None,
        counters: Counters | None = None,
        capacity: int = 10_000,
        max_batch: int = 256,
    ) -> None:
        self._inline = list(inline)
        self._keeping = list(keeping)
        self._queued = list(queued)
        self._kept = kept
        self._counters = counters
        self._worker: BatchingWorker[_Published] = BatchingWorker(
            self._handle, name="otel-blame-listeners", max_batch=max_batch, capacity=capacity
        )

    def publish(self, verdict: TraceVerdict, then: Callable[[], None] | None = None) -> None:
        """Tell the listeners; ``then`` runs once the keeping listeners have the verdict (a blame is on
        disk before its trace's spans leave, so a crash after they left cannot lose it)."""
        for listener in self._inline:
            try:
                listener.on_verdicts((verdict,))
            except Exception:
                log.exception("verdict listener %r failed", listener)
        if (self._keeping or self._queued) and (verdict.says_more or then is not None):
            self._worker.put(_Published(verdict, then))
        elif then is not None:
            then()

    def wait_idle(self, deadline: float) -> bool:
        return self._worker.wait_idle(deadline)

    def close(self) -> None:
        self._worker.close()

    def _handle(self, batch: list[_Published]) -> None:
        verdicts = self._first_time([published.verdict for published in batch])
        self._tell(self._keeping, verdicts)
        for published in batch:
            if published.then is not None:
                try:
                    published.then()
                except Exception:
                    log.exception("after the verdict of trace %s", published.verdict.trace_id)
        self._tell(self._queued, verdicts)

    def _first_time(self, verdicts: list[TraceVerdict]) -> list[TraceVerdict]:
        """The verdicts without the replayed blames kept already (before the stop, or earlier in this
        batch: a trace may come back twice, from its deferred job and from its own rows)."""
        if self._kept is None or not any(v.replayed and v.attribution is not None for v in verdicts):
            return verdicts
        fresh, seen = [], set()
        for verdict in verdicts:
            if verdict.replayed and verdict.attribution is not None:
                if verdict.trace_id in seen or self._known(verdict.trace_id):
                    if self._counters is not None:
                        self._counters.add("replayed_blames_kept_before")
                    continue
                seen.add(verdict.trace_id)
            fresh.append(verdict)
        return fresh

    def _known(self, trace_id: str) -> bool:
        assert self._kept is not None
        try:
            return self._kept(trace_id)
        except Exception:  # cannot tell: written again (at least once) rather than lost
            log.exception("looking up the kept blame of trace %s", trace_id)
            return False

    @staticmethod
    def _tell(listeners: list[VerdictListener], verdicts: list[TraceVerdict]) -> None:
        for listener in listeners:
            try:
                listener.on_verdicts(verdicts)
            except Exception:
                log.exception("verdict listener %r failed", listener)
