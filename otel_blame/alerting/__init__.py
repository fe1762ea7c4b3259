"""Alerting on repeated culprits: Prometheus counters, a sliding-window detector, webhooks."""

from otel_blame.alerting.metrics import CulpritMetrics
from otel_blame.alerting.repeated import RepeatedCulpritAlert, RepeatedCulpritDetector, RepeatedCulpritRule
from otel_blame.alerting.webhook import WebhookNotifier, WebhookSettings

__all__ = [
    "CulpritMetrics",
    "RepeatedCulpritAlert",
    "RepeatedCulpritDetector",
    "RepeatedCulpritRule",
    "WebhookNotifier",
    "WebhookSettings",
]
