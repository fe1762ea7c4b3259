"""The LLM client every LLM method uses: the OpenAI SDK against any compatible endpoint.

What it adds on top of the SDK, so the methods stay about attribution:

- retries (tenacity) with exponential backoff on 429, 5xx, timeouts, dropped connections and
  malformed bodies, waiting at least what a ``Retry-After`` header asks (up to a minute);
- the attribution deadline (:mod:`.deadline`) when the processor sets one: request timeouts,
  the wait for a concurrency slot and the retries all end by it;
- a per-trace token budget (:class:`LLMSession`), checked before each request;
- JSON answers validated by a pydantic model plus a method-supplied check (agent must exist,
  step in range); one corrective re-ask, then a clear :class:`AttributionError`;
- an optional on-disk response cache keyed by model, messages and sampling parameters;
- a concurrency limit shared by everything that uses the same client.

The API key is a SecretStr and is never logged; logs name the endpoint and model only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from otel_blame.attribution.base import AttributionError
from otel_blame.attribution.deadline import DeadlineExceeded, time_left
from otel_blame.attribution.llm_settings import LLMSettings
from otel_blame.attribution.result import Cost

__all__ = ["LLMClient", "LLMSession", "LLMSettings", "estimate_tokens"]

log = logging.getLogger(__name__)

AnswerT = TypeVar("AnswerT", bound=BaseModel)
Message = dict[str, str]

_FENCED_JSON = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def estimate_tokens(text: str) -> int:
    """A provider-independent token estimate (about four characters a token), for budgets only."""
    return max(1, (len(text) + 3) // 4)


class LLMSession:
    """The spend of one attribution (one trace): calls, tokens, seconds, against a token budget."""

    def __init__(self, token_budget: int) -> None:
        self.token_budget = token_budget
        self.llm_calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_hits = 0
        self._started = time.monotonic()

    @property
    def tokens_used(self) -> int:
        return self.input_tokens + self.output_tokens

    def check_budget(self, planned_input_tokens: int) -> None:
        if self.tokens_used + planned_input_tokens > self.token_budget:
            raise AttributionError(
                f"token budget exhausted: {self.tokens_used} tokens used, the next request needs about "
                f"{planned_input_tokens}, budget {self.token_budget} per trace"
            )

    def record(self, input_tokens: int, output_tokens: int) -> None:
        self.llm_calls += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens

    def cost(self) -> Cost:
        return Cost(
            llm_calls=self.llm_calls,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            seconds=round(time.monotonic() - self._started, 4),
        )


class _ResponseCache:
    """Answers on disk, one JSON file per request hash; unreadable entries are ignored."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> dict | None:
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) and isinstance(entry.get("content"), str) else None

    def put(self, key: str, entry: dict) -> None:
        path = self._path(key)
        temporary = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            temporary.write_text(json.dumps(entry), encoding="utf-8")
            os.replace(temporary, path)
        except OSError as error:
            log.warning("could not write LLM cache entry %s: %s", path.name, error)


def _retryable(error: Exception) -> bool:
    import openai  # here, not at the top: the offline methods never load the OpenAI SDK

    if isinstance(error, ValueError):  # a malformed body, e.g. from a proxy in between
        return True
    if isinstance(error, openai.APITimeoutError | openai.APIConnectionError | openai.RateLimitError):
        return True
    return isinstance(error, openai.APIStatusError) and error.status_code >= 500


MAX_RETRY_AFTER_SECONDS = 60.0  # a longer Retry-After is not waited for in full


def retry_after_seconds(error: BaseException | None) -> float | None:
    """The wait an HTTP error's ``retry-after-ms`` / ``Retry-After`` header asks for, if any."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        if (millis := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(millis) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


class BackoffOrRetryAfter(wait_base):
    """``backoff * 2**(attempt-1)`` seconds, or the server's ``Retry-After`` when that is longer."""

    def __init__(self, backoff_seconds: float) -> None:
        self.backoff_seconds = backoff_seconds

    def __call__(self, retry_state: RetryCallState) -> float:
        backoff = self.backoff_seconds * 2 ** (retry_state.attempt_number - 1)
        error = retry_state.outcome.exception() if retry_state.outcome else None
        asked = retry_after_seconds(error)
        return backoff if asked is None else max(backoff, min(asked, MAX_RETRY_AFTER_SECONDS))


class StopAtDeadline(stop_base):
    """Stop when the wait before the next attempt would end after the attribution deadline."""

    def __call__(self, retry_state: RetryCallState) -> bool:
        left = time_left()
        return left is not None and left <= (retry_state.upcoming_sleep or 0.0)


def _log_retry(retry_state: RetryCallState) -> None:
    error = retry_state.outcome.exception() if retry_state.outcome else None
    log.info(
        "LLM request failed (%s); retry %d in %.2fs",
        type(error).__name__,
        retry_state.attempt_number,
        retry_state.upcoming_sleep,
    )


def extract_json_object(text: str) -> dict:
    """The JSON object in a reply: bare, fenced in ```json, or the outermost {...} in prose."""
    text = text.strip()
    candidates = [text]
    fenced = _FENCED_JSON.search(text)
    if fenced:
        candidates.append(fenced.group(1))
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise ValueError("the reply holds no JSON object")


class LLMClient:
    """One endpoint + model; thread-safe; share one instance between methods and traces."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        api_key = settings.api_key.get_secret_value() if settings.api_key else None
        if not settings.configured:
            raise AttributionError(
                "no LLM configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for a self-hosted endpoint), "
                "or pass --base-url / --model, or use the offline method 'heuristic'"
            )
        import openai  # here, not at the top: the offline methods never load the OpenAI SDK

        self._client = openai.OpenAI(
            base_url=settings.base_url,
            api_key=api_key or "not-needed",  # self-hosted endpoints often need no key
            timeout=settings.timeout,
            max_retries=0,  # retries are ours, so they are counted and logged
        )
        self._slots = threading.BoundedSemaphore(settings.concurrency)
        self._cache = _ResponseCache(settings.cache_dir) if settings.cache_dir else None

    def _without_secret(self, text: str) -> str:
        secret = self.settings.api_key.get_secret_value() if self.settings.api_key else ""
        return text.replace(secret, "***") if len(secret) >= 4 else text

    @property
    def model(self) -> str:
        return self.settings.model

    def session(self) -> LLMSession:
        return LLMSession(self.settings.token_budget)

    def _cache_key(self, messages: list[Message], temperature: float, sample: int) -> str:
        material = json.dumps(
            {
                "base_url": self.settings.base_url,
                "model": self.settings.model,
                "temperature": temperature,
                "sample": sample,
                "max_tokens": self.settings.max_output_tokens,
                "messages": messages,
            },
            sort_keys=True,
        )
        return hashlib.sha256(material.encode()).hexdigest()

    def complete(
        self,
        session: LLMSession,
        messages: list[Message],
        *,
        temperature: float | None = None,
        sample: int = 0,
    ) -> str:
        """One chat completion's text, with budget, cache, concurrency limit and retries.

        ``temperature`` overrides the settings' for sampling methods; ``sample`` numbers repeated
        samples of the same request so that each gets its own cache entry."""
        temperature = self.settings.temperature if temperature is None else temperature
        planned = sum(estimate_tokens(message["content"]) for message in messages)
        session.check_budget(planned)
        key = self._cache_key(messages, temperature, sample) if self._cache else None
        if self._cache and key:
            cached = self._cache.get(key)
            if cached is not None:
                session.cache_hits += 1
                return cached["content"]
        retrying = Retrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(self.settings.max_retries + 1) | StopAtDeadline(),
            wait=BackoffOrRetryAfter(self.settings.backoff_seconds),
            before_sleep=_log_retry,
            reraise=True,
        )
        import openai

        try:
            response = retrying(self._create, messages, temperature)
        except (openai.APIError, ValueError) as error:  # ValueError: a body that is not JSON
            attempts = retrying.statistics.get("attempt_number", 1)
            left = time_left()
            what = (
                f"LLM request to {self.settings.base_url or 'OpenAI'} (model {self.settings.model}) "
                f"failed after {attempts} attempt(s): {type(error).__name__}: "
                f"{one_line(self._without_secret(str(error)))}"
            )
            if left is not None and left <= 0 and isinstance(error, openai.APITimeoutError):
                raise DeadlineExceeded(f"attribution deadline reached; {what}") from None
            raise AttributionError(what) from None
        choices = getattr(response, "choices", None)
        content = choices[0].message.content if choices else None
        usage = getattr(response, "usage", None)
        input_tokens = usage.prompt_tokens if usage else planned
        output_tokens = usage.completion_tokens if usage else estimate_tokens(content or "")
        session.record(input_tokens, output_tokens)
        if content is None:
            raise AttributionError(f"the LLM (model {self.settings.model}) returned no text")
        if self._cache and key:
            self._cache.put(key, {"content": content})
        return content

    def _create(self, messages: list[Message], temperature: float) -> Any:
        """One request, within the attribution deadline when there is one."""
        left = time_left()
        if left is not None and left <= 0:
            raise DeadlineExceeded("attribution deadline reached before an LLM request")
        if not self._slots.acquire(timeout=left):
            raise DeadlineExceeded(
                f"attribution deadline reached waiting for one of the {self.settings.concurrency} LLM slots"
            )
        try:
            return self._client.chat.completions.create(
                model=self.settings.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=temperature,
                max_tokens=self.settings.max_output_tokens,
                timeout=self.settings.timeout if left is None else min(self.settings.timeout, left),
            )
        finally:
            self._slots.release()

    def ask_json(
        self,
        session: LLMSession,
        messages: list[Message],
        answer_model: type[AnswerT],
        check: Callable[[AnswerT], str | None] | None = None,
        *,
        temperature: float | None = None,
        sample: int = 0,
    ) -> AnswerT:
        """A validated answer; one corrective re-ask when the first is malformed or out of range."""
        conversation = list(messages)
        problem = ""
        for attempt in range(2):
            reply = self.complete(session, conversation, temperature=temperature, sample=sample)
            try:
                answer = answer_model.model_validate(extract_json_object(reply))
                problem = (check(answer) if check else None) or ""
            except (ValueError, ValidationError) as error:
                problem = one_line(str(error), 400)
            if not problem:
                return answer
            if attempt == 0:
                log.info("LLM answer rejected (%s); asking once more", problem)
                conversation += [
                    {"role": "assistant", "content": one_line(reply, 2000)},
                    {
                        "role": "user",
                        "content": f"Your answer was not usable: {problem}\nReply again with only one JSON "
                        f"object matching this schema: {json.dumps(answer_model.model_json_schema())}",
                    },
                ]
        raise AttributionError(f"the LLM gave no usable answer after one corrective re-ask: {problem}")


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (runs of white space one space), cut to ``limit`` characters with ``...``."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
