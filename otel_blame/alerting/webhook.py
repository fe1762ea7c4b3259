"""Delivering alerts (a repeated culprit, a new or surging failure pattern) to a webhook without ever
blocking the processor.

Alerts go into a bounded queue and a background thread posts them as JSON, retrying (tenacity)
with exponential backoff on connection errors, 408, 429 and 5xx; when the queue is full the
alert is counted as dropped and logged, since a notification must never hold up span delivery.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import urllib.error
import urllib.request

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential

from otel_blame.alerting.patterns import NewPatternAlert, PatternSurgeAlert
from otel_blame.alerting.repeated import RepeatedCulpritAlert

Alert = RepeatedCulpritAlert | NewPatternAlert | PatternSurgeAlert

log = logging.getLogger(__name__)


class _RetryableFailure(Exception):
    """A delivery attempt that may succeed later (connection error, 408, 429, 5xx)."""


class WebhookSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    bearer_token: SecretStr | None = None
    timeout_seconds: float = Field(default=5.0, gt=0)
    max_attempts: int = Field(default=5, ge=1)
    initial_backoff_seconds: float = Field(default=0.5, ge=0)
    queue_size: int = Field(default=1000, ge=1)


class WebhookNotifier:
    """``notify(alert)`` returns at once; ``close()`` drains what is queued, within a timeout."""

    def __init__(self, settings: WebhookSettings) -> None:
        self._settings = settings
        self._queue: queue.Queue[Alert | None] = queue.Queue(settings.queue_size)
        self.delivered = 0
        self.failed = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="otel-blame-webhook", daemon=True)
        self._thread.start()

    def notify(self, alert: Alert) -> None:
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            self.dropped += 1
            log.warning("webhook queue full; alert (%s) not sent", _subject(alert))

    def close(self, timeout: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            alert = self._queue.get()
            if alert is None:
                return
            if self._post(alert):
                self.delivered += 1
            else:
                self.failed += 1

    def _post(self, alert: Alert) -> bool:
        body = json.dumps({"kind": alert.KIND, **alert.model_dump()}).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "otel-blame"}
        if self._settings.bearer_token is not None:
            headers["Authorization"] = f"Bearer {self._settings.bearer_token.get_secret_value()}"
        attempts = self._settings.max_attempts
        backoff = self._settings.initial_backoff_seconds

        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            log.info("webhook attempt %d/%d failed (%s)", state.attempt_number, attempts, error)

        retrying = Retrying(
            retry=retry_if_exception_type(_RetryableFailure),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=backoff, exp_base=2, min=backoff, max=backoff * 2**attempts),
            before_sleep=log_retry,
        )
        try:
            return retrying(self._post_once, body, headers)
        except RetryError as error:
            log.warning(
                "webhook alert (%s) not delivered after %d attempts (%s)",
                _subject(alert),
                attempts,
                error.last_attempt.exception(),
            )
            return False

    def _post_once(self, body: bytes, headers: dict[str, str]) -> bool:
        """True when delivered, False when refused for good; raises what is worth retrying."""
        request = urllib.request.Request(self._settings.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._settings.timeout_seconds) as response:
                if 200 <= response.status < 300:
                    return True
                raise _RetryableFailure(f"HTTP {response.status}")
        except urllib.error.HTTPError as error:
            if 400 <= error.code < 500 and error.code not in (408, 429):
                log.warning("webhook refused alert (HTTP %s); not retrying", error.code)
                return False
            raise _RetryableFailure(f"HTTP {error.code}") from None
        except (urllib.error.URLError, OSError) as error:
            raise _RetryableFailure(type(error).__name__) from None


def _subject(alert: Alert) -> str:
    return alert.subject if not isinstance(alert, RepeatedCulpritAlert) else f"agent {alert.agent!r}"
