"""Repeated-culprit alerting end to end with real Prometheus and Alertmanager.

`otel-blame serve` serves its culprit counters at /metrics; real Prometheus scrapes them every
second and evaluates the project's rule file (deploy/prometheus/otel-blame-rules.yml: the same
expressions, only the `for:` hold shortened for a test); real Alertmanager routes the firing alert
to a webhook this test runs on loopback. The processor's own repeated-culprit webhook (config
`alerting:`) must fire exactly once for the same burst. Prometheus and Alertmanager come from the
Debian packages (`make system-packages`); without them this test skips and says so.
"""

from __future__ import annotations

import copy
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_blame.alerting.metrics import ATTRIBUTIONS_TOTAL
from otel_blame.instrumentation import configure, record_message, reset_configuration, set_outcome, task
from tests.support import RecordingOTLPSink

from .harness import (
    ALERTMANAGER_BIN,
    PROMETHEUS_BIN,
    PROMTOOL_BIN,
    REPO,
    Alertmanager,
    BlameServer,
    ProcessGroup,
    Prometheus,
    WebhookRecorder,
    missing_system_binary_reason,
    wait_until,
)

_missing = missing_system_binary_reason(PROMETHEUS_BIN, PROMTOOL_BIN, ALERTMANAGER_BIN)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(_missing is not None, reason=str(_missing)),
]

RULES_FILE = REPO / "deploy" / "prometheus" / "otel-blame-rules.yml"
ALERT_NAME = "RepeatedCulpritAgent"
THRESHOLD = 5  # the processor's repeated_culprit.threshold, and the rule's own `>= 5`
AGENTS = ("triage", "researcher", "writer", "reviewer")


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


def rules_for_a_test(rules_text: str | None = None) -> tuple[str, str]:
    """The deploy rule file with only the `for:` holds set to 0s; returns (text, the alert's expr)."""
    rules = yaml.safe_load(rules_text if rules_text is not None else RULES_FILE.read_text())
    rendered = copy.deepcopy(rules)
    expr = None
    for group in rendered["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
            if rule.get("alert") == ALERT_NAME:
                expr = rule["expr"]
    assert expr is not None, f"{RULES_FILE} has no alert {ALERT_NAME}"
    original = {r.get("alert") or r.get("record"): r["expr"] for g in rules["groups"] for r in g["rules"]}
    assert {
        r.get("alert") or r.get("record"): r["expr"] for g in rendered["groups"] for r in g["rules"]
    } == original
    return yaml.safe_dump(rendered, sort_keys=False), expr


def send_failed_runs(service: str, endpoint: str, count: int) -> None:
    """``count`` failed runs, each wrongly refunding 200 EUR: the same agent is to blame every time."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
    configure(tracer_provider=provider)
    try:
        for index in range(count):
            with task(f"ticket-{index}", input=f"Refund order #{index}?", expected_output="refund 20 EUR"):
                record_message(AGENTS[0], f"Order #{index}: customer asks for a refund of 20 EUR.")
                record_message(AGENTS[1], "Policy lookup: the order total is 200 EUR.")
                record_message(AGENTS[2], "Drafted: we refund 200 EUR.")
                record_message(AGENTS[3], "Looks fine. Final answer: refund 200 EUR.")
                set_outcome(False, final_output="refund 200 EUR", reason="refunded 200 instead of 20")
    finally:
        reset_configuration()
        provider.shutdown()


def test_repeated_culprit_reaches_alertmanager_and_the_processor_webhook(
    group: ProcessGroup, webhook: WebhookRecorder, sink: RecordingOTLPSink, tmp_path: Path
):
    service = f"e2e-alerting-{uuid.uuid4().hex[:8]}"
    blame = BlameServer(
        group,
        "otel-blame",
        downstream=sink.endpoint,
        wal_dir=tmp_path / "wal",
        extra_env={
            "OTEL_BLAME_ALERTING__WEBHOOK__URL": webhook.url("/otel-blame"),
            "OTEL_BLAME_ALERTING__REPEATED_CULPRIT__THRESHOLD": str(THRESHOLD),
            "OTEL_BLAME_ALERTING__REPEATED_CULPRIT__WINDOW_SECONDS": "600",
            "OTEL_BLAME_ALERTING__REPEATED_CULPRIT__COOLDOWN_SECONDS": "1800",
            # every verdict counts, decided or not: this run's verdict sits near the ranker's provisional
            # threshold, and what is tested here is the alert's path (the decided-only default is
            # tested in tests/alerting/test_decided_only.py)
            "OTEL_BLAME_ALERTING__COUNT_UNDECIDED": "true",
        },
    )
    alertmanager = Alertmanager(
        group,
        {
            "route": {
                "receiver": "test-webhook",
                "group_by": ["alertname", "service", "agent"],
                "group_wait": "1s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {"name": "test-webhook", "webhook_configs": [{"url": webhook.url("/alertmanager")}]}
            ],
        },
    )
    rules_text, expr = rules_for_a_test()
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
    checked = subprocess.run(
        [str(PROMTOOL_BIN), "check", "rules", str(group.log_dir / "otel-blame-rules.yml")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, f"promtool rejects the test rules: {checked.stdout}{checked.stderr}"

    def explain() -> str:
        return f"\nwebhook got: {webhook.received()}\n{group.logs()}"

    series = f'{ATTRIBUTIONS_TOTAL}{{service="{service}"}}'
    try:
        wait_until(
            lambda: any(t["health"] == "up" for t in prometheus.targets()),
            timeout=30,
            what="Prometheus scraping otel-blame",
        )
        # the whole burst lands before Prometheus first sees the agent's counter: the rule must
        # count a new series from zero (increase() alone needs two samples and would stay silent)
        send_failed_runs(service, blame.otlp_grpc_endpoint, THRESHOLD)
        first = wait_until(lambda: prometheus.query(series), timeout=30, what=f"{series} in Prometheus")
        agent = first[0]["metric"]["agent"]
        assert agent in AGENTS

        def alertmanager_alerts() -> list[dict]:
            return [
                alert
                for body in webhook.received("/alertmanager")
                for alert in body.get("alerts", [])
                if alert["status"] == "firing" and alert["labels"].get("alertname") == ALERT_NAME
            ]

        fired = wait_until(alertmanager_alerts, timeout=60, what=f"{ALERT_NAME} at the Alertmanager webhook")
    except TimeoutError as error:
        raise AssertionError(f"{error}{explain()}") from None

    # every failed run was blamed on the same agent, and Prometheus counted them all
    total = prometheus.query(f"sum by (service, agent) ({series})")
    assert [(s["metric"]["agent"], float(s["value"][1])) for s in total] == [(agent, float(THRESHOLD))]
    assert {(a["labels"]["service"], a["labels"]["agent"]) for a in fired} == {(service, agent)}
    assert agent in fired[0]["annotations"]["summary"] and service in fired[0]["annotations"]["description"]
    # it is the deploy file's expression that fired (Prometheus puts it in the generator URL)
    generator = urllib.parse.parse_qs(urllib.parse.urlparse(fired[0]["generatorURL"]).query)
    assert ["".join(e.split()) for e in generator["g0.expr"]] == [
        "".join(expr.split())
    ]  # as Prometheus prints it

    # the processor's own notifier: one alert for the burst (threshold reached once, then cooldown)
    try:
        own = wait_until(lambda: webhook.received("/otel-blame"), timeout=30, what="the processor's webhook")
    except TimeoutError as error:
        raise AssertionError(f"{error}{explain()}") from None
    time.sleep(1.0)  # a duplicate would have been posted by now (the notifier posts from a queue at once)
    own = webhook.received("/otel-blame")
    assert len(own) == 1, own
    assert own[0]["kind"] == "otel_blame.repeated_culprit"
    assert (own[0]["service"], own[0]["agent"], own[0]["count"]) == (service, agent, THRESHOLD)
    assert len(set(own[0]["trace_ids"])) == THRESHOLD
