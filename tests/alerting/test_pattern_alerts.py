"""The two pattern alerts without Prometheus: a new pattern seen N times in its first hour, and a pattern
whose rate doubles against its own last day; their webhook; the bounded pattern counter."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client.parser import text_string_to_metric_families

from otel_blame.alerting import WebhookNotifier, WebhookSettings
from otel_blame.alerting.metrics import CulpritMetrics
from otel_blame.alerting.patterns import (
    HOUR,
    NewPatternAlert,
    NewPatternRule,
    PatternAlertDetector,
    PatternSurgeAlert,
    PatternSurgeRule,
)

DAY = 24 * HOUR


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _detector(clock: Clock, **surge: float) -> PatternAlertDetector:
    return PatternAlertDetector(NewPatternRule(threshold=3), PatternSurgeRule(min_count=4, **surge), clock)


def _observe(detector: PatternAlertDetector, first_seen: float, trace: str, pattern: str = "p1"):
    return detector.observe("shop", "refund", pattern, "coder · agent · answer", first_seen, trace)


def test_a_new_pattern_alerts_once_when_seen_threshold_times_in_its_first_hour() -> None:
    clock = Clock(10 * DAY)
    detector = _detector(clock)
    first = clock.now
    assert _observe(detector, first, "t1") == []
    clock.now += 600
    assert _observe(detector, first, "t2") == []
    clock.now += 600
    (alert,) = _observe(detector, first, "t3")
    assert isinstance(alert, NewPatternAlert)
    assert (alert.pattern, alert.count, alert.trace_ids, alert.first_seen_unix) == (
        "p1",
        3,
        ["t1", "t2", "t3"],
        first,
    )
    clock.now += 60
    assert _observe(detector, first, "t4") == []  # once per pattern


def test_an_old_pattern_or_a_slow_new_one_does_not_alert_as_new() -> None:
    clock = Clock(10 * DAY)
    detector = _detector(clock)
    old = clock.now - 2 * HOUR  # first seen (by any replica) two hours ago
    for trace in range(3):
        assert _observe(detector, old, f"t{trace}") == []
    slow = clock.now
    for trace in range(2):
        assert _observe(detector, slow, f"s{trace}", "p2") == []
    clock.now += HOUR + 1  # its third run comes after its first hour
    assert _observe(detector, slow, "s2", "p2") == []


def test_a_pattern_whose_rate_doubles_against_its_last_day_surges_once() -> None:
    start = 10 * DAY
    clock = Clock(start)
    detector = _detector(clock)
    first = start - 5 * DAY
    # a day and an hour of one run every two hours: its own baseline (0.5 an hour)
    for hour in range(0, 25, 2):
        clock.now = start + hour * HOUR
        assert _observe(detector, first, f"b{hour}") == []
    clock.now = start + 26 * HOUR
    fired = []
    for minute in range(6):  # then four and more runs within the hour: far past twice the baseline
        clock.now += 60
        fired += _observe(detector, first, f"x{minute}")
    (alert,) = fired
    assert isinstance(alert, PatternSurgeAlert)
    assert alert.count == 4 and alert.baseline_per_hour < alert.rate_per_hour / 2
    assert alert.trace_ids == ["x0", "x1", "x2", "x3"]


def test_no_surge_without_a_day_of_history_or_below_twice_the_baseline() -> None:
    start = 10 * DAY
    clock = Clock(start)
    detector = _detector(clock)
    for minute in range(6):  # a day-old pattern, but this detector has watched for minutes only
        clock.now = start + 60 * minute
        assert _observe(detector, start - 5 * DAY, f"t{minute}") == []
    steady = _detector(clock := Clock(start))
    first = start - 5 * DAY
    for hour in range(26):  # four runs every hour for a day: the last hour is no surge
        for quarter in range(4):
            clock.now = start + hour * HOUR + quarter * 900
            assert _observe(steady, first, f"h{hour}q{quarter}") == []


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[ThreadingHTTPServer]:
    _Receiver.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_webhook_posts_pattern_alerts_with_their_kind(receiver: ThreadingHTTPServer) -> None:
    notifier = WebhookNotifier(WebhookSettings(url=f"http://127.0.0.1:{receiver.server_port}/hook"))
    clock = Clock(10 * DAY)
    detector = _detector(clock)
    for trace in range(3):
        for alert in _observe(detector, clock.now, f"t{trace}"):
            notifier.notify(alert)
    notifier.close()
    (body,) = _Receiver.bodies
    assert body["kind"] == "otel_blame.new_failure_pattern"
    assert (body["service"], body["workflow"], body["pattern"], body["count"]) == ("shop", "refund", "p1", 3)


def _pattern_samples(metrics: CulpritMetrics) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render()):
        for sample in family.samples:
            if sample.name.startswith("otel_blame_failure_pattern"):
                out[(sample.name, sample.labels["pattern"])] = sample.value
    return out


def test_the_pattern_counter_is_bounded_and_says_each_patterns_first_sighting() -> None:
    metrics = CulpritMetrics(max_patterns=2)
    metrics.record_pattern("shop", "refund", "p1", 100.0)
    metrics.record_pattern("shop", "refund", "p1", 90.0)  # another replica saw it first: the earliest
    metrics.record_pattern("shop", "refund", "p2", 200.0)
    metrics.record_pattern("shop", "refund", "p3", 300.0)  # past the bound
    metrics.record_pattern("shop", "refund", "p4", 400.0)
    assert _pattern_samples(metrics) == {
        ("otel_blame_failure_patterns_total", "p1"): 2,
        ("otel_blame_failure_patterns_total", "p2"): 1,
        ("otel_blame_failure_patterns_total", "other"): 2,
        ("otel_blame_failure_pattern_first_seen_seconds", "p1"): 90.0,
        ("otel_blame_failure_pattern_first_seen_seconds", "p2"): 200.0,
    }
