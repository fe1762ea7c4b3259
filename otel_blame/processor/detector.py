"""Deciding from the root span whether a trace failed: the signals are configurable."""

from __future__ import annotations

from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from otel_blame import semconv as sc
from otel_blame.conventions import any_value_to_python
from otel_blame.processor.config import DetectionConfig


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


class FailureDetector:
    """``failure_reason(root)`` says why the trace failed, or None when it did not."""

    def __init__(self, config: DetectionConfig) -> None:
        self._config = config

    def is_failed(self, root: Span) -> bool:
        return self.failure_reason(root) is not None

    def failure_reason(self, root: Span) -> str | None:
        config = self._config
        if config.root_error and root.status.code == Status.STATUS_CODE_ERROR:
            return f"root span status ERROR{': ' + root.status.message if root.status.message else ''}"
        score_key = config.evaluation_score_attribute
        threshold = config.evaluation_score_threshold
        for kv in root.attributes:
            if config.outcome_attribute and kv.key == sc.TASK_OUTCOME:
                if str(any_value_to_python(kv.value)).lower() == sc.OUTCOME_FAILURE:
                    return f"{sc.TASK_OUTCOME} = {sc.OUTCOME_FAILURE}"
            elif threshold is not None and kv.key == score_key:
                score = _number(any_value_to_python(kv.value))
                if score is not None and score < threshold:
                    return f"{score_key} = {score} below {threshold}"
        if config.root_exception_event or threshold is not None:
            for event in root.events:
                if config.root_exception_event and event.name == sc.EXCEPTION_EVENT:
                    return "exception event on the root span"
                if threshold is not None:
                    for kv in event.attributes:
                        if kv.key == score_key:
                            score = _number(any_value_to_python(kv.value))
                            if score is not None and score < threshold:
                                return f"{score_key} = {score} below {threshold} ({event.name})"
        return None
