"""uvicorn's h11 protocol, hardened against clients that hold connections or smuggle requests.

uvicorn parses HTTP/1.1 with h11 (strict framing: a body is read by its Content-Length or chunked
encoding, so bytes left after a refused request are never read as a request of their own). On
top of that, per connection:

- at most ``max_connections`` open connections: a connection past the cap is closed at once, so
  idle sockets cannot use up the process's file descriptors (the gRPC port shares them);
- ``header_timeout``: a request's headers (and the idle time before them) must arrive within it,
  counted from the start, not reset by each byte (a slowloris client sends one byte at a time);
- more than one ``Content-Length`` header is refused with 400, even with equal values (h11 merges
  equal duplicates; a proxy in front may not, which is how requests are smuggled).

The body-read timeout is the application's (see ``receivers.http``): it answers 408.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import h11
from h11._readers import READERS, _decode_header_lines, maybe_read_from_IDLE_client, request_line_re
from h11._util import LocalProtocolError, validate
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int
    header_timeout: float


def _strict_request_reader(buf: Any) -> h11.Request | None:
    """h11's request-head reader, refusing a repeated Content-Length before h11 merges it."""
    lines = buf.maybe_extract_lines()
    if lines is None:
        if buf.is_next_line_obviously_invalid_request_line():
            raise LocalProtocolError("illegal request line")
        return None
    if not lines:
        raise LocalProtocolError("no request line received")
    names = [bytes(line).split(b":", 1)[0].strip().lower() for line in lines[1:]]
    if names.count(b"content-length") > 1:
        raise LocalProtocolError("more than one Content-Length header")
    matches = validate(request_line_re, lines[0], "illegal request line: {!r}", lines[0])
    return h11.Request(headers=list(_decode_header_lines(lines[1:])), _parsed=True, **matches)


class _StrictConnection(h11.Connection):
    def _get_io_object(self, role: Any, event: Any, io_dict: Any) -> Any:
        reader = super()._get_io_object(role, event, io_dict)
        if io_dict is READERS and reader is maybe_read_from_IDLE_client:
            return _strict_request_reader
        return reader


def strict_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """An H11Protocol class bound to these limits (uvicorn takes a protocol class)."""

    class StrictH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.conn = _StrictConnection(h11.SERVER, self.conn._max_incomplete_event_size)
            self._head_deadline: asyncio.TimerHandle | None = None
            self._refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= limits.max_connections:
                self._refused = True
                self.transport = transport
                transport.close()
                log.debug("HTTP connection refused: %d open (limit)", len(self.connections))
                return
            super().connection_made(transport)
            self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_deadline()
            if self._refused:
                return
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle:  # a request's headers are complete
                self._cancel_head_deadline()

        def on_response_complete(self) -> None:
            cycle = self.cycle
            super().on_response_complete()
            if self.cycle is cycle and not self.transport.is_closing():
                self._arm_head_deadline()  # waiting for the next request (idle included)

        def _arm_head_deadline(self) -> None:
            self._cancel_head_deadline()
            self._head_deadline = self.loop.call_later(limits.header_timeout, self._head_timed_out)

        def _cancel_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _head_timed_out(self) -> None:
            self._head_deadline = None
            if self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a request is being served; its body has the application's timeout
            log.debug("HTTP connection from %s: no request headers in time; closing", self.client)
            self.transport.close()

    return StrictH11Protocol
