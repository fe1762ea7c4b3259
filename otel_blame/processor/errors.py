"""What a receiver tells a sender when a request is not accepted."""

from __future__ import annotations


class IngestError(Exception):
    """Base: the request was not stored; nothing of it will be delivered."""


class InvalidRequest(IngestError):
    """Malformed or unsupported: do not retry (gRPC INVALID_ARGUMENT, HTTP 400)."""


class Backpressure(IngestError):
    """Full: retry after ``retry_after`` seconds (gRPC RESOURCE_EXHAUSTED + RetryInfo, HTTP 503)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NotAccepting(IngestError):
    """Starting or shutting down: retry (gRPC UNAVAILABLE, HTTP 503)."""


class VerdictNotFound(Exception):
    """A verdict names a trace that is neither being assembled nor among the retained ones."""


class Accepted:
    """A request was stored; ``rejected`` items in it were invalid and left out (OTLP partial success)."""

    __slots__ = ("rejected", "message")

    def __init__(self, rejected: int = 0, message: str = "") -> None:
        self.rejected = rejected
        self.message = message
