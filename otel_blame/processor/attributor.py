"""Running the configured attribution method with a per-trace timeout and an offline fallback.

The method runs in its own thread pool; the caller waits at most ``timeout`` seconds (counted
from submission, so time spent queued behind slow LLM calls counts too). An error or a timeout
falls back to the offline method, and ``Attribution.method`` says so, e.g.
``heuristic(fallback:all_at_once)``. Content is redacted before it reaches an LLM method.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from otel_blame.attribution.base import AttributionMethod
from otel_blame.attribution.calibration import Calibration, CalibrationError
from otel_blame.attribution.registry import create_method, is_llm_method
from otel_blame.attribution.result import Attribution
from otel_blame.processor.config import AttributionConfig, ConfigError
from otel_blame.redaction import Redactor
from otel_blame.trajectory import Trajectory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttributionOutcome:
    """The answer (None when even the fallback failed) and what happened on the way."""

    attribution: Attribution | None
    fell_back: bool = False
    problem: str | None = None


def redact_trajectory(trajectory: Trajectory, redactor: Redactor) -> Trajectory:
    """A copy with every piece of free text passed through the redactor."""
    task = trajectory.task.model_copy(
        update={
            key: redactor(value) if isinstance(value, str) else value
            for key, value in trajectory.task.model_dump().items()
            if key in ("name", "input", "expected_output", "final_output")
        }
    )
    steps = [step.model_copy(update={"content": redactor(step.content)}) for step in trajectory.steps]
    return trajectory.model_copy(update={"task": task, "steps": steps})


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


class AttributionRunner:
    """Thread-safe; ``attribute`` blocks the calling thread for at most the configured timeout."""

    def __init__(self, config: AttributionConfig, redactor: Redactor | None = None) -> None:
        self._config = config
        try:
            self.method: AttributionMethod = create_method(config.method, llm=config.llm)
        except ValueError as error:
            raise ConfigError(f"attribution.method: {error}") from None
        self.fallback: AttributionMethod | None = None
        if config.fallback_method != config.method:
            try:
                self.fallback = create_method(config.fallback_method, llm=config.llm)
            except ValueError as error:
                raise ConfigError(f"attribution.fallback_method: {error}") from None
        self._redact = config.redact and is_llm_method(config.method)
        self._redact_fallback = config.redact and is_llm_method(config.fallback_method)
        self._redactor = redactor or Redactor()
        self.calibration = _load_calibration(config)
        self._pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="otel-blame-attribute")

    def _calibrated(self, attribution: Attribution) -> Attribution:
        """The method's answer with ``confidence`` mapped through the calibration file, when one is set."""
        if self.calibration is None:
            return attribution
        return attribution.model_copy(update={"confidence": self.calibration.apply(attribution.confidence)})

    def attribute(self, trajectory: Trajectory) -> AttributionOutcome:
        started = time.monotonic()
        given = redact_trajectory(trajectory, self._redactor) if self._redact else trajectory
        future = self._pool.submit(self.method.attribute, given)
        try:
            return AttributionOutcome(self._calibrated(future.result(timeout=self._config.timeout)))
        except FutureTimeout:
            future.cancel()
            problem = f"{self.method.name} timed out after {self._config.timeout:g} s"
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

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
