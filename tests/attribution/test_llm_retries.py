"""The LLM client's retries (tenacity): Retry-After is honoured, and the attribution deadline ends them."""

from __future__ import annotations

import json
import logging
import time
from email.utils import formatdate

import httpx
import openai
import pytest

from otel_blame.attribution.base import AttributionError
from otel_blame.attribution.deadline import DeadlineExceeded, attribution_deadline, time_left
from otel_blame.attribution.llm_client import retry_after_seconds
from otel_blame.attribution.registry import create_method
from tests.support import Reply


def _answer() -> str:
    return json.dumps({"agent": "Coder", "step": 2, "reason": "it made it up", "confidence": 0.9})


def _rate_limited(headers: dict[str, str]) -> openai.RateLimitError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(429, headers=headers, request=request)
    return openai.RateLimitError("slow down", response=response, body=None)


def test_retry_after_headers_are_read_in_every_form() -> None:
    assert retry_after_seconds(_rate_limited({"retry-after-ms": "250"})) == 0.25
    assert retry_after_seconds(_rate_limited({"Retry-After": "3"})) == 3.0
    in_a_minute = retry_after_seconds(
        _rate_limited({"Retry-After": formatdate(time.time() + 60, usegmt=True)})
    )
    assert in_a_minute is not None and 50 < in_a_minute <= 61
    assert retry_after_seconds(_rate_limited({"Retry-After": "soon"})) is None
    assert retry_after_seconds(_rate_limited({})) is None
    assert retry_after_seconds(ValueError("no response")) is None


def test_a_429_with_retry_after_is_retried_after_that_wait(llm, five_steps, caplog) -> None:  # noqa: ANN001
    caplog.set_level(logging.INFO, logger="otel_blame.attribution.llm_client")
    replies = [Reply(status=429, content="slow down", headers={"retry-after-ms": "300"}), _answer()]
    with llm(replies, backoff_seconds=0.0) as (server, settings):
        result = create_method("all_at_once", llm=settings).attribute(five_steps)
    assert result.step == 2 and server.calls == 2
    assert "RateLimitError); retry 1 in 0.30s" in caplog.text  # backoff alone would be 0.00s


def test_a_retry_that_would_end_after_the_deadline_is_not_made(llm, five_steps, caplog) -> None:  # noqa: ANN001
    caplog.set_level(logging.INFO, logger="otel_blame.attribution.llm_client")
    replies = [Reply(status=429, content="slow down", headers={"Retry-After": "30"}), _answer()]
    with llm(replies, max_retries=5) as (server, settings):
        with attribution_deadline(time.monotonic() + 2.0):
            with pytest.raises(AttributionError, match="failed after 1 attempt"):
                create_method("all_at_once", llm=settings).attribute(five_steps)
    assert server.calls == 1 and "retry 1" not in caplog.text


def test_no_request_is_made_once_the_deadline_has_passed(llm, five_steps) -> None:  # noqa: ANN001
    with llm([_answer()]) as (server, settings):
        with attribution_deadline(time.monotonic() - 1.0):
            with pytest.raises(DeadlineExceeded):
                create_method("all_at_once", llm=settings).attribute(five_steps)
    assert server.calls == 0


def test_a_nested_deadline_only_tightens() -> None:
    assert time_left() is None
    soon = time.monotonic() + 5
    with attribution_deadline(soon):
        with attribution_deadline(soon + 100):
            left = time_left()
            assert left is not None and left <= 5
        with attribution_deadline(None):
            assert time_left() is not None
    assert time_left() is None
