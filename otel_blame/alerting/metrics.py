"""Culprit counters for alerting on agents that keep failing, exposed with prometheus-client.

The processor calls :meth:`CulpritMetrics.record_trace` for every trace it completes and
:meth:`CulpritMetrics.record_attribution` for every blame it assigns; ``/metrics`` serves the
instance's own :attr:`CulpritMetrics.registry` (no global registry, so two processors in one
process do not share counts).

The blame counters (``otel_blame_attributions_total``, ``otel_blame_attribution_fallbacks_total``)
are read at scrape time from a :class:`BlameCounterSource` source. With the blame store on, that source
is the store: it counts each blame in the same transaction that keeps the failure, so the metric,
the UI and ``otel-blame top`` read one record of each blame. With the store off, the counts are kept
here in memory. Both count through :func:`culprit_labels` and :func:`counted_agent`, so the labels
and the cardinality bound are one piece of logic: past ``max_agents`` distinct (service, agent)
pairs, new agents are counted as ``other``. Only decided verdicts are blames on these counters
unless ``count_undecided`` (``alerting.count_undecided``); undecided ones are counted apart, per
method, on ``otel_blame_undecided_attributions_total``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE  # noqa: N811 - the module's name for it
from prometheus_client import CollectorRegistry, Counter, Summary, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from otel_blame.attribution.result import Attribution

log = logging.getLogger(__name__)

OVERFLOW_AGENT = "other"

ATTRIBUTIONS_TOTAL = "otel_blame_attributions_total"
TRACES_TOTAL = "otel_blame_traces_total"
FALLBACKS_TOTAL = "otel_blame_attribution_fallbacks_total"
ATTRIBUTION_SECONDS = "otel_blame_attribution_seconds"
LLM_TOKENS_TOTAL = "otel_blame_llm_tokens_total"
UNDECIDED_TOTAL = "otel_blame_undecided_attributions_total"
PATTERNS_TOTAL = "otel_blame_failure_patterns_total"
PATTERN_FIRST_SEEN = "otel_blame_failure_pattern_first_seen_seconds"
OVERFLOW_PATTERN = "other"

__all__ = [
    "CONTENT_TYPE",
    "BlameSeries",
    "BlameCounterSource",
    "CulpritMetrics",
    "MemoryBlameCounters",
    "OVERFLOW_AGENT",
    "counted_agent",
    "culprit_labels",
    "merge_series",
    "method_label",
]


def _counter_name(total_name: str) -> str:
    return total_name.removesuffix("_total")


def method_label(method: str) -> str:
    """``heuristic(fallback:all_at_once)`` -> ``heuristic``: the method label of the blame counters."""
    return method.split("(", 1)[0]


def is_fallback(method: str) -> bool:
    """Whether the configured method failed and the offline one gave the blame."""
    return "fallback" in method


@dataclass(frozen=True)
class CulpritLabels:
    service: str
    agent: str
    method: str
    fallback: bool


def culprit_labels(service: str, agent: str, method: str) -> CulpritLabels:
    """How one blame is labelled on the counters: the service, the culprit agent, the base method
    (values cut to the lengths the blame store keeps, so both count a blame under the same labels)."""
    return CulpritLabels(service[:256], agent[:256], method_label(method)[:128], is_fallback(method))


def counted_agent(agent: str, *, known: bool, distinct_pairs: int, max_agents: int) -> str:
    """The agent label a blame is counted under: its own name, or ``other`` once ``max_agents``
    distinct (service, agent) pairs are counted and this pair is not one of them."""
    if known or distinct_pairs < max_agents:
        return agent
    return OVERFLOW_AGENT


@dataclass(frozen=True)
class BlameSeries:
    """One series of the blame counters: blames (and fallbacks) of one (service, agent, method)."""

    service: str
    agent: str
    method: str
    blames: int
    fallbacks: int = 0


def merge_series(*parts: Sequence[BlameSeries]) -> list[BlameSeries]:
    """Sum series with the same labels (e.g. the store's counts and the blames it could not keep)."""
    merged: dict[tuple[str, str, str], list[int]] = {}
    for part in parts:
        for series in part:
            counts = merged.setdefault((series.service, series.agent, series.method), [0, 0])
            counts[0] += series.blames
            counts[1] += series.fallbacks
    return [BlameSeries(*key, *counts) for key, counts in merged.items()]


class BlameCounterSource(Protocol):
    """Where the blame counters are kept; read at every scrape."""

    def blame_series(self) -> Sequence[BlameSeries]: ...


class MemoryBlameCounters:
    """The blame counters when no blame store keeps them (``store.enabled: false``)."""

    def __init__(self, max_agents: int) -> None:
        self._lock = threading.Lock()
        self._max_agents = max_agents
        self._pairs: set[tuple[str, str]] = set()
        self._counts: dict[tuple[str, str, str], list[int]] = {}

    def add(self, labels: CulpritLabels) -> None:
        with self._lock:
            pair = (labels.service, labels.agent)
            agent = counted_agent(
                labels.agent,
                known=pair in self._pairs,
                distinct_pairs=len(self._pairs),
                max_agents=self._max_agents,
            )
            if agent == labels.agent:
                self._pairs.add(pair)
            counts = self._counts.setdefault((labels.service, agent, labels.method), [0, 0])
            counts[0] += 1
            counts[1] += int(labels.fallback)

    def blame_series(self) -> list[BlameSeries]:
        with self._lock:
            return [BlameSeries(*key, *counts) for key, counts in self._counts.items()]


class _CulpritCollector(Collector):
    """Reads the blame counters from their source at scrape time. A source that cannot be read
    (the shared database is down) serves its last counts, so the counters never go backwards."""

    def __init__(self, metrics: CulpritMetrics) -> None:
        self._metrics = metrics
        self._last: Sequence[BlameSeries] = ()
        self._warned_at = 0.0

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield from self._families(())

    def collect(self) -> Iterator[CounterMetricFamily]:
        source = self._metrics.source
        try:
            counts = self._last = list(source.blame_series())
        except Exception as error:  # a scrape must not fail because the store is unreachable
            counts = self._last
            if time.monotonic() - self._warned_at > 60:
                self._warned_at = time.monotonic()
                log.warning(
                    "culprit counters: cannot read the blame store (%s); serving the last counts", error
                )
        yield from self._families(counts)

    @staticmethod
    def _families(counts: Sequence[BlameSeries]) -> Iterator[CounterMetricFamily]:
        blames = CounterMetricFamily(
            _counter_name(ATTRIBUTIONS_TOTAL),
            "Failed traces blamed on an agent.",
            labels=["service", "agent", "method"],
        )
        fallbacks = CounterMetricFamily(
            _counter_name(FALLBACKS_TOTAL),
            "Attributions that fell back to the offline method.",
            labels=["method"],
        )
        per_method: dict[str, int] = {}
        for count in counts:
            blames.add_metric([count.service, count.agent, count.method], count.blames)
            if count.fallbacks:
                per_method[count.method] = per_method.get(count.method, 0) + count.fallbacks
        for method, value in per_method.items():
            fallbacks.add_metric([method], value)
        yield blames
        yield fallbacks


class PatternCounters(Collector):
    """``otel_blame_failure_patterns_total{service, workflow, pattern}``: failed runs per failure pattern
    (a workflow's undecided group under its own id), and each pattern's first sighting as a gauge
    (``otel_blame_failure_pattern_first_seen_seconds``, unix seconds; what the new-pattern rule reads).
    Bounded: past ``max_series`` distinct (service, workflow, pattern), new patterns are counted as
    ``other`` (which has no first sighting). Counted in memory, per process, from its start."""

    def __init__(self, max_series: int = 200) -> None:
        self.max_series = max_series
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, str], int] = {}
        self._first_seen: dict[tuple[str, str, str], float] = {}

    def add(self, service: str, workflow: str, pattern: str, first_seen: float) -> None:
        key = (service[:256], workflow[:512], pattern)
        with self._lock:
            if key not in self._counts and len(self._first_seen) >= self.max_series:
                key = (key[0], key[1], OVERFLOW_PATTERN)
            else:
                seen = self._first_seen.get(key)
                self._first_seen[key] = first_seen if seen is None else min(seen, first_seen)
            self._counts[key] = self._counts.get(key, 0) + 1

    def counts(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self._counts)

    def describe(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield from self._families({}, {})

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        with self._lock:
            counts, first_seen = dict(self._counts), dict(self._first_seen)
        yield from self._families(counts, first_seen)

    @staticmethod
    def _families(
        counts: dict[tuple[str, str, str], int], first_seen: dict[tuple[str, str, str], float]
    ) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        labels = ["service", "workflow", "pattern"]
        runs = CounterMetricFamily(
            _counter_name(PATTERNS_TOTAL), "Failed runs per failure pattern (blame.pattern).", labels=labels
        )
        for key, value in counts.items():
            runs.add_metric(list(key), value)
        seen = GaugeMetricFamily(
            PATTERN_FIRST_SEEN, "When each failure pattern was first seen, unix seconds.", labels=labels
        )
        for key, value in first_seen.items():
            seen.add_metric(list(key), value)
        yield runs
        yield seen


class CulpritMetrics:
    """Thread-safe counters on a private prometheus-client registry."""

    def __init__(
        self,
        max_agents: int = 500,
        registry: CollectorRegistry | None = None,
        *,
        count_undecided: bool = False,
        max_patterns: int = 200,
    ) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.max_agents = max_agents
        self.count_undecided = count_undecided
        self._memory = MemoryBlameCounters(max_agents)
        self.source: BlameCounterSource = self._memory
        self._traces = Counter(
            _counter_name(TRACES_TOTAL),
            "Completed traces by outcome.",
            ["outcome", "attributed"],
            registry=self.registry,
        )
        self._tokens = Counter(
            _counter_name(LLM_TOKENS_TOTAL),
            "LLM tokens spent on attribution.",
            ["direction"],
            registry=self.registry,
        )
        self._undecided = Counter(
            _counter_name(UNDECIDED_TOTAL),
            "Blames whose evidence did not decide the verdict (blame.decided=false), by method.",
            ["method"],
            registry=self.registry,
        )
        self._seconds = Summary(
            ATTRIBUTION_SECONDS, "Time spent attributing failed traces.", registry=self.registry
        )
        self.registry.register(_CulpritCollector(self))
        self.patterns = PatternCounters(max_patterns)
        self.registry.register(self.patterns)

    def count_blames_in(self, source: BlameCounterSource | None) -> None:
        """Read the blame counters from ``source`` (the blame store, which counts each blame as it keeps
        it) from now on; ``None`` goes back to counting them here."""
        self.source = self._memory if source is None else source

    @property
    def counts_here(self) -> bool:
        """True when :meth:`record_attribution` counts the blame itself (no blame store attached)."""
        return self.source is self._memory

    def record_trace(self, outcome: str, attributed: bool) -> None:
        """Count one completed trace by outcome (success | failure | unknown) and whether it was blamed."""
        self._traces.labels(outcome=str(outcome), attributed="true" if attributed else "false").inc()

    def counts(self, attribution: Attribution) -> bool:
        """Whether a blame goes on the culprit counters: a decided verdict, or any with
        ``count_undecided`` (``alerting.count_undecided``)."""
        return attribution.decided or self.count_undecided

    def record_attribution(self, attribution: Attribution, service: str = "") -> None:
        """Count one blame's cost, and the blame itself (a decided one, see :meth:`counts`) unless the
        blame store counts it."""
        if not attribution.decided:
            self._undecided.labels(method=method_label(attribution.method)).inc()
        if self.counts_here and self.counts(attribution):
            self._memory.add(culprit_labels(service, attribution.agent, attribution.method))
        self._tokens.labels(direction="input").inc(attribution.cost.input_tokens)
        self._tokens.labels(direction="output").inc(attribution.cost.output_tokens)
        self._seconds.observe(attribution.cost.seconds)

    def record_pattern(self, service: str, workflow: str, pattern: str, first_seen: float) -> None:
        """Count one failed run of a failure pattern (see :class:`PatternCounters`)."""
        self.patterns.add(service, workflow, pattern, first_seen)

    def attributions(self) -> dict[tuple[str, str], int]:
        """(service, agent) -> how often blamed, summed over methods, as the counters read now."""
        out: dict[tuple[str, str], int] = {}
        for count in self.source.blame_series():
            out[(count.service, count.agent)] = out.get((count.service, count.agent), 0) + count.blames
        return out

    def render(self) -> str:
        """The Prometheus text exposition format."""
        return generate_latest(self.registry).decode()
