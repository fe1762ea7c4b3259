"""Whether a trace failed, why, and on which spans: decided once, while the trace is assembled.

The wire splitter asks :class:`FailureDetector` about every root span as it passes by (the signals
are configurable); the assembler folds the answers and any verdict that arrives while the trace is
buffered into one :class:`TraceDecision` when the trace completes. Every later stage reads that
decision; none decides again. The one exception is a trace released without any root span (after
``max_wait``): it is decided once, in its analysis, on the span the trajectory takes as its root
(:func:`otel_blame.processor.analysis.blame_or_not`).
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from otel_blame import semconv as sc
from otel_blame.conventions import any_value_to_python
from otel_blame.processor.config import DetectionConfig

LATE_VERDICT = "failure reported by a verdict"


@dataclass(frozen=True, slots=True)
class TraceDecision:
    """``failed``: attribute the trace; ``why``: the signal that says so; ``spans``: the hex ids of
    the spans that carry it (the failed root; empty for a verdict)."""

    failed: bool
    why: str = ""
    spans: tuple[str, ...] = ()
    expected_output: str | None = None
    decided: bool = True  # False: no root span arrived; decided on the root the trajectory chooses

    @classmethod
    def verdict(cls, expected_output: str | None = None) -> TraceDecision:
        """A failure reported after the trace completed (``POST /v1/verdicts``, a late failed root)."""
        return cls(True, LATE_VERDICT, (), expected_output)


NOT_FAILED = TraceDecision(False)
UNDECIDED = TraceDecision(False, "no root span: decided on the root the trajectory chooses", decided=False)


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
    """``failure_reason(root)`` says why a root span means its trace failed, or None when it does not."""

    def __init__(self, config: DetectionConfig) -> None:
        self._config = config

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
