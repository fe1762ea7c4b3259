"""The native cut of trace requests (``_wire.c``) gives exactly the groups the Python cut gives: same
traces in the same order, same spans (as messages), same root decision, same rejections."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from otel_blame import semconv as sc
from otel_blame.conventions import sdk_spans_to_proto
from otel_blame.processor import wire
from otel_blame.processor.config import DetectionConfig
from otel_blame.processor.decision import FailureDetector
from otel_blame.processor.wire import DecodeError, Groups, split_traces, split_traces_python

from .spans import record_agent_run

pytestmark = pytest.mark.skipif(wire.native is None, reason="the native cut was not built (no C compiler)")

DETECTOR = FailureDetector(DetectionConfig())
TRACE_IDS = [bytes([n]) * 16 for n in range(1, 5)] + [bytes(16), b"\x01" * 15]  # two invalid
SPAN_IDS = [bytes([n]) * 8 for n in range(1, 9)] + [bytes(8), b"\x02" * 7]
PARENTS = [b"", b"", *SPAN_IDS]


def _same(body: bytes) -> Groups:
    native, python = (
        split_traces(body, DETECTOR.failure_reason),
        split_traces_python(body, DETECTOR.failure_reason),
    )
    assert [group.trace_id for group in native] == [group.trace_id for group in python]
    for ours, theirs in zip(native, python, strict=True):
        assert ExportTraceServiceRequest.FromString(ours.payload) == ExportTraceServiceRequest.FromString(
            theirs.payload
        )
        assert (ours.items, ours.has_root, ours.root_failure, ours.failed_root, ours.has_agent) == (
            theirs.items,
            theirs.has_root,
            theirs.root_failure,
            theirs.failed_root,
            theirs.has_agent,
        )
    assert (native.rejected, native.rejection) == (python.rejected, python.rejection)
    return native


def test_agent_runs_from_the_sdk_are_cut_alike() -> None:
    spans = [
        span
        for n in range(6)
        for span in record_agent_run(
            [("Planner", f"plan {n}"), ("Solver", "41")], failed=n % 2 == 0, tool_after=0
        )
    ]
    body = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans)).SerializeToString()
    groups = _same(body)
    assert len(groups) == 6 and sum(group.root_failure is not None for group in groups) == 3


def test_spans_are_copied_as_they_were_received() -> None:
    spans = record_agent_run([("Planner", "plan"), ("Solver", "41")], failed=True)
    body = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans)).SerializeToString()
    (group,) = split_traces(body, DETECTOR.failure_reason)
    assert group.payload == body  # one trace, canonical input: the same bytes


def _span(trace: int, span: int, parent: int, remote: bool, workflow: bool, failed: bool) -> Span:
    built = Span(
        trace_id=TRACE_IDS[trace],
        span_id=SPAN_IDS[span],
        parent_span_id=PARENTS[parent],
        name="s",
        flags=0x300 if remote else 0x100,
        attributes=[KeyValue(key=sc.GEN_AI_OPERATION_NAME, value=AnyValue(string_value="invoke_workflow"))]
        if workflow
        else [],
    )
    if failed:
        built.status.code = Status.STATUS_CODE_ERROR
    return built


_spans = st.builds(
    _span,
    st.integers(0, len(TRACE_IDS) - 1),
    st.integers(0, len(SPAN_IDS) - 1),
    st.integers(0, len(PARENTS) - 1),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
_scopes = st.builds(
    lambda spans, name, url: ScopeSpans(
        scope=InstrumentationScope(name=name) if name else None, spans=spans, schema_url=url
    ),
    st.lists(_spans, max_size=6),
    st.sampled_from(["", "tests"]),
    st.sampled_from(["", "https://opentelemetry.io/schemas/1.26.0"]),
)
_resources = st.builds(
    lambda scopes, service, url: ResourceSpans(
        resource=Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value=service))])
        if service
        else None,
        scope_spans=scopes,
        schema_url=url,
    ),
    st.lists(_scopes, max_size=3),
    st.sampled_from(["", "agents"]),
    st.sampled_from(["", "https://opentelemetry.io/schemas/1.21.0"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_resources, max_size=4))
def test_any_request_is_cut_alike(resources: list[ResourceSpans]) -> None:
    _same(ExportTraceServiceRequest(resource_spans=resources).SerializeToString())


@settings(max_examples=200, deadline=None)
@given(st.lists(_resources, min_size=1, max_size=3), st.data())
def test_a_request_cut_short_or_damaged_is_refused_by_both(resources: list[ResourceSpans], data) -> None:  # noqa: ANN001
    body = ExportTraceServiceRequest(resource_spans=resources).SerializeToString()
    if not body:
        return
    at = data.draw(st.integers(0, len(body) - 1))
    damaged = data.draw(st.sampled_from([body[:at], body[:at] + bytes([body[at] ^ 0xFF]) + body[at + 1 :]]))
    try:
        python = split_traces_python(damaged, DETECTOR.failure_reason)
    except DecodeError:
        with pytest.raises(DecodeError):
            split_traces(damaged, DETECTOR.failure_reason)
        return
    assert [g.trace_id for g in split_traces(damaged, DETECTOR.failure_reason)] == [
        g.trace_id for g in python
    ]


def test_a_big_request_of_many_traces() -> None:
    spans = [Span(trace_id=os.urandom(16), span_id=os.urandom(8), name="x" * 300) for _ in range(5000)]
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])])
    groups = _same(request.SerializeToString())
    assert len(groups) == 5000 and all(group.has_root for group in groups)
