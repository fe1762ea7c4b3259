"""Noticing a failure pattern that is new, or one that suddenly comes much more often, without Prometheus.

The same two alerts as the Prometheus rules in ``deploy/prometheus/otel-blame-rules.yml``:

- *new pattern* (``NewFailurePattern``): a pattern first seen less than ``window_seconds`` (an hour)
  ago that has failed ``threshold`` runs since; once per pattern;
- *surge* (``FailurePatternSurge``): a pattern whose runs in the last ``window_seconds`` reach
  ``factor`` (2) times its hourly rate over the ``baseline_seconds`` (a day) before, with at least
  ``min_count`` runs in the window; then not again for that pattern within ``cooldown_seconds``.
  A pattern is compared with its own last day only once it is that old, and once this detector has
  watched for that long (its counts are this process's, kept in memory: a restart starts them anew).

Only patterns count, not a workflow's undecided group. Memory: per pattern, a few timestamps and one
counter per minute with runs in the baseline and window (sparse).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

HOUR = 3600.0
BUCKET = 60.0  # the surge counts runs per minute


class NewPatternRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: int = Field(default=5, ge=1, description="runs within the pattern's first window that fire")
    window_seconds: float = Field(default=HOUR, gt=0, description="how long a pattern counts as new")


class PatternSurgeRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    factor: float = Field(default=2.0, gt=1, description="the window's rate against the baseline's")
    min_count: int = Field(default=5, ge=1, description="runs in the window, at least")
    window_seconds: float = Field(default=HOUR, gt=0)
    baseline_seconds: float = Field(default=24 * HOUR, gt=0, description="the pattern's own past")
    cooldown_seconds: float = Field(default=6 * HOUR, ge=0)


class NewPatternAlert(BaseModel):
    """A pattern new within its first window has failed ``count`` runs."""

    KIND: ClassVar[str] = "otel_blame.new_failure_pattern"
    model_config = ConfigDict(extra="forbid")

    service: str
    workflow: str
    pattern: str
    title: str
    count: int
    first_seen_unix: float
    window_seconds: float
    trace_ids: list[str]
    fired_at_unix: float

    @property
    def subject(self) -> str:
        return f"new failure pattern {self.pattern} ({self.title})"


class PatternSurgeAlert(BaseModel):
    """A pattern failing ``factor`` times as often as over its own baseline."""

    KIND: ClassVar[str] = "otel_blame.failure_pattern_surge"
    model_config = ConfigDict(extra="forbid")

    service: str
    workflow: str
    pattern: str
    title: str
    count: int = Field(description="runs in the window")
    window_seconds: float
    rate_per_hour: float
    baseline_per_hour: float
    trace_ids: list[str]
    fired_at_unix: float

    @property
    def subject(self) -> str:
        return f"failure pattern {self.pattern} surging ({self.title})"


@dataclass
class _Seen:
    first_seen: float
    recent: deque[tuple[float, str]]  # (when, trace id), the last few
    minutes: dict[int, int] = field(default_factory=dict)  # minute number -> runs
    announced: bool = False
    surged_at: float | None = None


class PatternAlertDetector:
    """Thread-safe. ``observe`` each run of a pattern; it returns the alerts that run fires."""

    def __init__(
        self,
        new: NewPatternRule,
        surge: PatternSurgeRule,
        clock: Callable[[], float] = time.time,
        max_patterns: int = 10_000,
    ) -> None:
        self._new = new
        self._surge = surge
        self._clock = clock
        self._max_patterns = max_patterns
        self._started = clock()
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str, str], _Seen] = {}

    def observe(
        self, service: str, workflow: str, pattern: str, title: str, first_seen: float, trace_id: str
    ) -> list[NewPatternAlert | PatternSurgeAlert]:
        now = self._clock()
        key = (service, workflow, pattern)
        keep = max(self._new.threshold, self._surge.min_count, 10)
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                if len(self._seen) >= self._max_patterns:  # the least recently seen pattern goes
                    oldest = min(self._seen, key=lambda k: self._seen[k].recent[-1][0])
                    del self._seen[oldest]
                seen = self._seen[key] = _Seen(first_seen, deque(maxlen=keep))
            seen.first_seen = min(seen.first_seen, first_seen)
            seen.recent.append((now, trace_id))
            minute = int(now // BUCKET)
            seen.minutes[minute] = seen.minutes.get(minute, 0) + 1
            span = int((self._surge.baseline_seconds + self._surge.window_seconds) // BUCKET) + 1
            if len(seen.minutes) > 1 and min(seen.minutes) < minute - span:
                for old in [m for m in seen.minutes if m < minute - span]:
                    del seen.minutes[old]
            fired: list[NewPatternAlert | PatternSurgeAlert] = []
            announced = self._announce(seen, service, workflow, pattern, title, now)
            if announced is not None:
                fired.append(announced)
            surged = self._surged(seen, service, workflow, pattern, title, now)
            if surged is not None:
                fired.append(surged)
            return fired

    def _announce(
        self, seen: _Seen, service: str, workflow: str, pattern: str, title: str, now: float
    ) -> NewPatternAlert | None:
        rule = self._new
        if seen.announced or now - seen.first_seen > rule.window_seconds:
            return None
        within = [(at, trace) for at, trace in seen.recent if at >= seen.first_seen]
        if len(within) < rule.threshold:
            return None
        seen.announced = True
        return NewPatternAlert(
            service=service,
            workflow=workflow,
            pattern=pattern,
            title=title,
            count=len(within),
            first_seen_unix=seen.first_seen,
            window_seconds=rule.window_seconds,
            trace_ids=[trace for _, trace in within],
            fired_at_unix=now,
        )

    def _surged(
        self, seen: _Seen, service: str, workflow: str, pattern: str, title: str, now: float
    ) -> PatternSurgeAlert | None:
        rule = self._surge
        history = rule.baseline_seconds + rule.window_seconds
        if now - seen.first_seen < history or now - self._started < history:
            return None  # no day of its own to compare with (yet)
        if seen.surged_at is not None and now - seen.surged_at < rule.cooldown_seconds:
            return None
        window = max(1, round(rule.window_seconds / BUCKET))
        minute = int(now // BUCKET)
        start = minute - window  # the window: the last window_seconds; the baseline: before it
        count = sum(n for m, n in seen.minutes.items() if m > start)
        if count < rule.min_count:
            return None
        past = sum(n for m, n in seen.minutes.items() if start - rule.baseline_seconds / BUCKET < m <= start)
        baseline = past * rule.window_seconds / rule.baseline_seconds  # runs per window, on average
        if count < rule.factor * baseline:
            return None
        seen.surged_at = now
        return PatternSurgeAlert(
            service=service,
            workflow=workflow,
            pattern=pattern,
            title=title,
            count=count,
            window_seconds=rule.window_seconds,
            rate_per_hour=count * HOUR / rule.window_seconds,
            baseline_per_hour=baseline * HOUR / rule.window_seconds,
            trace_ids=[trace for _, trace in seen.recent][-rule.min_count :],
            fired_at_unix=now,
        )
