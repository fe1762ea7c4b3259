"""The OTLP/HTTP receiver, plus health, metrics and late verdicts on the same port.

``POST /v1/traces`` and ``/v1/logs`` take ``application/x-protobuf`` or ``application/json``
(OTLP/JSON, hex ids), optionally gzip-compressed. ``GET /healthz`` answers while the process
runs, ``GET /readyz`` once it accepts data, ``GET /metrics`` in the Prometheus text format,
``POST /v1/verdicts`` takes ``{"trace_id", "outcome", "expected_output"}``.
"""

from __future__ import annotations

import gzip
import hmac
import json
import logging
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame.otlp_json import OTLPJSONError, parse_otlp_json
from otel_blame.processor.config import ReceiversConfig
from otel_blame.processor.errors import Backpressure, InvalidRequest, NotAccepting, VerdictNotFound
from otel_blame.processor.tls import http_server_context

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class HTTPHandler(Protocol):
    def accept_traces(self, body: bytes) -> None: ...

    def accept_logs(self, body: bytes) -> None: ...

    def submit_verdict(self, trace_id: str, outcome: str, expected_output: str | None) -> dict[str, Any]: ...

    def render_metrics(self) -> str: ...

    @property
    def ready(self) -> bool: ...


def _json_to_protobuf(body: bytes, kind: str) -> bytes:
    try:
        spans, logs = parse_otlp_json(body)
    except (OTLPJSONError, UnicodeDecodeError) as error:
        raise InvalidRequest(str(error)) from None
    if kind == "traces":
        traces = ExportTraceServiceRequest()
        traces.resource_spans.extend(spans)
        return traces.SerializeToString()
    records = ExportLogsServiceRequest()
    records.resource_logs.extend(logs)
    return records.SerializeToString()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], receiver: HTTPReceiver) -> None:
        self.receiver = receiver
        super().__init__(address, _RequestHandler)

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:
        """A failed TLS handshake or a dropped connection is the client's problem, not a crash."""
        log.debug("HTTP connection from %s failed", client_address, exc_info=True)


class _RequestHandler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "otel-blame"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        log.debug("%s " + format, self.address_string(), *args)

    # -- plumbing ----------------------------------------------------------------------------
    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, message: str, as_json: bool, headers: dict[str, str] | None = None) -> None:
        code = {400: code_pb2.INVALID_ARGUMENT, 401: code_pb2.UNAUTHENTICATED, 404: code_pb2.NOT_FOUND}.get(
            status, code_pb2.UNAVAILABLE
        )
        if as_json:
            self._send(status, json.dumps({"code": code, "message": message}).encode(), JSON, headers)
        else:
            self._send(
                status, status_pb2.Status(code=code, message=message).SerializeToString(), PROTOBUF, headers
            )

    def _authorised(self) -> bool:
        token = self.server.receiver.token
        if token is None:
            return True
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token)

    def _read_body(self, as_json: bool) -> bytes | None:
        limit = self.server.receiver.config.max_request_bytes
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self._error(411, "Content-Length required", as_json)
            self.close_connection = True
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._error(400, "bad Content-Length", as_json)
            self.close_connection = True
            return None
        if length > limit:
            self._error(413, f"request of {length} bytes exceeds the limit of {limit}", as_json)
            self.close_connection = True
            return None
        body = self.rfile.read(length)
        encoding = (self.headers.get("Content-Encoding") or "identity").lower()
        if encoding == "gzip":
            try:
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                body = inflater.decompress(body, limit + 1)
                if len(body) > limit or inflater.unconsumed_tail:
                    self._error(413, f"decompressed request exceeds the limit of {limit} bytes", as_json)
                    return None
            except (zlib.error, gzip.BadGzipFile) as error:
                self._error(400, f"invalid gzip body: {error}", as_json)
                return None
        elif encoding != "identity":
            self._error(415, f"unsupported Content-Encoding {encoding!r}", as_json)
            return None
        return body

    # -- routes ------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        receiver = self.server.receiver
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(200, b'{"status":"ok"}', JSON)
        elif path == "/readyz":
            ready = receiver.handler.ready
            self._send(200 if ready else 503, json.dumps({"ready": ready}).encode(), JSON)
        elif path == "/metrics":
            self._send(
                200, receiver.handler.render_metrics().encode(), "text/plain; version=0.0.4; charset=utf-8"
            )
        else:
            self._error(404, f"no route {path}", True)

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        receiver = self.server.receiver
        path = self.path.split("?", 1)[0]
        content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        as_json = content_type == JSON
        if path not in ("/v1/traces", "/v1/logs", "/v1/verdicts"):
            self._error(404, f"no route {path}", as_json)
            return
        if not self._authorised():
            self._error(401, "missing or wrong bearer token", as_json, {"WWW-Authenticate": "Bearer"})
            return
        body = self._read_body(as_json)
        if body is None:
            return
        if path == "/v1/verdicts":
            self._verdict(body)
            return
        if content_type not in (PROTOBUF, JSON):
            self._error(415, f"Content-Type must be {PROTOBUF} or {JSON}", as_json)
            return
        kind = "traces" if path == "/v1/traces" else "logs"
        accept: Callable[[bytes], None] = (
            receiver.handler.accept_traces if kind == "traces" else receiver.handler.accept_logs
        )
        try:
            accept(_json_to_protobuf(body, kind) if as_json else body)
        except InvalidRequest as error:
            self._error(400, str(error), as_json)
            return
        except Backpressure as error:
            self._error(503, str(error), as_json, {"Retry-After": str(error.retry_after)})
            return
        except NotAccepting as error:
            self._error(503, str(error), as_json, {"Retry-After": "1"})
            return
        if as_json:
            self._send(200, b"{}", JSON)
        else:
            self._send(200, b"", PROTOBUF)

    def _verdict(self, body: bytes) -> None:
        try:
            data = json.loads(body or b"null")
            if not isinstance(data, dict) or not isinstance(data.get("trace_id"), str):
                raise ValueError('expected {"trace_id": "<32 hex digits>", "outcome": "failure"}')
            outcome = str(data.get("outcome", "failure")).lower()
            if outcome not in ("failure", "success"):
                raise ValueError("outcome must be 'failure' or 'success'")
            expected = data.get("expected_output")
            result = self.server.receiver.handler.submit_verdict(
                data["trace_id"], outcome, None if expected is None else str(expected)
            )
        except VerdictNotFound as error:
            self._error(404, str(error), True)
            return
        except NotAccepting as error:
            self._error(503, str(error), True, {"Retry-After": "1"})
            return
        except ValueError as error:
            self._error(400, str(error), True)
            return
        status = 202 if result.get("status") == "pending" else 200
        self._send(status, json.dumps(result).encode(), JSON)


class HTTPReceiver:
    def __init__(self, endpoint: str, config: ReceiversConfig, handler: HTTPHandler) -> None:
        self.config = config
        self.handler = handler
        self.token = config.auth_token.get_secret_value().encode() if config.auth_token else None
        host, _, port = endpoint.rpartition(":")
        try:
            self._server = _Server((host, int(port)), self)
        except OSError as error:
            raise OSError(f"cannot listen on {endpoint} (HTTP): {error.strerror or error}") from None
        if config.tls is not None:
            context = http_server_context(config.tls)
            self._server.socket = context.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="otel-blame-http", daemon=True
        )

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
