"""A span-tree JSON export as OTLP protobuf, so it takes the same conventions path as a received trace.

Tools that show traces as trees (Patronus, which exported the TRAIL benchmark, and similar
viewers) save a trace as ``{"trace_id": ..., "spans": [span, ...]}`` where each span carries its
children nested in ``child_spans``, with flat snake_case fields: ``span_id``, ``parent_span_id``,
``span_name``, ``span_kind``, ``timestamp`` (ISO 8601, UTC when no zone is given), ``duration``
(ISO 8601, e.g. ``PT1M48.75S``, or seconds), ``service_name``, ``resource_attributes``,
``scope_name``/``scope_version``, ``span_attributes``, ``status_code``/``status_message`` and
``events`` (``Timestamp``, ``Name``, ``Attributes``). A bare list of such spans, or one root span,
reads the same. Spans are grouped back into ResourceSpans by resource and ScopeSpans by scope.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

_MAX_DEPTH = 2_000  # nesting deeper than any real agent run; deeper input is refused, not recursed into
_DURATION = re.compile(
    r"^P(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)
_KINDS = {
    "internal": Span.SPAN_KIND_INTERNAL,
    "server": Span.SPAN_KIND_SERVER,
    "client": Span.SPAN_KIND_CLIENT,
    "producer": Span.SPAN_KIND_PRODUCER,
    "consumer": Span.SPAN_KIND_CONSUMER,
}
_STATUSES = {
    "ok": Status.STATUS_CODE_OK,
    "error": Status.STATUS_CODE_ERROR,
    "unset": Status.STATUS_CODE_UNSET,
}


class SpanTreeError(ValueError):
    """The input is not a span tree; the message says where and why."""


def span_tree_to_otlp(data: Any) -> list[ResourceSpans]:
    """The spans of a span-tree document as OTLP ResourceSpans (one per resource, one scope each)."""
    roots = data.get("spans") if isinstance(data, Mapping) and "spans" in data else data
    if isinstance(roots, Mapping):
        roots = [roots]
    if not isinstance(roots, list):
        raise SpanTreeError("a span tree holds a list of spans under 'spans'")
    default_trace = _text(data.get("trace_id")) if isinstance(data, Mapping) else ""
    resources: dict[str, ResourceSpans] = {}
    scopes: dict[tuple[str, str, str], ScopeSpans] = {}
    for path, raw, parent in _walk(roots):
        span = _span(raw, parent, default_trace, path)
        resource_key = json.dumps(
            [_text(raw.get("service_name")), raw.get("resource_attributes") or {}],
            sort_keys=True,
            default=str,
        )
        if resource_key not in resources:
            resource_attrs = dict(raw.get("resource_attributes") or {})
            if raw.get("service_name") and "service.name" not in resource_attrs:
                resource_attrs["service.name"] = raw["service_name"]
            resources[resource_key] = ResourceSpans(resource=Resource(attributes=_key_values(resource_attrs)))
        scope_key = (resource_key, _text(raw.get("scope_name")), _text(raw.get("scope_version")))
        if scope_key not in scopes:
            scope = resources[resource_key].scope_spans.add()
            scope.scope.CopyFrom(InstrumentationScope(name=scope_key[1], version=scope_key[2]))
            scopes[scope_key] = scope
        scopes[scope_key].spans.append(span)
    return list(resources.values())


def _walk(roots: list[Any]) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any] | None]]:
    """Every span with its path (for errors) and its parent in the tree, depth first, without recursion."""
    stack: list[tuple[str, Any, Mapping[str, Any] | None, int]] = [
        (f"spans[{index}]", item, None, 0) for index, item in reversed(list(enumerate(roots)))
    ]
    while stack:
        path, raw, parent, depth = stack.pop()
        if not isinstance(raw, Mapping):
            raise SpanTreeError(f"{path}: expected a span object, got {type(raw).__name__}")
        if depth > _MAX_DEPTH:
            raise SpanTreeError(f"{path}: spans nested more than {_MAX_DEPTH} deep")
        yield path, raw, parent
        children = raw.get("child_spans") or []
        if not isinstance(children, list):
            raise SpanTreeError(f"{path}.child_spans: expected a list")
        for index in reversed(range(len(children))):
            stack.append((f"{path}.child_spans[{index}]", children[index], raw, depth + 1))


def _span(raw: Mapping[str, Any], parent: Mapping[str, Any] | None, default_trace: str, path: str) -> Span:
    trace_id = _hex_id(raw.get("trace_id") or default_trace, 16, f"{path}.trace_id")
    span_id = _hex_id(raw.get("span_id"), 8, f"{path}.span_id")
    parent_hex = raw.get("parent_span_id") or (parent.get("span_id") if parent is not None else None)
    start = _time(raw.get("timestamp") or raw.get("start_time"), f"{path}.timestamp")
    duration = _duration(raw.get("duration"), f"{path}.duration")
    status = _STATUSES.get(_text(raw.get("status_code")).lower().removeprefix("status_code_"))
    span = Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=_hex_id(parent_hex, 8, f"{path}.parent_span_id") if parent_hex else b"",
        name=_text(raw.get("span_name") or raw.get("name")),
        kind=_KINDS.get(
            _text(raw.get("span_kind")).lower().removeprefix("span_kind_"), Span.SPAN_KIND_INTERNAL
        ),
        start_time_unix_nano=start,
        end_time_unix_nano=start + duration if start else 0,
        attributes=_key_values(raw.get("span_attributes") or {}),
        status=Status(code=status or Status.STATUS_CODE_UNSET, message=_text(raw.get("status_message"))),
    )
    for number, event in enumerate(raw.get("events") or []):
        if not isinstance(event, Mapping):
            continue
        added = span.events.add()
        added.name = _text(_field(event, "Name", "name"))
        when = _field(event, "Timestamp", "timestamp", "time")
        added.time_unix_nano = _time(when, f"{path}.events[{number}]") if when else 0
        added.attributes.extend(_key_values(_field(event, "Attributes", "attributes") or {}))
    return span


def _field(mapping: Mapping[str, Any], *names: str) -> Any:
    return next((mapping[name] for name in names if name in mapping), None)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _hex_id(value: Any, size: int, where: str) -> bytes:
    found = _text(value).strip().lower().removeprefix("0x").replace("-", "")
    try:
        raw = bytes.fromhex(found)
    except ValueError:
        raise SpanTreeError(f"{where}: {value!r} is not a hex id") from None
    if len(raw) != size:
        raise SpanTreeError(f"{where}: {value!r} is not a {size}-byte hex id")
    return raw


def _time(value: Any, where: str) -> int:
    """Unix nanoseconds from an ISO 8601 timestamp (UTC without a zone) or a number of nanoseconds."""
    if value is None or value == "":
        return 0
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    try:
        moment = datetime.fromisoformat(_text(value).replace("Z", "+00:00"))
    except ValueError:
        raise SpanTreeError(f"{where}: {value!r} is not an ISO 8601 timestamp") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def _duration(value: Any, where: str) -> int:
    """Nanoseconds from an ISO 8601 duration (``PT1M48.75S``) or a number of seconds."""
    if value is None or value == "":
        return 0
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value * 1_000_000_000)
    match = _DURATION.match(_text(value).strip())
    if match is None:
        raise SpanTreeError(f"{where}: {value!r} is not an ISO 8601 duration")
    parts = {name: float(found) for name, found in match.groupdict().items() if found}
    seconds = (
        parts.get("days", 0) * 86_400 + parts.get("hours", 0) * 3_600 + parts.get("minutes", 0) * 60
    ) + parts.get("seconds", 0)
    return round(seconds * 1_000_000_000)


def _key_values(attributes: Any) -> list[KeyValue]:
    if not isinstance(attributes, Mapping):
        return []
    return [KeyValue(key=str(key), value=_any_value(value)) for key, value in attributes.items()]


def _any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return (
            AnyValue(int_value=value)
            if -(1 << 63) <= value < (1 << 63)
            else AnyValue(string_value=str(value))
        )
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, list) and all(isinstance(item, str | bool | int | float) for item in value):
        found = AnyValue()
        found.array_value.values.extend(_any_value(item) for item in value)
        return found
    if value is None:
        return AnyValue()
    return AnyValue(string_value=json.dumps(value, ensure_ascii=False, default=str))
