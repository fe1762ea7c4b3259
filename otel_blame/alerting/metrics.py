"""Culprit counters for alerting on agents that keep failing, exposed with prometheus-client.

The processor calls :meth:`CulpritMetrics.record_trace` for every trace it completes and
:meth:`CulpritMetrics.record_attribution` for every blame it assigns; ``/metrics`` serves the
instance's own :attr:`CulpritMetrics.registry` (no global registry, so two processors in one
process do not share counts). Label cardinality is bounded: past ``max_agents`` distinct
(service, agent) pairs new agents are counted as ``other``.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE  # noqa: N811 - the module's name for it
from prometheus_client import CollectorRegistry, Counter, Summary, generate_latest

from otel_blame.attribution.result import Attribution

OVERFLOW_AGENT = "other"

ATTRIBUTIONS_TOTAL = "otel_blame_attributions_total"
TRACES_TOTAL = "otel_blame_traces_total"
FALLBACKS_TOTAL = "otel_blame_attribution_fallbacks_total"
ATTRIBUTION_SECONDS = "otel_blame_attribution_seconds"
LLM_TOKENS_TOTAL = "otel_blame_llm_tokens_total"

__all__ = ["CONTENT_TYPE", "CulpritMetrics", "OVERFLOW_AGENT"]


def _counter_name(total_name: str) -> str:
    return total_name.removesuffix("_total")


class CulpritMetrics:
    """Thread-safe counters on a private prometheus-client registry."""

    def __init__(self, max_agents: int = 500, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._max_agents = max_agents
        self._known_agents: set[tuple[str, str]] = set()
        self._blamed: Tally[tuple[str, str]] = Tally()
        self._attributions = Counter(
            _counter_name(ATTRIBUTIONS_TOTAL),
            "Failed traces blamed on an agent.",
            ["service", "agent", "method"],
            registry=self.registry,
        )
        self._traces = Counter(
            _counter_name(TRACES_TOTAL),
            "Completed traces by outcome.",
            ["outcome", "attributed"],
            registry=self.registry,
        )
        self._fallbacks = Counter(
            _counter_name(FALLBACKS_TOTAL),
            "Attributions that fell back to the offline method.",
            ["method"],
            registry=self.registry,
        )
        self._tokens = Counter(
            _counter_name(LLM_TOKENS_TOTAL),
            "LLM tokens spent on attribution.",
            ["direction"],
            registry=self.registry,
        )
        self._seconds = Summary(
            ATTRIBUTION_SECONDS, "Time spent attributing failed traces.", registry=self.registry
        )

    def record_trace(self, outcome: str, attributed: bool) -> None:
        """Count one completed trace by outcome (success | failure | unknown) and whether it was blamed."""
        self._traces.labels(outcome=str(outcome), attributed="true" if attributed else "false").inc()

    def record_attribution(self, attribution: Attribution, service: str = "") -> None:
        """Count one blame: the culprit agent, the method that named it, the service it ran in."""
        method = attribution.method
        base_method = method.split("(", 1)[0]
        with self._lock:
            agent = attribution.agent
            if (service, agent) not in self._known_agents:
                if len(self._known_agents) >= self._max_agents:
                    agent = OVERFLOW_AGENT
                else:
                    self._known_agents.add((service, agent))
            self._blamed[(service, agent)] += 1
        self._attributions.labels(service=service, agent=agent, method=base_method).inc()
        if "fallback" in method:
            self._fallbacks.labels(method=base_method).inc()
        self._tokens.labels(direction="input").inc(attribution.cost.input_tokens)
        self._tokens.labels(direction="output").inc(attribution.cost.output_tokens)
        self._seconds.observe(attribution.cost.seconds)

    def attributions(self) -> dict[tuple[str, str], int]:
        """(service, agent) -> how often blamed, summed over methods."""
        with self._lock:
            return dict(self._blamed)

    def render(self) -> str:
        """The Prometheus text exposition format."""
        return generate_latest(self.registry).decode()
