"""Listeners on verdicts: what happens because a trace was (or was not) blamed, outside the analysis.

The enrich+export stage publishes one :class:`TraceVerdict` per analysed agent trace on the
:class:`VerdictBus`. Two kinds of listener hear it:

- *inline* ones, called on the publishing thread before the trace is exported, cheap and
  in memory: the culprit metrics and the processor's own counters (so ``/metrics`` already counts
  a blame when its spans arrive downstream);
- *queued* ones, called on the bus's own thread, in order, one batch at a time (none needs to be
  thread-safe, and none holds up analysis or export): cross-run counting, repeated-culprit
  alerting and its webhook, and every blame listener added with :meth:`VerdictBus.add_listener`
  (a blame store plugs in here).

A blame listener is a callable taking a :class:`FinishedAttribution` (trace id, service, the
*redacted* trajectory, the attribution, the outcome, the wall-clock time, late or not); one that
also has ``consume_batch(list[FinishedAttribution])`` gets each batch in one call instead (a store
then writes a batch in one transaction). A listener that raises is logged and changes nothing
about the trace. The queue is bounded: when listeners fall behind, publishing waits, which holds
back the analysis results (never the ingest: a failed trace waiting for analysis is forwarded
first and blamed later, see :mod:`.analyser`).
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from otel_blame.alerting.metrics import CulpritMetrics
from otel_blame.alerting.repeated import RepeatedCulpritDetector, RepeatedCulpritRule
from otel_blame.alerting.webhook import WebhookNotifier
from otel_blame.attribution.result import Attribution
from otel_blame.processor.config import CrossRunConfig
from otel_blame.processor.counters import Counters
from otel_blame.processor.cross_run import CrossRunStatistics, workflow_key
from otel_blame.redaction import Redactor, redact_trajectory
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

    @property
    def failed(self) -> bool:
        return self.outcome == Outcome.FAILURE


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


class AlertingListener:
    """Queued: one alert when an agent is blamed ``threshold`` times in a window (and the webhook)."""

    def __init__(
        self, rule: RepeatedCulpritRule, counters: Counters, notifier: WebhookNotifier | None
    ) -> None:
        self._repeated = RepeatedCulpritDetector(rule)
        self._counters = counters
        self._notifier = notifier

    def on_verdicts(self, verdicts: Sequence[TraceVerdict]) -> None:
        for verdict in verdicts:
            if verdict.attribution is None:
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


class CrossRunCounter:
    """Queued: every run with a trajectory counted in its workflow's cross-run statistics (a failed
    run only once blamed, with its blamed step)."""

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
            blamed_step = verdict.attribution.step if verdict.attribution is not None else None
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
    """Queued: the blame listeners, each blame's trajectory redacted once for all of them."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self.listeners: list[AttributionListener] = []

    def on_verdicts(self, verdicts: Sequence[TraceVerdict]) -> None:
        if not self.listeners:
            return
        finished = [
            FinishedAttribution(
                trace_id=verdict.trace_id,
                service=verdict.service,
                trajectory=redact_trajectory(verdict.trajectory, self._redactor),
                attribution=verdict.attribution,
                outcome=Outcome.FAILURE.value,
                finished_at_unix=verdict.finished_at_unix,
                late=verdict.late,
            )
            for verdict in verdicts
            if verdict.attribution is not None and verdict.trajectory is not None
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


class VerdictBus:
    """Publishes verdicts: inline listeners at once, queued ones on the bus thread in batches."""

    def __init__(
        self,
        *,
        inline: Sequence[VerdictListener] = (),
        queued: Sequence[VerdictListener] = (),
        capacity: int = 10_000,
        max_batch: int = 256,
    ) -> None:
        self._inline = list(inline)
        self._queued = list(queued)
        self._queue: queue.Queue[TraceVerdict | None] = queue.Queue(capacity)
        self._max_batch = max_batch
        self._busy = 0
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="otel-blame-listeners", daemon=True)
        self._thread.start()

    def publish(self, verdict: TraceVerdict) -> None:
        for listener in self._inline:
            try:
                listener.on_verdicts((verdict,))
            except Exception:
                log.exception("verdict listener %r failed", listener)
        if self._queued:
            with self._idle:
                self._busy += 1
            self._queue.put(verdict)

    def wait_idle(self, deadline: float) -> bool:
        with self._idle:
            while self._busy and time.monotonic() < deadline:
                self._idle.wait(0.05)
            return not self._busy

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(5)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < self._max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            for listener in self._queued:
                try:
                    listener.on_verdicts(batch)
                except Exception:
                    log.exception("verdict listener %r failed", listener)
            with self._idle:
                self._busy -= len(batch)
                self._idle.notify_all()
            if stop:
                return
