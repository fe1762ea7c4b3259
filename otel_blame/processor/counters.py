"""The processor's own counters, shared by the components of the chain, exposed at ``/metrics``.

Each component counts into one thread-safe :class:`Counters`; :class:`ProcessorCollector` turns
the processor's ``stats()`` into Prometheus families (``otel_blame_processor_<name>_total`` for
counters, ``otel_blame_processor_<name>`` for gauges) at scrape time, so nothing is counted twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

NAMES = (
    "received_spans",
    "received_log_records",
    "rejected_requests",
    "rejected_spans",
    "rejected_log_records",
    "storage_errors",
    "attributed_traces",
    "fallback_attributions",
    "unattributed_failed_traces",
    "no_trajectory_traces",
    "agent_unnamed_traces",  # a step's agent was named by no telemetry (after its span, or "unnamed agent")
    "analysis_errors",
    "late_root_failures",
    "analysis_overflow_traces",
    "forwarded_before_analysis",  # failed traces sent on before their analysis (blamed by a late span)
    "late_blames_dropped",  # late blame spans the write-ahead log could not store
    "analysis_jobs_not_kept",  # failed traces forwarded first whose job the log could not store
    "replayed_blames_kept_before",  # blames of replayed traces kept before the stop: not written again
    "verdicts",
    "replayed_rows",
    "alerts",
    "evaluation_logs_dropped",  # gen_ai.evaluation.result log records the log could not store
    "evaluation_logs_refused",  # ... not sent: the downstream takes no OTLP logs (Jaeger, Tempo)
    "cross_run_observed_runs",  # runs counted in the cross-run statistics (failed and successful)
    "cross_run_changed_verdicts",  # attributions whose step the cross-run evidence changed
    "cross_run_skipped_traces",  # runs not counted: analysis pool saturated, or the disk nearly full
    "cross_run_errors",  # the statistics' database could not be read or written
    "patterns_joined_older",  # blames whose cause fell into an older pattern than the one it would open
    "pattern_errors",  # the pattern book could not answer (the blame kept the pattern it would open)
    "pattern_alerts",  # new-pattern and pattern-surge alerts
)
GAUGE_PREFIXES = (
    "assembly_buffered",
    "wal_",
    "retained_",
    "export_pending",
    "analysis_pending",
    "analysis_workers",
)


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(NAMES, 0)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._values[name] += amount

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


class ProcessorCollector(Collector):
    """Reads ``stats()`` at scrape time."""

    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        for key, value in sorted(self._stats().items()):
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            name = f"otel_blame_processor_{key}"
            if key.startswith(GAUGE_PREFIXES):
                yield GaugeMetricFamily(name, f"otel-blame processor: {key.replace('_', ' ')}", value=value)
            else:
                yield CounterMetricFamily(name, f"otel-blame processor: {key.replace('_', ' ')}", value=value)
