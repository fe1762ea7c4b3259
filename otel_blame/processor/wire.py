"""Splitting OTLP export requests by trace id at the protobuf wire level.

The hot path keeps no Python object per span: the spans of one trace are written straight into
the wire encoding of an ExportTraceServiceRequest holding only that trace. Because a repeated
protobuf field is the concatenation of its entries, several such payloads joined with
``b"".join`` are again one valid request: that is how the exporter batches and how a trace is
reassembled.

Trace requests are cut by a native walker of the protobuf framing (``_wire.c``, built with the
package): each span's bytes are copied as received, under copies of its resource's and scope's
fields, and only each span's ids and flags are read. The request is parsed once by upb first
(that is what checks it is valid OTLP, as before) and the few spans that may be a trace's root
are read from that parse, for the failure decision. Where the extension could not be built (no
C compiler at install), the same cut is made in Python (:func:`split_traces_python`), about
fifteen times slower per span; both give the same groups (``tests/processor/test_wire_native.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

try:
    from otel_blame.processor import _wire as native
except ImportError:  # built without a C compiler: the Python cut below does the same, slower
    native = None

# byte strings whose presence marks a payload as coming from an agent instrumentation
AGENT_MARKERS = (
    b"gen_ai.",
    b"openinference.span.kind",
    b"traceloop.span.kind",
    b"ag2.span.type",
    b"otel_blame.",
)

# a span with a remote parent that carries one of these is the root of an agent task called from
# another service (its own root is not ours to wait for)
WORKFLOW_MARKERS = (b"invoke_workflow", b"otel_blame.task.")
_PARENT_IS_REMOTE = 0x200  # SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK

# field tags (field number << 3 | wire type 2) of the OTLP messages we write
_TAG_1 = b"\x0a"  # ExportTraceServiceRequest.resource_spans / ResourceSpans.resource / ScopeSpans.scope
_TAG_2 = b"\x12"  # ResourceSpans.scope_spans / ScopeSpans.spans
_TAG_3 = b"\x1a"  # schema_url


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = [_encode_varint(value) for value in range(1 << 14)]  # every length under 16 KiB


def varint(value: int) -> bytes:
    return _SMALL_VARINTS[value] if value < 16384 else _encode_varint(value)


def field(tag: bytes, payload: bytes) -> bytes:
    """One length-delimited field."""
    return b"".join((tag, varint(len(payload)), payload))


def has_agent_marker(payload: bytes) -> bool:
    return any(marker in payload for marker in AGENT_MARKERS)


class DecodeError(ValueError):
    """The request body is not a valid OTLP protobuf message."""


_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)


def bad_span_ids(trace_id: bytes, span_id: bytes, parent_span_id: bytes) -> str | None:
    """Why a span's ids break the OTLP spec (16-byte trace id, 8-byte span id, neither all zero)."""
    if len(trace_id) != 16 or trace_id == _ZERO_TRACE:
        return f"trace id of {len(trace_id)} bytes{' (all zero)' if trace_id and not any(trace_id) else ''}"
    if len(span_id) != 8 or span_id == _ZERO_SPAN:
        return f"span id of {len(span_id)} bytes{' (all zero)' if span_id and not any(span_id) else ''}"
    if parent_span_id and (len(parent_span_id) != 8 or parent_span_id == _ZERO_SPAN):
        return f"parent span id of {len(parent_span_id)} bytes"
    return None


def bad_record_ids(trace_id: bytes, span_id: bytes) -> str | None:
    """Log records may stand outside a trace (empty ids); present ids must be valid."""
    if trace_id and (len(trace_id) != 16 or trace_id == _ZERO_TRACE):
        return f"trace id of {len(trace_id)} bytes"
    if span_id and (len(span_id) != 8 or span_id == _ZERO_SPAN or not trace_id):
        return f"span id of {len(span_id)} bytes" + ("" if trace_id else " without a trace id")
    return None


class Groups(list["TraceGroup"]):
    """The per-trace payloads of one request, and what was left out of it as invalid."""

    rejected: int = 0
    rejection: str = ""

    def reject(self, why: str) -> None:
        if not self.rejected:
            self.rejection = why
        self.rejected += 1


@dataclass(slots=True)
class TraceGroup:
    """The spans (or log records) of one trace taken from one request, as a request payload."""

    trace_id: bytes
    payload: bytes
    items: int
    has_root: bool = False
    root_failure: str | None = None  # why a root span of this group fails the trace
    failed_root: bytes = b""  # that root span's id
    has_agent: bool = False


def split_traces(body: bytes, root_failure: Callable[[Span], str | None]) -> Groups:
    """Parse an ExportTraceServiceRequest and cut it into one payload per trace id.

    ``root_failure`` is asked about every root span (no parent, or a remote parent and workflow
    attributes) and says why it fails its trace, or None: this is where a trace's failure is
    decided (see :mod:`.decision`), with no second parse. Spans with invalid ids are left out and
    counted in ``Groups.rejected``.
    """
    if native is None:
        return split_traces_python(body, root_failure)
    request = _parse(body)
    try:
        cut, rejected, first_rejected = native.split(body)
    except ValueError as error:  # upb took it, the walker did not: say so rather than guess
        raise DecodeError(f"invalid ExportTraceServiceRequest: {error}") from None
    groups = Groups()
    if rejected:
        groups.reject(bad_span_ids(*first_rejected) or "bad ids")
        groups.rejected = rejected
    resources = request.resource_spans
    for trace_id, payload, items, roots in cut:
        has_root, failure = False, None
        for resource, scope, position, parentless in roots:
            span = resources[resource].scope_spans[scope].spans[position]
            if not parentless:  # a remote parent: a root only of an agent task called from elsewhere
                encoded = span.SerializeToString()
                if not any(marker in encoded for marker in WORKFLOW_MARKERS):
                    continue
            has_root = True
            why = root_failure(span)
            if why:
                failure = (why, span.span_id)
                break
        groups.append(
            TraceGroup(
                trace_id=trace_id,
                payload=payload,
                items=items,
                has_root=has_root,
                root_failure=failure[0] if failure else None,
                failed_root=failure[1] if failure else b"",
                has_agent=has_agent_marker(payload),
            )
        )
    return groups


def _parse(body: bytes) -> ExportTraceServiceRequest:
    try:
        return ExportTraceServiceRequest.FromString(body)
    except Exception as error:  # upb raises google.protobuf.message.DecodeError
        raise DecodeError(f"invalid ExportTraceServiceRequest: {error}") from None


def split_traces_python(body: bytes, root_failure: Callable[[Span], str | None]) -> Groups:
    """:func:`split_traces` without the native walker (each span re-serialised by upb)."""
    request = _parse(body)
    # trace id -> list of (resource header, list of (scope header, [span bytes]))
    per_trace: dict[bytes, list[tuple[bytes, list[tuple[bytes, list[bytes]]]]]] = {}
    roots: dict[bytes, tuple[str, bytes] | None] = {}
    counts: dict[bytes, int] = {}
    rejected = Groups()
    for resource_spans in request.resource_spans:
        resource_header = b""
        if resource_spans.HasField("resource"):
            resource_header = field(_TAG_1, resource_spans.resource.SerializeToString())
        resource_tail = (
            field(_TAG_3, resource_spans.schema_url.encode()) if resource_spans.schema_url else b""
        )
        resource_header_full = resource_header + resource_tail
        touched: dict[bytes, list[tuple[bytes, list[bytes]]]] = {}
        for scope_spans in resource_spans.scope_spans:
            scope_header = b""
            if scope_spans.HasField("scope"):
                scope_header = field(_TAG_1, scope_spans.scope.SerializeToString())
            if scope_spans.schema_url:
                scope_header += field(_TAG_3, scope_spans.schema_url.encode())
            by_trace: dict[bytes, list[bytes]] = {}
            for span in scope_spans.spans:
                trace_id, span_id, parent_id = span.trace_id, span.span_id, span.parent_span_id
                if (
                    len(trace_id) != 16
                    or len(span_id) != 8
                    or trace_id == _ZERO_TRACE
                    or span_id == _ZERO_SPAN
                    or (parent_id and (len(parent_id) != 8 or parent_id == _ZERO_SPAN))
                ):
                    rejected.reject(bad_span_ids(trace_id, span_id, parent_id) or "bad ids")
                    continue
                encoded = span.SerializeToString()
                spans = by_trace.get(trace_id)
                if spans is None:
                    by_trace[trace_id] = [encoded]
                else:
                    spans.append(encoded)
                if not parent_id or (
                    span.flags & _PARENT_IS_REMOTE and any(marker in encoded for marker in WORKFLOW_MARKERS)
                ):
                    if roots.get(trace_id) is None:
                        why = root_failure(span)
                        roots[trace_id] = (why, span_id) if why else None
            for trace_id, spans in by_trace.items():
                scopes = touched.get(trace_id)
                if scopes is None:
                    scopes = touched[trace_id] = []
                scopes.append((scope_header, spans))
                counts[trace_id] = counts.get(trace_id, 0) + len(spans)
        for trace_id, scopes in touched.items():
            per_trace.setdefault(trace_id, []).append((resource_header_full, scopes))
    groups = rejected
    small = _SMALL_VARINTS
    for trace_id, resources in per_trace.items():
        encoded = []
        for resource_header, scopes in resources:
            scope_fields = []
            for scope_header, spans in scopes:
                pieces = [scope_header]
                for span_bytes in spans:  # a span field: tag, length, the span
                    size = len(span_bytes)
                    pieces += (_TAG_2, small[size] if size < 16384 else _encode_varint(size), span_bytes)
                scope_fields.append(field(_TAG_2, b"".join(pieces)))
            encoded.append(field(_TAG_1, resource_header + b"".join(scope_fields)))
        payload = b"".join(encoded)
        failure = roots.get(trace_id)
        groups.append(
            TraceGroup(
                trace_id=trace_id,
                payload=payload,
                items=counts[trace_id],
                has_root=trace_id in roots,
                root_failure=failure[0] if failure else None,
                failed_root=failure[1] if failure else b"",
                has_agent=has_agent_marker(payload),
            )
        )
    return groups


def split_logs(body: bytes) -> Groups:
    """Parse an ExportLogsServiceRequest and cut it into one payload per trace id (``b""`` for
    records outside any trace). Records with invalid ids are left out and counted."""
    try:
        request = ExportLogsServiceRequest.FromString(body)
    except Exception as error:
        raise DecodeError(f"invalid ExportLogsServiceRequest: {error}") from None
    per_trace: dict[bytes, list[bytes]] = {}
    counts: dict[bytes, int] = {}
    groups = Groups()
    for resource_logs in request.resource_logs:
        header = b""
        if resource_logs.HasField("resource"):
            header = field(_TAG_1, resource_logs.resource.SerializeToString())
        tail = field(_TAG_3, resource_logs.schema_url.encode()) if resource_logs.schema_url else b""
        touched: dict[bytes, list[bytes]] = {}
        for scope_logs in resource_logs.scope_logs:
            scope_header = b""
            if scope_logs.HasField("scope"):
                scope_header = field(_TAG_1, scope_logs.scope.SerializeToString())
            if scope_logs.schema_url:
                scope_header += field(_TAG_3, scope_logs.schema_url.encode())
            by_trace: dict[bytes, list[bytes]] = {}
            for record in scope_logs.log_records:
                why = bad_record_ids(record.trace_id, record.span_id)
                if why is not None:
                    groups.reject(why)
                    continue
                by_trace.setdefault(record.trace_id, []).append(record.SerializeToString())
            for trace_id, records in by_trace.items():
                touched.setdefault(trace_id, []).append(
                    field(_TAG_2, scope_header + b"".join(field(_TAG_2, r) for r in records))
                )
                counts[trace_id] = counts.get(trace_id, 0) + len(records)
        for trace_id, scopes in touched.items():
            per_trace.setdefault(trace_id, []).append(field(_TAG_1, header + b"".join(scopes) + tail))
    groups.extend(
        TraceGroup(
            trace_id=trace_id,
            payload=b"".join(parts),
            items=counts[trace_id],
            has_agent=b"gen_ai." in b"".join(parts),
        )
        for trace_id, parts in per_trace.items()
    )
    return groups


def count_spans(payload: bytes) -> int:
    request = ExportTraceServiceRequest.FromString(payload)
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
