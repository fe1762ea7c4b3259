"""Clients that misbehave on purpose get an answer or a timeout, never a wedged receiver (issue 8).

Raw sockets on loopback against the real uvicorn/h11 receiver: request smuggling shapes, a body
left behind a 401, slowloris headers, stalled bodies, JSON nested 10,000 deep, ids of every wrong
length. No timing in the assertions: a timeout is observed as the server closing or answering 408.
"""

from __future__ import annotations

import json
import re
import socket

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from otel_blame.otlp_json import traces_to_json

TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _connect(endpoint: str) -> socket.socket:
    host, _, port = endpoint.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _status_lines(raw: bytes) -> list[bytes]:
    return re.findall(rb"HTTP/1\.1 \d{3} [A-Za-z ]*", raw)


def test_duplicate_content_length_is_refused(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    for lengths in ((b"5", b"5"), (b"5", b"6")):
        with _connect(processor.http_endpoint) as sock:
            sock.sendall(
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                b"Content-Length: " + lengths[0] + b"\r\nContent-Length: " + lengths[1] + b"\r\n\r\nhello"
            )
            raw = _read_until_closed(sock)
        assert _status_lines(raw) == [b"HTTP/1.1 400 Bad Request"]
    assert processor.stats()["wal_pending_rows"] == 0


def test_body_left_after_a_401_is_never_read_as_a_request(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(receivers={"auth_token": "s3cret"})
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with _connect(processor.http_endpoint) as sock:
        sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            b"Content-Length: " + str(len(smuggled)).encode() + b"\r\n\r\n" + smuggled
        )
        raw = _read_until_closed(sock)
    assert _status_lines(raw) == [b"HTTP/1.1 401 Unauthorized"]  # one answer; the body was no request
    assert b'{"status":"ok"}' not in raw


def test_a_kept_alive_connection_stays_in_step_after_a_refusal(sink, make_processor) -> None:  # noqa: ANN001
    """A 400 whose body was read keeps the connection; the next request on it is answered as itself."""
    processor = make_processor()
    body = b"\x12\x34\x56"  # not a protobuf request
    with _connect(processor.http_endpoint) as sock:
        sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            b"Content-Length: 3\r\n\r\n"
            + body
            + b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        raw = _read_until_closed(sock)
    assert _status_lines(raw) == [b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 200 OK"]
    assert raw.endswith(b'{"ready": true}')


def test_slowloris_headers_are_timed_out(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(receivers={"http_header_timeout": 0.5})
    with _connect(processor.http_endpoint) as sock:
        sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
        closed = False
        for _ in range(400):  # one header byte at a time: the deadline is not reset by each byte
            try:
                sock.sendall(b"X")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            sock.settimeout(0.05)
            try:
                if sock.recv(1024) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
        assert closed, "the server kept a connection whose headers never ended"


def test_an_idle_connection_is_timed_out(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(receivers={"http_header_timeout": 0.5})
    with _connect(processor.http_endpoint) as sock:
        assert _read_until_closed(sock) == b""  # closed by the server, without a request


def test_a_stalled_body_gets_408(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(receivers={"http_body_timeout": 0.5})
    with _connect(processor.http_endpoint) as sock:
        sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            b"Content-Length: 1000\r\n\r\n" + b"\x0a" * 10
        )
        raw = _read_until_closed(sock)
    assert _status_lines(raw) == [b"HTTP/1.1 408 Request Timeout"]
    assert processor.stats()["wal_pending_rows"] == 0


@pytest.mark.parametrize("path", ["/v1/traces", "/v1/logs", "/v1/verdicts"])
def test_ten_thousand_deep_json_gets_400(sink, make_processor, path: str) -> None:  # noqa: ANN001
    processor = make_processor()
    body = b"[" * 10_000 + b"]" * 10_000
    with _connect(processor.http_endpoint) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        raw = _read_until_closed(sock)
    assert _status_lines(raw) == [b"HTTP/1.1 400 Bad Request"]
    assert "nested deeper" in json.loads(raw.split(b"\r\n\r\n", 1)[1])["message"]


def test_a_300_level_kvlist_gets_400_not_a_dropped_connection(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    value = '{"stringValue": "leaf"}'
    for _ in range(300):  # built as text: json.dumps itself would recurse too deeply
        value = '{"kvlistValue": {"values": [{"key": "k", "value": ' + value + "}]}}"
    span = f'{{"traceId": "{"ab" * 16}", "spanId": "{"cd" * 8}", "name": "deep", '
    span += '"attributes": [{"key": "deep", "value": ' + value + "}]}"
    body = ('{"resourceSpans": [{"scopeSpans": [{"spans": [' + span + "]}]}]}").encode()
    with _connect(processor.http_endpoint) as sock:
        sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
        )
        raw = _read_until_closed(sock)
    assert _status_lines(raw) == [b"HTTP/1.1 400 Bad Request"]


def _span(trace_id: bytes, span_id: bytes, parent: bytes = b"") -> Span:
    return Span(trace_id=trace_id, span_id=span_id, parent_span_id=parent, name="s", start_time_unix_nano=1)


GOOD_TRACE, GOOD_SPAN = bytes.fromhex("0af7651916cd43dd8448eb211c80319c"), bytes.fromhex("b7ad6b7169203331")
BAD_IDS = {
    "trace id of 0 bytes": _span(b"", b"\x01" * 8),
    "trace id of 7 bytes": _span(b"\x01" * 7, b"\x01" * 8),
    "trace id of 17 bytes": _span(b"\x01" * 17, b"\x01" * 8),
    "all-zero trace id": _span(bytes(16), b"\x01" * 8),
    "span id of 0 bytes": _span(b"\x01" * 16, b""),
    "span id of 7 bytes": _span(b"\x01" * 16, b"\x01" * 7),
    "span id of 17 bytes": _span(b"\x01" * 16, b"\x01" * 17),
    "all-zero span id": _span(b"\x01" * 16, bytes(8)),
    "parent id of 7 bytes": _span(b"\x01" * 16, b"\x01" * 8, b"\x02" * 7),
}


def _request(*spans: Span) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))])]
    )


@pytest.mark.parametrize("case", sorted(BAD_IDS))
def test_every_bad_id_is_rejected_with_a_partial_success(sink, make_processor, case: str) -> None:  # noqa: ANN001
    processor = make_processor()
    good = _span(GOOD_TRACE, GOOD_SPAN)
    body = _request(good, BAD_IDS[case]).SerializeToString()
    with grpc.insecure_channel(processor.grpc_endpoint) as channel:
        call = channel.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)
        answer = ExportTraceServiceResponse.FromString(call(body, timeout=10))
    assert answer.partial_success.rejected_spans == 1
    assert "invalid ids" in answer.partial_success.error_message
    host, _, port = processor.http_endpoint.rpartition(":")
    import http.client

    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"})
    response = connection.getresponse()
    assert response.status == 200
    assert ExportTraceServiceResponse.FromString(response.read()).partial_success.rejected_spans == 1
    connection.close()
    arrived = sink.wait_for_spans(2, timeout=10)
    assert [r.span.span_id for r in arrived] == [GOOD_SPAN, GOOD_SPAN]  # only the good span, twice
    assert processor.stats()["rejected_spans"] == 2


def test_an_empty_json_trace_id_is_rejected_with_a_partial_success(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    document = json.loads(
        traces_to_json(_request(_span(GOOD_TRACE, GOOD_SPAN), _span(b"\x01" * 16, b"\x03" * 8)))
    )
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["traceId"] = ""
    import http.client

    host, _, port = processor.http_endpoint.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request(
        "POST", "/v1/traces", body=json.dumps(document), headers={"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    answer = json.loads(response.read())
    connection.close()
    assert response.status == 200
    assert answer["partialSuccess"]["rejectedSpans"] in ("1", 1)
    assert [r.span.span_id for r in sink.wait_for_spans(1, timeout=10)] == [GOOD_SPAN]


def test_a_request_of_only_bad_ids_stores_nothing(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor()
    body = _request(*BAD_IDS.values()).SerializeToString()
    with grpc.insecure_channel(processor.grpc_endpoint) as channel:
        call = channel.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)
        answer = ExportTraceServiceResponse.FromString(call(body, timeout=10))
    assert answer.partial_success.rejected_spans == len(BAD_IDS)
    assert processor.stats()["wal_pending_rows"] == 0 and processor.stats()["received_spans"] == 0
