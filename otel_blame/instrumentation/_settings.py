"""What the instrumentation captures and how: the content switch, the per-message cap, the redactor,
and which version of the GenAI conventions the spans follow.

Read from the environment when a task starts (so ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``,
``OTEL_BLAME_MAX_CONTENT_BYTES`` and ``OTEL_SEMCONV_STABILITY_OPT_IN`` work without code), overridable
in code with :func:`configure`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace

from opentelemetry import trace

from otel_blame import __version__, semconv
from otel_blame.redaction import DEFAULT_REDACTOR, Redactor

logger = logging.getLogger(__name__)

DEFAULT_MAX_CONTENT_BYTES = 64 * 1024
MIN_MAX_CONTENT_BYTES = 256
_CAPTURE_OFF_VALUES = frozenset({"no_content", "false", "0", "off", "none", "no"})
_UNSET = object()


@dataclass(frozen=True)
class CaptureSettings:
    """How message content is captured; one frozen instance is used for a whole task."""

    capture_content: bool = True
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES
    redactor: Redactor | None = DEFAULT_REDACTOR
    # the latest GenAI conventions (semantic-conventions-genai) instead of the shape otel-blame has
    # always written; docs/semconv.md, "Two shapes of the conventions"
    latest_genai_conventions: bool = False


def capture_from_env() -> bool:
    """Content is on unless the GenAI switch says ``NO_CONTENT`` (or false/0/off)."""
    value = os.environ.get(semconv.ENV_CAPTURE_MESSAGE_CONTENT, "").strip().lower()
    return value not in _CAPTURE_OFF_VALUES


def max_bytes_from_env() -> int:
    raw = os.environ.get(semconv.ENV_MAX_CONTENT_BYTES, "").strip()
    if not raw:
        return DEFAULT_MAX_CONTENT_BYTES
    try:
        value = int(raw)
    except ValueError:
        logger.warning("otel-blame: ignoring %s=%r (not an integer)", semconv.ENV_MAX_CONTENT_BYTES, raw)
        return DEFAULT_MAX_CONTENT_BYTES
    return max(value, MIN_MAX_CONTENT_BYTES)


def latest_genai_conventions_from_env() -> bool:
    """Whether ``OTEL_SEMCONV_STABILITY_OPT_IN`` lists ``gen_ai_latest_experimental``, read by the same
    helper the contrib GenAI instrumentations use (opentelemetry-instrumentation's ``_semconv``), so
    every instrumentation in the process agrees; like theirs, it is read once per process. An
    opentelemetry-instrumentation too old to know the GenAI signal gets the same reading by hand."""
    try:
        from opentelemetry.instrumentation._semconv import (
            _OpenTelemetrySemanticConventionStability as Stability,
        )
        from opentelemetry.instrumentation._semconv import _OpenTelemetryStabilitySignalType as Signal
        from opentelemetry.instrumentation._semconv import _StabilityMode as Mode

        signal, latest = Signal.GEN_AI, Mode.GEN_AI_LATEST_EXPERIMENTAL
    except (ImportError, AttributeError):
        listed = os.environ.get(semconv.ENV_SEMCONV_STABILITY_OPT_IN, "")
        return semconv.GEN_AI_LATEST_EXPERIMENTAL in {value.strip() for value in listed.split(",")}
    Stability._initialize()
    return Stability._get_opentelemetry_stability_opt_in_mode(signal) is latest


@dataclass
class _Overrides:
    capture_content: bool | None = None
    max_content_bytes: int | None = None
    redactor: object = _UNSET
    latest_genai_conventions: bool | None = None
    tracer_provider: trace.TracerProvider | None = None


_overrides = _Overrides()
_tracer: trace.Tracer | None = None


def configure(
    *,
    capture_content: bool | None = None,
    max_content_bytes: int | None = None,
    redactor: Redactor | None | object = _UNSET,
    latest_genai_conventions: bool | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> None:
    """Override the environment in code; ``redactor=None`` turns redaction off;
    ``latest_genai_conventions`` chooses the span shape as ``OTEL_SEMCONV_STABILITY_OPT_IN`` would.

    Arguments left out keep their current value; call :func:`reset_configuration` to go back
    to the environment and the global tracer provider.
    """
    global _tracer
    if capture_content is not None:
        _overrides.capture_content = bool(capture_content)
    if max_content_bytes is not None:
        if not isinstance(max_content_bytes, int) or max_content_bytes < MIN_MAX_CONTENT_BYTES:
            raise ValueError(f"max_content_bytes must be an integer >= {MIN_MAX_CONTENT_BYTES}")
        _overrides.max_content_bytes = max_content_bytes
    if redactor is not _UNSET:
        if redactor is not None and not isinstance(redactor, Redactor):
            raise TypeError("redactor must be an otel_blame.redaction.Redactor or None")
        _overrides.redactor = redactor
    if latest_genai_conventions is not None:
        _overrides.latest_genai_conventions = bool(latest_genai_conventions)
    if tracer_provider is not None:
        _overrides.tracer_provider = tracer_provider
        _tracer = None


def reset_configuration() -> None:
    """Forget every :func:`configure` override."""
    global _overrides, _tracer
    _overrides = _Overrides()
    _tracer = None


def current_settings() -> CaptureSettings:
    """The settings a task starting now uses: environment first, then code overrides."""
    settings = CaptureSettings(capture_content=capture_from_env(), max_content_bytes=max_bytes_from_env())
    if _overrides.capture_content is not None:
        settings = replace(settings, capture_content=_overrides.capture_content)
    if _overrides.max_content_bytes is not None:
        settings = replace(settings, max_content_bytes=_overrides.max_content_bytes)
    if _overrides.redactor is not _UNSET:
        settings = replace(settings, redactor=_overrides.redactor)  # type: ignore[arg-type]
    latest = _overrides.latest_genai_conventions
    if latest is None:
        latest = latest_genai_conventions_from_env()
    if latest:
        settings = replace(settings, latest_genai_conventions=True)
    return settings


def tracer() -> trace.Tracer:
    """The tracer every otel-blame span comes from (the global provider unless configured)."""
    global _tracer
    if _tracer is None:
        _tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, __version__, tracer_provider=_overrides.tracer_provider
        )
    return _tracer
