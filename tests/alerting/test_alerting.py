import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client.parser import text_string_to_metric_families

from otel_blame.alerting import (
    CulpritMetrics,
    RepeatedCulpritDetector,
    RepeatedCulpritRule,
    WebhookNotifier,
    WebhookSettings,
)
from otel_blame.alerting.metrics import BlameSeries
from otel_blame.alerting.repeated import RepeatedCulpritAlert
from otel_blame.attribution.result import Attribution, Cost


def _blame(agent: str, method: str = "heuristic", tokens: int = 0) -> Attribution:
    return Attribution(
        agent=agent,
        step=1,
        confidence=0.5,
        reason="r",
        method=method,
        decided=True,
        cost=Cost(input_tokens=tokens, seconds=0.25),
    )


def test_metrics_render_counts_with_escaped_labels():
    metrics = CulpritMetrics()
    metrics.record_attribution(_blame("Coder"), service="shop")
    metrics.record_attribution(_blame("Coder", method="heuristic(fallback:all_at_once)", tokens=40), "shop")
    metrics.record_attribution(_blame('Web"Surfer\n'), service="shop")
    metrics.record_trace("failure", attributed=True)
    text = metrics.render()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    labels = (("agent", "Coder"), ("method", "heuristic"), ("service", "shop"))
    assert samples[("otel_blame_attributions_total", labels)] == 2
    assert 'agent="Web\\"Surfer\\n"' in text  # escaped in the exposition
    escaped = (("agent", 'Web"Surfer\n'), ("method", "heuristic"), ("service", "shop"))
    assert samples[("otel_blame_attributions_total", escaped)] == 1
    assert samples[("otel_blame_attribution_fallbacks_total", (("method", "heuristic"),))] == 1
    assert samples[("otel_blame_llm_tokens_total", (("direction", "input"),))] == 40
    assert samples[("otel_blame_traces_total", (("attributed", "true"), ("outcome", "failure")))] == 1
    assert samples[("otel_blame_attribution_seconds_count", ())] == 3
    assert metrics.attributions()[("shop", "Coder")] == 2


def test_metrics_bound_agent_cardinality():
    metrics = CulpritMetrics(max_agents=2)
    for name in ["a", "b", "c", "d", "a"]:
        metrics.record_attribution(_blame(name))
    assert metrics.attributions() == {("", "a"): 2, ("", "b"): 1, ("", "other"): 2}


class _Source:
    """A counter source as the blame store is one: read at every scrape, it can be unreachable."""

    def __init__(self) -> None:
        self.series = [BlameSeries("shop", "Coder", "heuristic", 3, 1)]
        self.reads = 0
        self.down = False

    def blame_series(self) -> list[BlameSeries]:
        self.reads += 1
        if self.down:
            raise OSError("connection refused")
        return list(self.series)


def _samples(metrics: CulpritMetrics) -> dict:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render())
        for sample in family.samples
    }


def test_blame_counters_read_their_source_at_scrape_time():
    metrics = CulpritMetrics()
    source = _Source()
    metrics.count_blames_in(source)
    assert source.reads == 0  # registering reads nothing
    coder = (
        "otel_blame_attributions_total",
        (("agent", "Coder"), ("method", "heuristic"), ("service", "shop")),
    )
    assert _samples(metrics)[coder] == 3
    # the source counts blames (the store, as it keeps them): recording one counts only its cost
    metrics.record_attribution(_blame("Coder", tokens=7), service="shop")
    source.series = [BlameSeries("shop", "Coder", "heuristic", 4, 1)]
    samples = _samples(metrics)
    assert samples[coder] == 4
    assert samples[("otel_blame_attribution_fallbacks_total", (("method", "heuristic"),))] == 1
    assert samples[("otel_blame_llm_tokens_total", (("direction", "input"),))] == 7
    # an unreachable source: the last counts are served, never fewer, and the scrape still answers
    source.down = True
    assert _samples(metrics)[coder] == 4
    # detached (the store closed): counted here again, from zero
    metrics.count_blames_in(None)
    assert coder not in _samples(metrics)
    metrics.record_attribution(_blame("Coder"), service="shop")
    assert _samples(metrics)[coder] == 1


def test_detector_fires_once_per_window_and_respects_cooldown():
    now = [1000.0]
    detector = RepeatedCulpritDetector(
        RepeatedCulpritRule(threshold=3, window_seconds=60, cooldown_seconds=300), clock=lambda: now[0]
    )
    fired = []
    for i in range(3):
        now[0] += 10
        fired.append(detector.observe("svc", "Coder", f"t{i}"))
    assert fired[:2] == [None, None]
    assert fired[2] is not None and fired[2].trace_ids == ["t0", "t1", "t2"] and fired[2].count == 3
    now[0] += 10
    assert detector.observe("svc", "Coder", "t3") is None  # cooldown
    assert detector.observe("svc", "Planner", "t4") is None  # other agent counts apart
    now[0] += 400
    assert detector.observe("svc", "Coder", "t5") is None  # old blames left the window
    now[0] += 1
    detector.observe("svc", "Coder", "t6")
    now[0] += 1
    assert detector.observe("svc", "Coder", "t7") is not None


class _Receiver(BaseHTTPRequestHandler):
    bodies: list = []
    statuses: list = []

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 200:
            self.bodies.append((json.loads(body), self.headers.get("Authorization")))
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    _Receiver.bodies, _Receiver.statuses = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, _Receiver
    server.shutdown()
    server.server_close()


def _alert() -> RepeatedCulpritAlert:
    return RepeatedCulpritAlert(
        service="svc", agent="Coder", count=3, window_seconds=60, trace_ids=["t"], fired_at_unix=1.0
    )


def test_webhook_retries_5xx_then_delivers_with_token(receiver):
    server, handler = receiver
    handler.statuses = [503, 500]
    notifier = WebhookNotifier(
        WebhookSettings(
            url=f"http://127.0.0.1:{server.server_port}/hook",
            bearer_token="s3cret",
            initial_backoff_seconds=0.01,
        )
    )
    notifier.notify(_alert())
    notifier.close()
    assert notifier.delivered == 1 and notifier.failed == 0
    ((body, auth),) = handler.bodies
    assert body["kind"] == "otel_blame.repeated_culprit" and body["agent"] == "Coder"
    assert auth == "Bearer s3cret"


def test_webhook_down_never_raises_and_counts_failure():
    notifier = WebhookNotifier(
        WebhookSettings(url="http://127.0.0.1:9/unreachable", max_attempts=2, initial_backoff_seconds=0.01)
    )
    notifier.notify(_alert())
    notifier.close()
    assert notifier.failed == 1 and notifier.delivered == 0


def test_webhook_client_error_is_not_retried(receiver):
    server, handler = receiver
    handler.statuses = [400, 200]
    notifier = WebhookNotifier(
        WebhookSettings(url=f"http://127.0.0.1:{server.server_port}/", initial_backoff_seconds=0.01)
    )
    notifier.notify(_alert())
    notifier.close()
    assert notifier.failed == 1 and handler.bodies == []
