"""Failure-pattern alerts end to end with real Prometheus and Alertmanager.

`otel-blame serve` counts failed runs per pattern on /metrics (with each pattern's first sighting);
real Prometheus scrapes it every second and evaluates the project's rule file
(deploy/prometheus/otel-blame-rules.yml, only the `for:` holds shortened); real Alertmanager routes the
firing alert to a webhook on loopback. The processor's own webhook (config `alerting:`) must send the
new-pattern alert once for the same burst.

- A new pattern: five failed runs of one cause (a search tool's HTTP API failing) in a minute fire
  NewFailurePattern, and not FailurePatternSurge.
- A surge: the same cause with a day of history, one run every two hours: its pattern first seen two
  days ago in the pattern book (the blame store's, as `serve` keeps it), its day in Prometheus' TSDB
  (written with `promtool tsdb create-blocks-from openmetrics`, as a backfill is done). Six runs in a
  few seconds fire FailurePatternSurge, and not NewFailurePattern.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.attribution.registry import create_method
from otel_blame.attribution.systemic import describe_failure
from otel_blame.conventions import attributes_to_dict, build_trajectory
from otel_blame.conventions.otlp import sdk_spans_to_proto
from otel_blame.patterns import cause_of
from otel_blame.store import StoreConfig, open_store
from otel_blame.store.config import DEFAULT_FILE_NAME
from otel_blame.store.patterns import StorePatternBook
from tests.processor.spans import failing_search_run
from tests.support import RecordingOTLPSink
from tests.ui.browser import chromium, screenshot

from .harness import (
    ALERTMANAGER_BIN,
    PROMETHEUS_BIN,
    PROMTOOL_BIN,
    Alertmanager,
    BlameServer,
    ProcessGroup,
    Prometheus,
    WebhookRecorder,
    missing_system_binary_reason,
    wait_until,
)
from .test_alerting_e2e import rules_for_a_test

_missing = missing_system_binary_reason(PROMETHEUS_BIN, PROMTOOL_BIN, ALERTMANAGER_BIN)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(_missing is not None, reason=str(_missing)),
]

NEW, SURGE = "NewFailurePattern", "FailurePatternSurge"
SERVICE, WORKFLOW = "research-app", "population"  # what failing_search_run records
DAY = 86400.0


@pytest.fixture
def webhook() -> Iterator[WebhookRecorder]:
    recorder = WebhookRecorder()
    try:
        yield recorder
    finally:
        recorder.close()


@pytest.fixture
def sink() -> Iterator[RecordingOTLPSink]:
    recorder = RecordingOTLPSink().start()
    try:
        yield recorder
    finally:
        recorder.stop()


def the_pattern() -> tuple[str, object]:
    """The id the processor gives a failing-search run's cause, and that cause (as it computes them)."""
    trajectory = build_trajectory(sdk_spans_to_proto(failing_search_run(503))).trajectory
    verdict = describe_failure(trajectory, create_method("heuristic").attribute(trajectory))
    cause = cause_of(SERVICE, WORKFLOW, trajectory, verdict)
    return cause.candidate_id(), cause


def send_failed_runs(endpoint: str, count: int) -> None:
    for _ in range(count):
        exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
        try:
            assert exporter.export(failing_search_run(503)) == SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()


def stack(
    group: ProcessGroup, webhook: WebhookRecorder, sink: RecordingOTLPSink, wal: Path, history: str = ""
):  # noqa: ANN201
    """otel-blame serve, Alertmanager and Prometheus (``history``: OpenMetrics text backfilled first)."""
    blame = BlameServer(
        group,
        "otel-blame",
        downstream=sink.endpoint,
        wal_dir=wal,
        extra_env={
            "OTEL_BLAME_ALERTING__WEBHOOK__URL": webhook.url("/otel-blame"),
            "OTEL_BLAME_ALERTING__NEW_PATTERN__THRESHOLD": "5",
        },
    )
    alertmanager = Alertmanager(
        group,
        {
            "route": {
                "receiver": "test-webhook",
                "group_by": ["alertname", "pattern"],
                "group_wait": "1s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {"name": "test-webhook", "webhook_configs": [{"url": webhook.url("/alertmanager")}]}
            ],
        },
    )
    if history:
        data = group.log_dir / "prometheus-data"
        data.mkdir(parents=True, exist_ok=True)
        source = group.log_dir / "history.om"
        source.write_text(history)
        made = subprocess.run(
            [str(PROMTOOL_BIN), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert made.returncode == 0, f"promtool could not backfill: {made.stdout}{made.stderr}"
    rules_text, _ = rules_for_a_test()
    prometheus = Prometheus(
        group,
        {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(group.log_dir / "otel-blame-rules.yml")],
            "alerting": {
                "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager.port}"]}]}]
            },
            "scrape_configs": [
                {
                    "job_name": "otel-blame",
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": [f"127.0.0.1:{blame.http_port}"]}],
                }
            ],
        },
        rule_files={"otel-blame-rules.yml": rules_text},
    )
    wait_until(
        lambda: any(t["health"] == "up" for t in prometheus.targets()),
        timeout=30,
        what="Prometheus scraping otel-blame",
    )
    return blame, prometheus


def firing(webhook: WebhookRecorder, name: str) -> list[dict]:
    return [
        alert
        for body in webhook.received("/alertmanager")
        for alert in body.get("alerts", [])
        if alert["status"] == "firing" and alert["labels"].get("alertname") == name
    ]


def test_a_new_pattern_reaches_alertmanager_and_the_processor_webhook(
    group: ProcessGroup, webhook: WebhookRecorder, sink: RecordingOTLPSink, tmp_path: Path
):
    pattern, _ = the_pattern()
    blame, prometheus = stack(group, webhook, sink, tmp_path / "wal")
    send_failed_runs(blame.otlp_grpc_endpoint, 5)
    try:
        (fired,) = wait_until(lambda: firing(webhook, NEW), timeout=90, what=f"{NEW} at Alertmanager")
    except TimeoutError as error:
        raise AssertionError(f"{error}\nwebhook got: {webhook.received()}\n{group.logs()}") from None
    assert (fired["labels"]["pattern"], fired["labels"]["workflow"]) == (pattern, WORKFLOW)
    assert pattern in fired["annotations"]["summary"]
    # the id the alert names is the one on the runs' spans (blame.pattern, root and culprit)
    on_spans = {attributes_to_dict(r.span.attributes).get(sc.BLAME_PATTERN) for r in sink.spans()} - {None}
    assert on_spans == {pattern}
    total = prometheus.query(f'sum(otel_blame_failure_patterns_total{{pattern="{pattern}"}})')
    assert float(total[0]["value"][1]) == 5
    assert not firing(webhook, SURGE) and not [
        a for a in prometheus.alerts() if a["labels"]["alertname"] == SURGE
    ]
    # the processor's own webhook: one new-pattern alert for the burst
    own = wait_until(
        lambda: [b for b in webhook.received("/otel-blame") if b["kind"] == "otel_blame.new_failure_pattern"],
        timeout=30,
        what="the processor's new-pattern webhook",
    )
    time.sleep(1.0)  # a second one would have been posted by now
    own = [b for b in webhook.received("/otel-blame") if b["kind"] == "otel_blame.new_failure_pattern"]
    assert len(own) == 1
    assert (own[0]["pattern"], own[0]["count"], own[0]["workflow"]) == (pattern, 5, WORKFLOW)
    assert len(set(own[0]["trace_ids"])) == 5
    show_the_alert(prometheus, pattern)


def show_the_alert(prometheus: Prometheus, pattern: str) -> None:
    """Prometheus' own alerts page (the classic one the Debian package ships) in a real Chromium, the
    firing alert unfolded with its annotations: the docs' screenshot."""
    from selenium.webdriver.common.by import By

    def body() -> str:
        return driver.find_element(By.TAG_NAME, "body").text

    with chromium(width=1280, height=900) as driver:
        driver.get(f"{prometheus.base_url}/classic/alerts")
        try:
            wait_until(lambda: NEW in body(), timeout=30, what="the alerts page")
        except TimeoutError as error:
            raise AssertionError(f"{error}: {body()[:2000]}") from None
        driver.find_elements(By.XPATH, f"//*[contains(text(), '{NEW}')]")[0].click()
        for toggle in driver.find_elements(By.XPATH, "//*[contains(text(), 'Show annotations')]")[:1]:
            toggle.click()
        wait_until(lambda: pattern in body(), timeout=30, what="the alert's labels")
        screenshot(driver, "alert-new-pattern.png")


def history_text(pattern: str, now: float) -> str:
    """A day and more of the pattern's counter on another replica: one failed run every two hours,
    sampled every minute, ending ten minutes ago (OpenMetrics, as promtool backfills it)."""
    labels = (
        f'job="otel-blame",instance="replica-gone:4318",service="{SERVICE}",workflow="{WORKFLOW}",'
        f'pattern="{pattern}"'
    )
    lines = ["# TYPE otel_blame_failure_patterns counter"]
    start, end = now - 27 * 3600, now - 600
    at = start
    while at <= end:
        runs = int((at - start) // 7200) + 1
        lines.append(f"otel_blame_failure_patterns_total{{{labels}}} {runs} {at:.3f}")
        at += 60
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def test_a_pattern_at_twice_its_daily_rate_fires_the_surge_alert(
    group: ProcessGroup, webhook: WebhookRecorder, sink: RecordingOTLPSink, tmp_path: Path
):
    pattern, cause = the_pattern()
    now = time.time()
    wal = tmp_path / "wal"
    store = open_store(StoreConfig(path=wal / DEFAULT_FILE_NAME))  # the store `serve` opens there
    known = StorePatternBook(store.engine, similarity=90, max_per_signature=100).assign(cause, now - 2 * DAY)
    store.close()
    assert known.id == pattern
    blame, prometheus = stack(group, webhook, sink, wal, history=history_text(pattern, now))
    send_failed_runs(blame.otlp_grpc_endpoint, 6)
    try:
        (fired,) = wait_until(lambda: firing(webhook, SURGE), timeout=90, what=f"{SURGE} at Alertmanager")
    except TimeoutError as error:
        parts = {
            expr: prometheus.query(expr)
            for expr in (
                f'otel_blame:failure_patterns:increase1h{{pattern="{pattern}"}}',
                f'sum(rate(otel_blame_failure_patterns_total{{pattern="{pattern}"}}[1h]))',
                f'sum(rate(otel_blame_failure_patterns_total{{pattern="{pattern}"}}[1d] offset 1h))',
                f'time() - min(otel_blame_failure_pattern_first_seen_seconds{{pattern="{pattern}"}})',
            )
        }
        raise AssertionError(
            f"{error}\nthe rule's parts: {parts}\nwebhook got: {webhook.received()}"
        ) from None
    assert (fired["labels"]["pattern"], fired["labels"]["service"]) == (pattern, SERVICE)
    first_seen = prometheus.query(f'otel_blame_failure_pattern_first_seen_seconds{{pattern="{pattern}"}}')
    assert float(first_seen[0]["value"][1]) == pytest.approx(now - 2 * DAY, abs=1)
    assert not firing(webhook, NEW)  # two days old: not new
    assert not [b for b in webhook.received("/otel-blame") if b["kind"] == "otel_blame.new_failure_pattern"]
