"""OTLP/JSON <-> protobuf, with the hex trace and span ids the OTLP JSON encoding prescribes.

The protobuf JSON mapping would read ``traceId``/``spanId`` as base64; OTLP/JSON writes them as
hex. This module converts the id fields in both directions so that files written by the
Collector's file exporter, by ``OTEL_EXPORTER_OTLP_PROTOCOL=http/json`` exporters and by
``otel-blame`` itself all parse to the same protobuf messages. Input may hold one document or
many (concatenated or one per line), each an ExportTraceServiceRequest and/or an
ExportLogsServiceRequest (``resourceSpans`` / ``resourceLogs``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import ResourceLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

# id fields, by their JSON (camelCase) and proto (snake_case) names, with their byte length
_ID_FIELDS = {
    "traceId": 16,
    "trace_id": 16,
    "spanId": 8,
    "span_id": 8,
    "parentSpanId": 8,
    "parent_span_id": 8,
}


class OTLPJSONError(ValueError):
    """The input is not OTLP/JSON; the message says where and why."""


def iter_json_documents(data: bytes | str) -> Iterator[Any]:
    """Yield every JSON value in ``data``: one document, several concatenated, or JSON lines."""
    text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    decoder = json.JSONDecoder()
    position, length = 0, len(text)
    while True:
        while position < length and text[position] in " \t\r\n\ufeff":
            position += 1
        if position >= length:
            return
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise OTLPJSONError(
                f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
            ) from None
        yield value


def _ids_hex_to_b64(node: Any, path: str) -> Any:
    """Copy of a JSON tree with hex id strings turned into the base64 the protobuf parser expects."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                out[key] = _hex_to_b64(value, _ID_FIELDS[key], f"{path}.{key}")
            else:
                out[key] = _ids_hex_to_b64(value, f"{path}.{key}")
        return out
    if isinstance(node, list):
        return [_ids_hex_to_b64(item, f"{path}[{index}]") for index, item in enumerate(node)]
    return node


def _hex_to_b64(value: str, size: int, path: str) -> str:
    if value == "":
        return ""
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise OTLPJSONError(f"{path}: {value!r} is not a hex id") from None
    if len(raw) != size:
        raise OTLPJSONError(f"{path}: expected {size * 2} hex digits, got {len(value)}")
    return base64.b64encode(raw).decode("ascii")


def _ids_b64_to_hex(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: (
                base64.b64decode(value).hex()
                if key in _ID_FIELDS and isinstance(value, str)
                else _ids_b64_to_hex(value)
            )
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_ids_b64_to_hex(item) for item in node]
    return node


def _parse_document(document: Any, number: int) -> tuple[list[ResourceSpans], list[ResourceLogs]]:
    if not isinstance(document, dict):
        raise OTLPJSONError(f"document {number}: expected a JSON object, got {type(document).__name__}")
    span_keys = [key for key in ("resourceSpans", "resource_spans") if key in document]
    log_keys = [key for key in ("resourceLogs", "resource_logs") if key in document]
    if not span_keys and not log_keys:
        raise OTLPJSONError(f"document {number}: neither resourceSpans nor resourceLogs present")
    spans: list[ResourceSpans] = []
    logs: list[ResourceLogs] = []
    try:
        if span_keys:
            request = ExportTraceServiceRequest()
            tree = {"resourceSpans": _ids_hex_to_b64(document[span_keys[0]], "resourceSpans")}
            json_format.ParseDict(tree, request)
            spans.extend(request.resource_spans)
        if log_keys:
            logs_request = ExportLogsServiceRequest()
            tree = {"resourceLogs": _ids_hex_to_b64(document[log_keys[0]], "resourceLogs")}
            json_format.ParseDict(tree, logs_request)
            logs.extend(logs_request.resource_logs)
    except json_format.ParseError as error:
        raise OTLPJSONError(f"document {number}: {error}") from None
    except (binascii.Error, TypeError) as error:
        raise OTLPJSONError(f"document {number}: {error}") from None
    return spans, logs


def parse_otlp_json(data: bytes | str) -> tuple[list[ResourceSpans], list[ResourceLogs]]:
    """All resource spans and resource logs in ``data`` (any number of OTLP/JSON documents)."""
    spans: list[ResourceSpans] = []
    logs: list[ResourceLogs] = []
    for number, document in enumerate(iter_json_documents(data), start=1):
        more_spans, more_logs = _parse_document(document, number)
        spans.extend(more_spans)
        logs.extend(more_logs)
    return spans, logs


def parse_traces_json(data: bytes | str) -> ExportTraceServiceRequest:
    """One ExportTraceServiceRequest holding the spans of every document in ``data``."""
    spans, _ = parse_otlp_json(data)
    request = ExportTraceServiceRequest()
    request.resource_spans.extend(spans)
    return request


def _to_json_dict(message: Any) -> dict[str, Any]:
    tree = json_format.MessageToDict(message, preserving_proto_field_name=False)
    return _ids_b64_to_hex(tree)


def traces_to_json(
    request: ExportTraceServiceRequest | Sequence[ResourceSpans], *, indent: int | None = None
) -> str:
    """OTLP/JSON of a trace request (or of a list of ResourceSpans), ids in hex."""
    if not isinstance(request, ExportTraceServiceRequest):
        built = ExportTraceServiceRequest()
        built.resource_spans.extend(request)
        request = built
    return json.dumps(_to_json_dict(request), indent=indent)


def logs_to_json(
    request: ExportLogsServiceRequest | Sequence[ResourceLogs], *, indent: int | None = None
) -> str:
    """OTLP/JSON of a logs request (or of a list of ResourceLogs), ids in hex."""
    if not isinstance(request, ExportLogsServiceRequest):
        built = ExportLogsServiceRequest()
        built.resource_logs.extend(request)
        request = built
    return json.dumps(_to_json_dict(request), indent=indent)
