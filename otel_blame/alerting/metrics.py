"""Culprit counters in the Prometheus text format, for alerting on agents that keep failing.

The processor calls :meth:`CulpritMetrics.record_trace` for every trace it completes and
:meth:`CulpritMetrics.record_attribution` for every blame it assigns, and serves
:meth:`CulpritMetrics.render` at ``/metrics``. Label cardinality is bounded: past
``max_agents`` distinct (service, agent) pairs new agents are counted as ``other``.
"""

from __future__ import annotations

import threading
from collections import Counter

from otel_blame.attribution.result import Attribution

OVERFLOW_AGENT = "other"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

ATTRIBUTIONS_TOTAL = "otel_blame_attributions_total"
TRACES_TOTAL = "otel_blame_traces_total"
FALLBACKS_TOTAL = "otel_blame_attribution_fallbacks_total"
ATTRIBUTION_SECONDS = "otel_blame_attribution_seconds"
LLM_TOKENS_TOTAL = "otel_blame_llm_tokens_total"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: tuple[tuple[str, str], ...]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in pairs) + "}"


class CulpritMetrics:
    """Thread-safe counters; one instance per processor, no global registry."""

    def __init__(self, max_agents: int = 500) -> None:
        self._lock = threading.Lock()
        self._max_agents = max_agents
        self._known_agents: set[tuple[str, str]] = set()
        self._attributions: Counter[tuple[tuple[str, str], ...]] = Counter()
        self._traces: Counter[tuple[tuple[str, str], ...]] = Counter()
        self._fallbacks: Counter[tuple[tuple[str, str], ...]] = Counter()
        self._tokens: Counter[tuple[tuple[str, str], ...]] = Counter()
        self._seconds_sum = 0.0
        self._seconds_count = 0

    def record_trace(self, outcome: str, attributed: bool) -> None:
        """Count one completed trace by outcome (success | failure | unknown) and whether it was blamed."""
        key = (("outcome", outcome), ("attributed", "true" if attributed else "false"))
        with self._lock:
            self._traces[key] += 1

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
            self._attributions[(("service", service), ("agent", agent), ("method", base_method))] += 1
            if "fallback" in method:
                self._fallbacks[(("method", base_method),)] += 1
            self._tokens[(("direction", "input"),)] += attribution.cost.input_tokens
            self._tokens[(("direction", "output"),)] += attribution.cost.output_tokens
            self._seconds_sum += attribution.cost.seconds
            self._seconds_count += 1

    def attributions(self) -> dict[tuple[str, str], int]:
        """(service, agent) -> how often blamed, summed over methods."""
        totals: Counter[tuple[str, str]] = Counter()
        with self._lock:
            for labels, count in self._attributions.items():
                values = dict(labels)
                totals[(values["service"], values["agent"])] += count
        return dict(totals)

    def render(self) -> str:
        """The Prometheus text exposition format, version 0.0.4."""
        lines: list[str] = []

        def counter(name: str, help_text: str, series: Counter[tuple[tuple[str, str], ...]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} counter")
            for labels, value in sorted(series.items()):
                lines.append(f"{name}{_labels(labels)} {value}")

        with self._lock:
            counter(ATTRIBUTIONS_TOTAL, "Failed traces blamed on an agent.", self._attributions)
            counter(TRACES_TOTAL, "Completed traces by outcome.", self._traces)
            counter(FALLBACKS_TOTAL, "Attributions that fell back to the offline method.", self._fallbacks)
            counter(LLM_TOKENS_TOTAL, "LLM tokens spent on attribution.", self._tokens)
            lines.append(f"# HELP {ATTRIBUTION_SECONDS} Time spent attributing failed traces.")
            lines.append(f"# TYPE {ATTRIBUTION_SECONDS} summary")
            lines.append(f"{ATTRIBUTION_SECONDS}_sum {self._seconds_sum}")
            lines.append(f"{ATTRIBUTION_SECONDS}_count {self._seconds_count}")
        return "\n".join(lines) + "\n"
