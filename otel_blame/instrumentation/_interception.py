"""A hook on the message path: lets a caller replace a message before it is sent and recorded.

Framework hooks that sit where a message leaves its agent (classic ``autogen``'s
``_process_message_before_send``) hand each outgoing message to the installed
:class:`MessageInterceptor`; what it returns is what the recipient receives and what becomes the
step. ``otel-blame inject`` uses this to plant one fault per run. With no interceptor installed
(the normal case) the hook costs one attribute read. An interceptor that raises is ignored (the
message goes out unchanged), as every other instrumentation error is.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class OutgoingMessage:
    """One message about to leave ``agent``; ``step`` is the index it will get (None outside a task)."""

    agent: str
    step: int | None
    kind: str  # message | tool | code_execution
    text: str
    message: Any  # the framework's own object (a str or a dict for autogen)


class MessageInterceptor(Protocol):
    def __call__(self, outgoing: OutgoingMessage) -> Any:
        """Return the message to send instead, or None to send it unchanged."""


class _Slot:
    def __init__(self) -> None:
        self.interceptor: MessageInterceptor | None = None
        self.lock = threading.Lock()


_SLOT = _Slot()


def current_interceptor() -> MessageInterceptor | None:
    return _SLOT.interceptor


@contextlib.contextmanager
def intercept_messages(interceptor: MessageInterceptor) -> Iterator[None]:
    """Install ``interceptor`` process-wide for the ``with`` block (one at a time)."""
    with _SLOT.lock:
        if _SLOT.interceptor is not None:
            raise RuntimeError("a message interceptor is already installed")
        _SLOT.interceptor = interceptor
    try:
        yield
    finally:
        with _SLOT.lock:
            _SLOT.interceptor = None
