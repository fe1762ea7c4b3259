"""Sending payloads downstream over OTLP/gRPC or OTLP/HTTP, retrying with exponential backoff.

Items wait in memory (and in the write-ahead log) until the downstream acknowledges them; only
then does ``on_delivered`` release their log rows. Payloads are already wire-encoded export
requests, so a batch is their concatenation and nothing is parsed or re-encoded here. A payload
the downstream rejects as permanently invalid (OTLP: a non-retryable status) is retried alone,
and if rejected again it is counted and released, as the OTLP specification prescribes.

A downstream that takes no OTLP logs at all (Jaeger and Tempo receive traces only; a Collector
without a logs pipeline answers gRPC ``UNIMPLEMENTED``, HTTP 404) costs one refused request: log
records are then released unsent (counted in ``refused_log_records``, one warning) for
``LOGS_RECHECK_SECONDS``, after which the next one asks again. Spans never wait for logs.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import grpc

from otel_blame.processor.config import ClientTLSConfig, ExporterConfig

log = logging.getLogger(__name__)

TRACES, LOGS = "traces", "logs"
_GRPC_METHODS = {
    TRACES: "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    LOGS: "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
}
_HTTP_PATHS = {TRACES: "/v1/traces", LOGS: "/v1/logs"}
_RETRYABLE_GRPC = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.DATA_LOSS,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNAUTHENTICATED,
}
_RETRYABLE_HTTP = {408, 429, 500, 502, 503, 504}
# the downstream has no such service: it takes no OTLP logs (or traces) at all, whatever the payload
_UNSUPPORTED_GRPC = {grpc.StatusCode.UNIMPLEMENTED}
_UNSUPPORTED_HTTP = {404, 405, 501}
LOGS_RECHECK_SECONDS = 300.0  # a downstream that took no logs is asked again after this long


@dataclass(slots=True)
class ExportItem:
    """A payload to send downstream; ``refs``: the write-ahead log rows it releases on delivery."""

    kind: str
    payload: bytes
    refs: list[int]
    items: int


class ExportFailed(Exception):
    """``unsupported``: the downstream has no service for this kind of payload (not retryable)."""

    def __init__(
        self, message: str, *, retryable: bool, retry_after: float | None = None, unsupported: bool = False
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.unsupported = unsupported


class _GRPCTransport:
    def __init__(self, config: ExporterConfig) -> None:
        options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
        endpoint = config.endpoint or ""
        if config.tls is not None:
            credentials = _grpc_credentials(config.tls)
            if config.tls.server_name:
                options.append(("grpc.ssl_target_name_override", config.tls.server_name))
            self._channel = grpc.secure_channel(endpoint, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(endpoint, options=options)
        self._calls = {
            kind: self._channel.unary_unary(method, request_serializer=None, response_deserializer=None)
            for kind, method in _GRPC_METHODS.items()
        }
        self._metadata = [(key.lower(), value.get_secret_value()) for key, value in config.headers.items()]
        self._timeout = config.timeout

    def send(self, kind: str, payload: bytes) -> None:
        try:
            self._calls[kind](payload, timeout=self._timeout, metadata=self._metadata or None)
        except grpc.RpcError as error:
            code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
            raise ExportFailed(
                f"gRPC {code.name}", retryable=code in _RETRYABLE_GRPC, unsupported=code in _UNSUPPORTED_GRPC
            ) from None

    def close(self) -> None:
        self._channel.close()


def _grpc_credentials(tls: ClientTLSConfig) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca_file.read_bytes() if tls.ca_file else None,
        private_key=tls.key_file.read_bytes() if tls.key_file else None,
        certificate_chain=tls.cert_file.read_bytes() if tls.cert_file else None,
    )


class _HTTPTransport:
    """One persistent connection per exporter worker (used from one thread at a time); ``close`` closes
    every worker's, from whichever thread calls it."""

    def __init__(self, config: ExporterConfig) -> None:
        endpoint = config.endpoint or ""
        url = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        self._https = url.scheme == "https"
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or (443 if self._https else 80)
        self._base = url.path.rstrip("/")
        self._context: ssl.SSLContext | None = None
        if self._https:
            tls = config.tls or ClientTLSConfig()
            self._context = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
            if tls.cert_file and tls.key_file:
                self._context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
        self._headers = {key: value.get_secret_value() for key, value in config.headers.items()}
        self._timeout = config.timeout
        self._local = threading.local()
        self._open: set[http.client.HTTPConnection] = set()  # every worker's, for close()
        self._open_lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            if self._https:
                connection = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout, context=self._context
                )
            else:
                connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            self._local.connection = connection
            with self._open_lock:
                self._open.add(connection)
        return connection

    def send(self, kind: str, payload: bytes) -> None:
        body = gzip.compress(payload, compresslevel=1)
        headers = {
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "gzip",
            **self._headers,
        }
        connection = self._connection()
        try:
            connection.request("POST", self._base + _HTTP_PATHS[kind], body=body, headers=headers)
            response = connection.getresponse()
            response.read()
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            self._local.connection = None
            with self._open_lock:
                self._open.discard(connection)
            raise ExportFailed(f"HTTP {type(error).__name__}: {error}", retryable=True) from None
        if 200 <= response.status < 300:
            return
        retry_after = response.getheader("Retry-After")
        raise ExportFailed(
            f"HTTP {response.status}",
            retryable=response.status in _RETRYABLE_HTTP,
            retry_after=float(retry_after) if retry_after and retry_after.isdigit() else None,
            unsupported=response.status in _UNSUPPORTED_HTTP,
        )

    def close(self) -> None:
        # The workers' connections, not only this thread's (a thread-local seen from the closing thread
        # holds none: their sockets stayed open until garbage collection).
        with self._open_lock:
            connections, self._open = self._open, set()
        for connection in connections:
            connection.close()


class OTLPExporter:
    """``submit`` queues; worker threads batch, send, retry and report deliveries."""

    def __init__(self, config: ExporterConfig, on_delivered: Callable[[list[int]], None]) -> None:
        if not config.endpoint:
            raise ValueError("exporter.endpoint: the downstream endpoint is required")
        self._config = config
        self._on_delivered = on_delivered
        self._transport = _GRPCTransport(config) if config.protocol == "grpc" else _HTTPTransport(config)
        self._queue: deque[ExportItem] = deque()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._stopping = False
        self.exported_spans = 0
        self.exported_log_records = 0
        self.exported_bytes = 0
        self.failed_attempts = 0
        self.rejected_items = 0
        self.refused_log_records = 0
        self.last_error: str | None = None
        self._logs_refused_at: float | None = None  # when the downstream last said it takes no logs
        self._threads = [
            threading.Thread(target=self._run, name=f"otel-blame-export-{n}", daemon=True)
            for n in range(config.workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, kind: str, payload: bytes, refs: list[int], items: int) -> None:
        self.consume(ExportItem(kind, payload, refs, items))

    def consume(self, item: ExportItem) -> None:
        """The end of the chain (a :class:`~otel_blame.processor.stage.Consumer`): queue for export;
        log records for a downstream that takes none are released at once, unsent."""
        if item.kind == LOGS and not self.accepts_logs():
            with self._cond:
                self.refused_log_records += item.items
            self._on_delivered(item.refs)
            return
        with self._cond:
            self._queue.append(item)
            self._cond.notify()

    def accepts_logs(self) -> bool:
        """False while the downstream is known to take no OTLP logs (asked again after a while)."""
        refused_at = self._logs_refused_at
        return refused_at is None or time.monotonic() - refused_at >= LOGS_RECHECK_SECONDS

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + self._in_flight

    def flush(self, timeout: float) -> bool:
        """Wait until everything queued was delivered; False when time ran out."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.1))
        return True

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(5)
        self._transport.close()

    def _take_batch(self) -> list[ExportItem] | None:
        with self._cond:
            while not self._queue:
                if self._stopping:
                    return None
                self._cond.wait(0.5)
            first = self._queue.popleft()
            batch, size = [first], len(first.payload)
            while self._queue and self._queue[0].kind == first.kind:
                following = self._queue[0]
                if size + len(following.payload) > self._config.max_batch_bytes:
                    break
                batch.append(self._queue.popleft())
                size += len(following.payload)
            self._in_flight += len(batch)
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            try:
                self._deliver(batch)
            finally:
                with self._cond:
                    self._in_flight -= len(batch)
                    self._cond.notify_all()

    def _refuse_logs(self, batch: list[ExportItem], error: ExportFailed) -> None:
        """The downstream takes no logs: these and the next ones (for a while) are released unsent."""
        with self._cond:
            first = (
                self._logs_refused_at is None
                or time.monotonic() - self._logs_refused_at >= LOGS_RECHECK_SECONDS
            )
            self._logs_refused_at = time.monotonic()
            self.refused_log_records += sum(item.items for item in batch)
        if first:
            log.warning(
                "downstream %s takes no OTLP logs (%s): log records are not sent for the next %.0f s "
                "(the spans carry everything; gen_ai.evaluation.result stays a span event)",
                self._config.endpoint,
                error,
                LOGS_RECHECK_SECONDS,
            )
        self._on_delivered([ref for item in batch for ref in item.refs])

    def _deliver(self, batch: list[ExportItem]) -> None:
        backoff = self._config.initial_backoff
        pending = [batch]
        while pending:
            current = pending.pop(0)
            payload = current[0].payload if len(current) == 1 else b"".join(item.payload for item in current)
            try:
                self._transport.send(current[0].kind, payload)
            except ExportFailed as error:
                with self._cond:
                    self.failed_attempts += 1
                    self.last_error = str(error)
                if error.unsupported and current[0].kind == LOGS:
                    self._refuse_logs(current, error)
                    continue
                if not error.retryable:
                    if len(current) > 1:  # find the item the downstream refuses, deliver the rest
                        pending[:0] = [[item] for item in current]
                        continue
                    log.error(
                        "downstream rejected a %s payload permanently (%s); dropping it",
                        current[0].kind,
                        error,
                    )
                    with self._cond:
                        self.rejected_items += current[0].items
                    self._on_delivered([ref for item in current for ref in item.refs])
                    continue
                if self._stopping:
                    return  # stays in the write-ahead log for the next start
                delay = min(error.retry_after or backoff, self._config.max_backoff)
                log.warning(
                    "export to %s failed (%s); retrying in %.1f s", self._config.endpoint, error, delay
                )
                with self._cond:
                    self._cond.wait_for(lambda: self._stopping, timeout=delay)
                backoff = min(backoff * 2, self._config.max_backoff)
                pending.insert(0, current)
                continue
            backoff = self._config.initial_backoff
            with self._cond:
                for item in current:
                    if item.kind == TRACES:
                        self.exported_spans += item.items
                    else:
                        self.exported_log_records += item.items
                self.exported_bytes += len(payload)
            self._on_delivered([ref for item in current for ref in item.refs])
