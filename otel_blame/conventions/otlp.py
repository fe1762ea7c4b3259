"""OTLP protobuf values as plain Python, and the SDK's in-memory spans/logs as OTLP."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import ResourceLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans


def any_value_to_python(value: AnyValue) -> Any:
    """An OTLP AnyValue as a plain Python value (str, bool, int, float, bytes, list, dict or None)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value_to_python(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value_to_python(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which)


def attributes_to_dict(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    """Attributes as a dict; with repeated keys the first wins, as the OTLP spec asks."""
    out: dict[str, Any] = {}
    for kv in attributes:
        if kv.key not in out:
            out[kv.key] = any_value_to_python(kv.value)
    return out


def trace_ids(resource_spans: Sequence[ResourceSpans]) -> list[bytes]:
    """Distinct trace ids in order of first appearance."""
    seen: dict[bytes, None] = {}
    for resource in resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                seen.setdefault(span.trace_id, None)
    return list(seen)


def sdk_spans_to_proto(spans: Sequence[Any]) -> list[ResourceSpans]:
    """OpenTelemetry SDK ``ReadableSpan``s as OTLP ResourceSpans (the SDK's own OTLP encoder), so
    in-memory spans take the same path as received ones."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return list(encode_spans(spans).resource_spans)


def sdk_logs_to_proto(records: Sequence[Any]) -> list[ResourceLogs]:
    """OpenTelemetry SDK log records (what a LogExporter receives) as OTLP ResourceLogs."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs

    return list(encode_logs(records).resource_logs)
