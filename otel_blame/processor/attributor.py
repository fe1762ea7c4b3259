"""Running the configured attribution method with a per-trace timeout and an offline fallback.

The method runs on the calling thread (an analysis worker process: there is one worker pool for
analysis, not a second one for attribution). The timeout is a deadline, counted from when the
trace was handed to the analyser, so time spent queued behind slow LLM calls counts too; it is
set with :func:`~otel_blame.attribution.deadline.attribution_deadline`, and the LLM client ends
every request, slot wait and retry by it (see that module). An LLM method whose trace's deadline
passed while queued makes no request and goes straight to the fallback. An error or a timeout
falls back to the fallback method, and ``Attribution.method`` says so, e.g.
``heuristic(fallback:all_at_once)``. Content is redacted before it reaches an LLM method.

With ``attribution.escalation`` (``undecided`` by default) and an LLM endpoint configured, the
offline method is built escalating (:mod:`otel_blame.attribution.escalation`): it reads the trace
as it is, and only what goes to the LLM is redacted. When its LLM check fails or runs out of time,
it answers with the offline verdict it already has (``ranker(fallback:guided_check)``), counted
as a fallback like the fallback method's answers.

In-process methods (the heuristic, the baselines) are not interrupted: they make no request and
finish in milliseconds; an answer that arrives after the deadline is used, since it is there.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from otel_blame.attribution.base import AttributionError, AttributionMethod
from otel_blame.attribution.calibration import Calibration, CalibrationError
from otel_blame.attribution.deadline import DeadlineExceeded, attribution_deadline
from otel_blame.attribution.registry import create_method, escalates, is_llm_method
from otel_blame.attribution.result import Attribution
from otel_blame.processor.config import AttributionConfig, ConfigError
from otel_blame.redaction import Redactor, redact_trajectory
from otel_blame.trajectory import Trajectory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttributionOutcome:
    """The answer (None when even the fallback failed) and what happened on the way."""

    attribution: Attribution | None
    fell_back: bool = False
    problem: str | None = None


def _load_calibration(config: AttributionConfig) -> Calibration | None:
    """The configured calibration file, checked against the method (the fallback stays uncalibrated)."""
    if config.calibration is None:
        return None
    try:
        calibration = Calibration.load(config.calibration)
    except CalibrationError as error:
        raise ConfigError(f"attribution.calibration: {error}") from None
    if calibration.method != config.method:
        raise ConfigError(
            f"attribution.calibration: {config.calibration} was fitted for method {calibration.method!r}, "
            f"but attribution.method is {config.method!r}"
        )
    return calibration


def uses_llm(config: AttributionConfig) -> bool:
    """Whether attribution sends content to an LLM: an LLM method or fallback, or an escalation."""
    return (
        is_llm_method(config.method)
        or is_llm_method(config.fallback_method)
        or escalates(config.method, config.escalation, config.llm)
    )


class AttributionRunner:
    """Thread-safe; ``attribute`` runs on the calling thread and ends its LLM requests by the deadline."""

    def __init__(self, config: AttributionConfig, redactor: Redactor | None = None) -> None:
        self._config = config
        self._redactor = redactor or Redactor()
        try:
            self.method: AttributionMethod = create_method(
                config.method,
                llm=config.llm,
                escalation=config.escalation,
                for_llm=self._redacted if config.redact else None,
            )
        except ValueError as error:
            raise ConfigError(f"attribution.method: {error}") from None
        except AttributionError as error:  # escalation "always" with no endpoint to escalate to
            raise ConfigError(f"attribution.escalation: {config.escalation}: {error}") from None
        self.fallback: AttributionMethod | None = None
        if config.fallback_method != config.method:
            try:
                self.fallback = create_method(config.fallback_method, llm=config.llm)
            except ValueError as error:
                raise ConfigError(f"attribution.fallback_method: {error}") from None
        self._redact = config.redact and is_llm_method(config.method)
        self._redact_fallback = config.redact and is_llm_method(config.fallback_method)
        self.calibration = _load_calibration(config)

    def _redacted(self, trajectory: Trajectory) -> Trajectory:
        return redact_trajectory(trajectory, self._redactor)

    def _calibrated(self, attribution: Attribution) -> Attribution:
        """The method's answer with ``confidence`` mapped through the calibration file, when one is set
        (an escalated verdict's confidence is the LLM's, which the file was not fitted on)."""
        if self.calibration is None or attribution.method.startswith(f"{self._config.method}+"):
            return attribution
        return attribution.model_copy(update={"confidence": self.calibration.apply(attribution.confidence)})

    def attribute(self, trajectory: Trajectory, *, submitted_at: float | None = None) -> AttributionOutcome:
        """The method's answer, or the fallback's when it fails or runs out of time.

        ``submitted_at`` (``time.monotonic()``) is when the trace was queued for analysis; the
        timeout counts from it (from now when it is not given)."""
        started = time.monotonic() if submitted_at is None else submitted_at
        deadline = started + self._config.timeout
        timed_out = f"{self.method.name} timed out after {self._config.timeout:g} s"
        try:
            # a budget spent in the queue: the LLM client refuses to start a request (so an LLM
            # method goes straight to the fallback); an in-process method just runs
            given = redact_trajectory(trajectory, self._redactor) if self._redact else trajectory
            with attribution_deadline(deadline):
                answer = self._calibrated(self.method.attribute(given))
            # an escalation whose LLM check failed answers with the offline verdict it already had
            fell_back = "(fallback:" in answer.method
            return AttributionOutcome(answer, fell_back, answer.reason if fell_back else None)
        except DeadlineExceeded as error:
            problem = f"{timed_out} ({error})"
        except Exception as error:  # an LLM error, a bad answer, AttributionError
            problem = f"{self.method.name} failed: {type(error).__name__}: {error}"
        log.warning("trace %s: %s", trajectory.trace_id, problem)
        if self.fallback is None:
            return AttributionOutcome(None, problem=problem)
        try:
            fallback_given = (
                redact_trajectory(trajectory, self._redactor) if self._redact_fallback else trajectory
            )
            answer = self.fallback.attribute(fallback_given)
        except Exception as error:
            return AttributionOutcome(None, problem=f"{problem}; fallback failed: {error}")
        method = f"{self.fallback.name}(fallback:{self.method.name})"
        elapsed = time.monotonic() - started
        cost = answer.cost.model_copy(update={"seconds": elapsed})
        return AttributionOutcome(answer.model_copy(update={"method": method, "cost": cost}), True, problem)
