"""The OTLP/HTTP receiver, plus health, metrics and late verdicts, as a Starlette app on uvicorn.

``POST /v1/traces`` and ``/v1/logs`` take ``application/x-protobuf`` or ``application/json``
(OTLP/JSON, hex ids), optionally gzip-compressed. ``GET /healthz`` answers while the process
runs, ``GET /readyz`` once it accepts data, ``GET /metrics`` in the Prometheus text format,
``POST /v1/verdicts`` takes ``{"trace_id", "outcome", "expected_output"}``. Extra routes (the web
UI) can be mounted on the same app: they sit behind the same bearer token.

Why uvicorn + Starlette rather than a hand-written server: uvicorn's h11 parser frames bodies
strictly, its event loop holds thousands of idle sockets without a thread each, and
:mod:`.strict_h11` adds the per-connection limits (connection cap, header timeout, duplicate
Content-Length). Every body is read with a deadline (408) and a size cap (413), and every JSON
body has a bounded nesting depth (400), so no client can wedge the receiver or get no answer.
"""

from __future__ import annotations

import asyncio
import gzip
import hmac
import json
import logging
import re
import resource
import socket
import threading
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import uvicorn
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from otel_blame.otlp_json import OTLPJSONError, parse_otlp_json
from otel_blame.processor.config import ReceiversConfig
from otel_blame.processor.errors import (
    Accepted,
    Backpressure,
    InvalidRequest,
    NotAccepting,
    VerdictNotFound,
)
from otel_blame.processor.receivers.strict_h11 import ConnectionLimits, strict_protocol
from otel_blame.processor.tls import http_server_context

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})  # no token needed (probes, scrapers)
# the web UI checks the same token itself (Bearer for its API, a sign-in cookie for its pages)
SELF_AUTHENTICATED_PREFIXES = ("/ui/", "/api/")
_MAX_HEADER_BYTES = 64 * 1024
# asyncio accepts up to `backlog` connections in one go before any of them can be refused: a
# small backlog keeps that burst (file descriptors held above the connection cap) small
_BACKLOG = 64


class HTTPHandler(Protocol):
    def accept_traces(self, body: bytes) -> Accepted: ...

    def accept_logs(self, body: bytes) -> Accepted: ...

    def submit_verdict(self, trace_id: str, outcome: str, expected_output: str | None) -> dict[str, Any]: ...

    def render_metrics(self) -> tuple[bytes, str]: ...

    @property
    def ready(self) -> bool: ...


# -- bounded JSON ------------------------------------------------------------------------------
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


def json_too_deep(body: bytes, max_depth: int) -> bool:
    """True when arrays/objects nest deeper than ``max_depth`` (checked before any parser recurses)."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return False
    depth = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub(b'""', body)):
        if match.group() in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


def load_bounded_json(body: bytes, max_depth: int) -> Any:
    """``json.loads`` that answers a too-deep document with InvalidRequest, never RecursionError."""
    if json_too_deep(body, max_depth):
        raise InvalidRequest(f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(body or b"null")
    except (ValueError, RecursionError) as error:
        raise InvalidRequest(f"invalid JSON: {error}") from None


def _json_to_protobuf(body: bytes, kind: str, max_depth: int) -> bytes:
    if json_too_deep(body, max_depth):
        raise InvalidRequest(f"JSON nested deeper than {max_depth} levels")
    try:
        spans, logs = parse_otlp_json(body)
    except (OTLPJSONError, UnicodeDecodeError) as error:
        raise InvalidRequest(str(error)) from None
    except RecursionError:
        raise InvalidRequest("JSON nested too deeply") from None
    if kind == "traces":
        traces = ExportTraceServiceRequest()
        traces.resource_spans.extend(spans)
        return traces.SerializeToString()
    records = ExportLogsServiceRequest()
    records.resource_logs.extend(logs)
    return records.SerializeToString()


# -- answers -----------------------------------------------------------------------------------
class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, close: bool = False):
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})
        if close:
            self.headers["Connection"] = "close"


_CODES = {400: code_pb2.INVALID_ARGUMENT, 401: code_pb2.UNAUTHENTICATED, 404: code_pb2.NOT_FOUND}


def error_response(
    status: int, message: str, as_json: bool, headers: dict[str, str] | None = None
) -> Response:
    """An OTLP error answer: a google.rpc.Status, as protobuf or JSON like the request."""
    code = _CODES.get(status, code_pb2.UNAVAILABLE)
    if as_json:
        return Response(json.dumps({"code": code, "message": message}), status, headers, JSON)
    body = status_pb2.Status(code=code, message=message).SerializeToString()
    return Response(body, status, headers, PROTOBUF)


def _wants_json(request: Request) -> bool:
    return (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower() == JSON


class _BearerAuth:
    """Pure ASGI middleware: every path but the probes needs ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: bytes | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or self.token is None
            or path in OPEN_PATHS
            or path == "/ui"
            or path.startswith(SELF_AUTHENTICATED_PREFIXES)
        ):
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                given = value
                break
        scheme, _, token = given.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.token):
            await self.app(scope, receive, send)
            return
        content_type = dict(scope["headers"]).get(b"content-type", b"").split(b";", 1)[0].strip().lower()
        # the body is not read: close the connection rather than leave it for the next request
        response = error_response(
            401,
            "missing or wrong bearer token",
            content_type == JSON.encode(),
            {"WWW-Authenticate": "Bearer", "Connection": "close"},
        )
        await response(scope, receive, send)


class _Endpoints:
    """The route handlers, bound to one processor and one receivers config."""

    def __init__(self, handler: HTTPHandler, config: ReceiversConfig) -> None:
        self.handler = handler
        self.config = config

    async def read_body(self, request: Request) -> bytes:
        """The whole body within ``http_body_timeout`` and ``max_request_bytes``, gunzipped."""
        limit = self.config.max_request_bytes
        declared = request.headers.get("content-length")
        if declared is not None and int(declared) > limit:
            raise HTTPError(413, f"request of {declared} bytes exceeds the limit of {limit}", close=True)
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.config.http_body_timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise HTTPError(413, f"request exceeds the limit of {limit} bytes", close=True)
                    chunks.append(chunk)
        except TimeoutError:
            raise HTTPError(
                408, f"request body not received within {self.config.http_body_timeout:g} s", close=True
            ) from None
        body = b"".join(chunks)
        encoding = (request.headers.get("content-encoding") or "identity").lower()
        if encoding == "gzip":
            try:
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                body = inflater.decompress(body, limit + 1)
            except (zlib.error, gzip.BadGzipFile) as error:
                raise HTTPError(400, f"invalid gzip body: {error}") from None
            if len(body) > limit or inflater.unconsumed_tail:
                raise HTTPError(413, f"decompressed request exceeds the limit of {limit} bytes")
        elif encoding != "identity":
            raise HTTPError(415, f"unsupported Content-Encoding {encoding!r}")
        return body

    async def guarded(self, request: Request, work: Callable[[bool], Awaitable[Response]]) -> Response:
        as_json = _wants_json(request)
        try:
            return await work(as_json)
        except HTTPError as error:
            return error_response(error.status, str(error), as_json, error.headers)
        except ClientDisconnect:
            return Response(status_code=400, headers={"Connection": "close"})

    async def healthz(self, request: Request) -> Response:
        return Response(b'{"status":"ok"}', 200, media_type=JSON)

    async def readyz(self, request: Request) -> Response:
        ready = self.handler.ready
        return Response(json.dumps({"ready": ready}), 200 if ready else 503, media_type=JSON)

    async def metrics(self, request: Request) -> Response:
        body, content_type = await run_in_threadpool(self.handler.render_metrics)
        return Response(body, 200, headers={"Content-Type": content_type})

    async def traces(self, request: Request) -> Response:
        return await self.guarded(request, lambda as_json: self._export(request, "traces", as_json))

    async def logs(self, request: Request) -> Response:
        return await self.guarded(request, lambda as_json: self._export(request, "logs", as_json))

    async def _export(self, request: Request, kind: str, as_json: bool) -> Response:
        content_type = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
        if content_type not in (PROTOBUF, JSON):
            raise HTTPError(415, f"Content-Type must be {PROTOBUF} or {JSON}", close=True)
        body = await self.read_body(request)
        accept = self.handler.accept_traces if kind == "traces" else self.handler.accept_logs
        try:
            payload = _json_to_protobuf(body, kind, self.config.max_json_depth) if as_json else body
            accepted = await run_in_threadpool(accept, payload)
        except InvalidRequest as error:
            raise HTTPError(400, str(error)) from None
        except Backpressure as error:
            raise HTTPError(503, str(error), {"Retry-After": str(error.retry_after)}) from None
        except NotAccepting as error:
            raise HTTPError(503, str(error), {"Retry-After": "1"}) from None
        return _success(kind, accepted, as_json)

    async def verdicts(self, request: Request) -> Response:
        async def work(_: bool) -> Response:
            body = await self.read_body(request)
            try:
                data = load_bounded_json(body, self.config.max_json_depth)
                if not isinstance(data, dict) or not isinstance(data.get("trace_id"), str):
                    raise ValueError('expected {"trace_id": "<32 hex digits>", "outcome": "failure"}')
                outcome = str(data.get("outcome", "failure")).lower()
                if outcome not in ("failure", "success"):
                    raise ValueError("outcome must be 'failure' or 'success'")
                expected = data.get("expected_output")
                result = await run_in_threadpool(
                    self.handler.submit_verdict,
                    data["trace_id"],
                    outcome,
                    None if expected is None else str(expected),
                )
            except VerdictNotFound as error:
                raise HTTPError(404, str(error)) from None
            except NotAccepting as error:
                raise HTTPError(503, str(error), {"Retry-After": "1"}) from None
            except (ValueError, InvalidRequest) as error:
                raise HTTPError(400, str(error)) from None
            status = 202 if result.get("status") == "pending" else 200
            return Response(json.dumps(result), status, media_type=JSON)

        try:
            return await work(True)
        except HTTPError as error:
            return error_response(error.status, str(error), True, error.headers)
        except ClientDisconnect:
            return Response(status_code=400, headers={"Connection": "close"})


def _success(kind: str, accepted: Accepted, as_json: bool) -> Response:
    """An empty Export*ServiceResponse, or one with partial_success naming what was rejected."""
    if kind == "traces":
        message: Any = ExportTraceServiceResponse()
        if accepted.rejected:
            message.partial_success.CopyFrom(
                ExportTracePartialSuccess(rejected_spans=accepted.rejected, error_message=accepted.message)
            )
    else:
        message = ExportLogsServiceResponse()
        if accepted.rejected:
            message.partial_success.CopyFrom(
                ExportLogsPartialSuccess(
                    rejected_log_records=accepted.rejected, error_message=accepted.message
                )
            )
    if as_json:
        return Response(json_format.MessageToJson(message, indent=None) or "{}", 200, media_type=JSON)
    return Response(message.SerializeToString(), 200, media_type=PROTOBUF)


def build_app(
    handler: HTTPHandler, config: ReceiversConfig, extra_routes: Sequence[BaseRoute] = ()
) -> ASGIApp:
    """The receiver's ASGI app: OTLP, verdicts, probes, metrics, then ``extra_routes``, behind auth."""
    endpoints = _Endpoints(handler, config)
    routes: list[BaseRoute] = [
        Route("/v1/traces", endpoints.traces, methods=["POST"]),
        Route("/v1/logs", endpoints.logs, methods=["POST"]),
        Route("/v1/verdicts", endpoints.verdicts, methods=["POST"]),
        Route("/healthz", endpoints.healthz, methods=["GET", "HEAD"]),
        Route("/readyz", endpoints.readyz, methods=["GET", "HEAD"]),
        Route("/metrics", endpoints.metrics, methods=["GET", "HEAD"]),
        *extra_routes,
    ]
    app = Starlette(routes=routes)
    token = config.auth_token.get_secret_value().encode() if config.auth_token else None
    return _BearerAuth(app, token)


def connection_cap(configured: int) -> int:
    """``configured``, but at most half the open-file limit: the rest stays for gRPC and the log."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(8, min(configured, soft // 2))


class HTTPReceiver:
    """Binds at construction (so a port in use fails early); serves on its own event-loop thread."""

    def __init__(
        self,
        endpoint: str,
        config: ReceiversConfig,
        handler: HTTPHandler,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.config = config
        host, _, port = endpoint.rpartition(":")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            address = (host.strip("[]"), int(port))
            self._socket = socket.create_server(address, family=family, backlog=_BACKLOG)
        except OSError as error:
            raise OSError(f"cannot listen on {endpoint} (HTTP): {error.strerror or error}") from None
        self.host = host
        self.port = self._socket.getsockname()[1]
        self.max_connections = connection_cap(config.http_max_connections)
        limits = ConnectionLimits(self.max_connections, config.http_header_timeout)
        tls = config.tls
        uv_config = uvicorn.Config(
            build_app(handler, config, routes),
            http=strict_protocol(limits),
            ws="none",
            lifespan="off",
            loop="asyncio",
            interface="asgi3",
            log_config=None,
            access_log=False,
            server_header=False,
            timeout_keep_alive=config.http_keep_alive,  # type: ignore[arg-type]
            timeout_graceful_shutdown=2,
            backlog=_BACKLOG,
            h11_max_incomplete_event_size=_MAX_HEADER_BYTES,
            ssl_context_factory=(lambda *_: http_server_context(tls)) if tls is not None else None,
        )
        self._server = uvicorn.Server(uv_config)
        self._thread = threading.Thread(target=self._run, name="otel-blame-http", daemon=True)
        self._ready = threading.Event()

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def _run(self) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[self._socket]))
        except BaseException:  # pragma: no cover - logged, the process keeps its gRPC side
            log.exception("the HTTP receiver stopped")
        finally:
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        while not self._server.started and self._thread.is_alive():
            self._ready.wait(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()
