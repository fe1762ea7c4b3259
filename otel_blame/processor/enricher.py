"""THE one place where blame becomes span attributes.

On a failed trace: the decisive step's span gets ``blame.culprit``, ``blame.agent``,
``blame.step``, ``blame.reason``, a ``blame.assigned`` event and a GenAI ``gen_ai.evaluation.result``
event (see ``evaluation_attributes``); the root gets ``blame.agent``,
``blame.step``, ``blame.confidence``, ``blame.reason``, ``blame.method`` and ``blame.model``;
both also get ``blame.decided`` (false: a ranked guess, the culprit span its top candidate's),
``blame.category`` (and ``blame.dependency``), ``blame.cross_run.suspiciousness``
where known, ``blame.pattern`` (the failure pattern, when patterns are on), the root
``blame.failure_mode`` where one is supported;
every step's span gets ``blame.score``. Nothing else about the spans changes. For a failure
known only after the trace was exported (a late verdict), a new span ``blame {agent}`` carries
the same root attributes and the evaluation event into the trace, with a link to the culprit span.
The evaluation result can also be sent as the conventions' log-record event
(:func:`evaluation_log_request`), parented to the same span, for backends that read logs.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, SeverityNumber
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

from otel_blame import __version__
from otel_blame import semconv as sc
from otel_blame.attribution.result import Attribution
from otel_blame.attribution.step_scores import step_scores
from otel_blame.trajectory import Trajectory

log = logging.getLogger(__name__)

SCOPE_NAME = "otel_blame.processor"


def _value(value: object) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def _set(attributes, key: str, value: object) -> None:  # noqa: ANN001 - a repeated KeyValue field
    """Set one attribute, replacing an earlier value of the same key rather than duplicating it."""
    for position in range(len(attributes) - 1, -1, -1):
        if attributes[position].key == key:
            del attributes[position]
    attributes.append(KeyValue(key=key, value=_value(value)))


def root_attributes(attribution: Attribution, pattern: str | None = None) -> dict[str, object]:
    """The ``blame.*`` attributes of a trace's root (and of a late ``blame {agent}`` span)."""
    values: dict[str, object] = {
        sc.BLAME_AGENT: attribution.agent,
        sc.BLAME_STEP: attribution.step,
        sc.BLAME_CONFIDENCE: float(attribution.confidence),
        sc.BLAME_REASON: attribution.reason,
        sc.BLAME_METHOD: attribution.method,
    }
    if attribution.model:
        values[sc.BLAME_MODEL] = attribution.model
    values.update(culprit_attributes(attribution, pattern))
    if attribution.failure_mode:
        values[sc.BLAME_FAILURE_MODE] = attribution.failure_mode
    return values


def culprit_attributes(attribution: Attribution, pattern: str | None = None) -> dict[str, object]:
    """What root and culprit span both carry beyond agent, step and reason: whether the evidence
    decided the verdict (``blame.decided``), the kind of failure (``blame.category``,
    ``blame.dependency``), the cross-run suspiciousness, where known, and the failure pattern
    (``blame.pattern``)."""
    values: dict[str, object] = {sc.BLAME_DECIDED: bool(attribution.decided)}
    if attribution.category:
        values[sc.BLAME_CATEGORY] = attribution.category
    if attribution.dependency and attribution.category == sc.CATEGORY_DEPENDENCY:
        values[sc.BLAME_DEPENDENCY] = attribution.dependency
    if attribution.cross_run_suspiciousness is not None:
        values[sc.BLAME_CROSS_RUN_SUSPICIOUSNESS] = round(float(attribution.cross_run_suspiciousness), 6)
    if pattern:
        values[sc.BLAME_PATTERN] = pattern
    return values


def evaluation_attributes(attribution: Attribution, response_id: str | None = None) -> dict[str, object]:
    """The attribution as a GenAI ``gen_ai.evaluation.result`` event: the evaluated operation is the
    culprit step, the score its confidence, the explanation the reason (docs/semconv.md)."""
    values: dict[str, object] = {
        sc.GEN_AI_EVALUATION_NAME: sc.EVALUATION_FAILURE_ATTRIBUTION,
        sc.GEN_AI_EVALUATION_SCORE_VALUE: float(attribution.confidence),
        sc.GEN_AI_EVALUATION_SCORE_LABEL: sc.EVALUATION_LABEL_CULPRIT,
        sc.GEN_AI_EVALUATION_EXPLANATION: attribution.reason,
    }
    if response_id:
        values[sc.GEN_AI_RESPONSE_ID] = response_id
    return values


@dataclass(frozen=True)
class EvaluationEvent:
    """Where a ``gen_ai.evaluation.result`` went: the span it is parented to, its time and attributes."""

    trace_id: bytes
    span_id: bytes
    time_unix_nano: int
    attributes: dict[str, object]


def evaluation_log_request(event: EvaluationEvent, resource: Resource | None = None) -> bytes:
    """The evaluation result as the GenAI conventions define events: a log record named
    ``gen_ai.evaluation.result`` carrying the evaluated span's context (an ExportLogsServiceRequest)."""
    record = LogRecord(
        time_unix_nano=event.time_unix_nano,
        observed_time_unix_nano=time.time_ns(),
        severity_number=SeverityNumber.SEVERITY_NUMBER_INFO,
        severity_text="INFO",
        trace_id=event.trace_id,
        span_id=event.span_id,
        event_name=sc.GEN_AI_EVALUATION_RESULT_EVENT,
    )
    for key, value in event.attributes.items():
        _set(record.attributes, key, value)
    request = ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    if resource is not None:
        resource_logs.resource.CopyFrom(resource)
    scope_logs = resource_logs.scope_logs.add()
    scope_logs.scope.CopyFrom(InstrumentationScope(name=SCOPE_NAME, version=__version__))
    scope_logs.log_records.append(record)
    return request.SerializeToString()


def _add_event(span: Span, name: str, time_unix_nano: int, attributes: dict[str, object]) -> None:
    event = span.events.add(name=name, time_unix_nano=time_unix_nano)
    for key, value in attributes.items():
        _set(event.attributes, key, value)


def _string_attribute(span: Span, key: str) -> str | None:
    for attribute in span.attributes:
        if attribute.key == key and attribute.value.HasField("string_value"):
            return attribute.value.string_value
    return None


class BlameEnricher:
    """Writes an Attribution onto the spans of its trace."""

    def enrich(
        self,
        resource_spans: Sequence[ResourceSpans],
        trajectory: Trajectory,
        attribution: Attribution,
        pattern: str | None = None,
    ) -> EvaluationEvent | None:
        """Mutate the spans in place; return the evaluation event written on the culprit span
        (None when no span of the trace is the culprit step's). ``pattern``: ``blame.pattern``."""
        by_id: dict[str, list[Span]] = {}
        for resource in resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    by_id.setdefault(span.span_id.hex(), []).append(span)
        culprit_id = None
        if 0 <= attribution.step < len(trajectory.steps):
            culprit_id = trajectory.steps[attribution.step].span_id
        else:
            log.warning(
                "attribution names step %d of %d; no culprit span", attribution.step, len(trajectory.steps)
            )
        evaluation: EvaluationEvent | None = None
        for index, score in step_scores(trajectory, attribution).items():
            for span in by_id.get(trajectory.steps[index].span_id or "", []):
                _set(span.attributes, sc.BLAME_SCORE, round(score, 6))
        for span in by_id.get(culprit_id or "", []):
            _set(span.attributes, sc.BLAME_CULPRIT, True)
            _set(span.attributes, sc.BLAME_AGENT, attribution.agent)
            _set(span.attributes, sc.BLAME_STEP, attribution.step)
            _set(span.attributes, sc.BLAME_REASON, attribution.reason)
            for key, value in culprit_attributes(attribution, pattern).items():
                _set(span.attributes, key, value)
            at = span.end_time_unix_nano or span.start_time_unix_nano or time.time_ns()
            _add_event(span, sc.BLAME_ASSIGNED_EVENT, at, root_attributes(attribution, pattern))
            response_id = _string_attribute(span, sc.GEN_AI_RESPONSE_ID)
            attributes = evaluation_attributes(attribution, response_id)
            _add_event(span, sc.GEN_AI_EVALUATION_RESULT_EVENT, at, attributes)
            evaluation = evaluation or EvaluationEvent(span.trace_id, span.span_id, at, attributes)
        for span in by_id.get(trajectory.root_span_id or "", []):
            for key, value in root_attributes(attribution, pattern).items():
                _set(span.attributes, key, value)
        return evaluation

    def late_blame_span(
        self,
        trajectory: Trajectory,
        attribution: Attribution,
        resource: Resource | None = None,
        pattern: str | None = None,
    ) -> tuple[bytes, EvaluationEvent]:
        """An ExportTraceServiceRequest (serialised) with one new span ``blame {agent}``, and the
        evaluation event written on that span."""
        now = time.time_ns()
        span = Span(
            trace_id=bytes.fromhex(trajectory.trace_id or ""),
            span_id=os.urandom(8),
            parent_span_id=bytes.fromhex(trajectory.root_span_id) if trajectory.root_span_id else b"",
            name=sc.late_blame_span_name(attribution.agent),
            kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=now,
            end_time_unix_nano=now,
        )
        for key, value in root_attributes(attribution, pattern).items():
            _set(span.attributes, key, value)
        if 0 <= attribution.step < len(trajectory.steps) and trajectory.steps[attribution.step].span_id:
            link = span.links.add()
            link.trace_id = span.trace_id
            link.span_id = bytes.fromhex(trajectory.steps[attribution.step].span_id or "")
            _set(link.attributes, sc.BLAME_CULPRIT, True)
        _add_event(span, sc.BLAME_ASSIGNED_EVENT, now, {sc.BLAME_REASON: attribution.reason})
        evaluation = EvaluationEvent(span.trace_id, span.span_id, now, evaluation_attributes(attribution))
        _add_event(span, sc.GEN_AI_EVALUATION_RESULT_EVENT, now, evaluation.attributes)
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        if resource is not None:
            resource_spans.resource.CopyFrom(resource)
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.CopyFrom(InstrumentationScope(name=SCOPE_NAME, version=__version__))
        scope_spans.spans.append(span)
        return request.SerializeToString(), evaluation
