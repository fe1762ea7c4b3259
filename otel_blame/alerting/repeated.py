"""Noticing that the same agent keeps being blamed, before anyone reads a dashboard.

A sliding window per (service, agent): when an agent is blamed ``threshold`` times within
``window_seconds`` an alert fires once, and not again for that agent until ``cooldown_seconds``
have passed, so a persistent fault produces one notification, not one per failed trace.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field


class RepeatedCulpritRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: int = Field(default=5, ge=1, description="blames within the window that fire an alert")
    window_seconds: float = Field(default=600.0, gt=0)
    cooldown_seconds: float = Field(default=1800.0, ge=0)


class RepeatedCulpritAlert(BaseModel):
    """What a notification says: who, where, how often, and example traces to open."""

    KIND: ClassVar[str] = "otel_blame.repeated_culprit"
    model_config = ConfigDict(extra="forbid")

    service: str
    agent: str
    count: int
    window_seconds: float
    trace_ids: list[str]
    fired_at_unix: float


class RepeatedCulpritDetector:
    """Thread-safe; memory is bounded by ``threshold`` timestamps per agent seen."""

    def __init__(self, rule: RepeatedCulpritRule, clock: Callable[[], float] = time.time) -> None:
        self._rule = rule
        self._clock = clock
        self._lock = threading.Lock()
        self._recent: dict[tuple[str, str], deque[tuple[float, str]]] = {}
        self._last_fired: dict[tuple[str, str], float] = {}

    def observe(self, service: str, agent: str, trace_id: str) -> RepeatedCulpritAlert | None:
        """Record one blame; return an alert when this blame crosses the threshold."""
        now = self._clock()
        key = (service, agent)
        with self._lock:
            recent = self._recent.setdefault(key, deque(maxlen=self._rule.threshold))
            recent.append((now, trace_id))
            while recent and now - recent[0][0] > self._rule.window_seconds:
                recent.popleft()
            if len(recent) < self._rule.threshold:
                return None
            last = self._last_fired.get(key)
            if last is not None and now - last < self._rule.cooldown_seconds:
                return None
            self._last_fired[key] = now
            return RepeatedCulpritAlert(
                service=service,
                agent=agent,
                count=len(recent),
                window_seconds=self._rule.window_seconds,
                trace_ids=[trace for _, trace in recent],
                fired_at_unix=now,
            )
