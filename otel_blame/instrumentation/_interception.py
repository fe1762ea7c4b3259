"""Kept importable: the interception point is :mod:`otel_blame.instrumentation.interception`."""

from otel_blame.instrumentation.interception import (
    MessageInterceptor,
    OutgoingMessage,
    current_interceptor,
    intercept_messages,
)

__all__ = ["MessageInterceptor", "OutgoingMessage", "current_interceptor", "intercept_messages"]
