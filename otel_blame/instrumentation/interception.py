"""The interception point of the message path: a caller may replace a message before it is sent.

Every framework hook hands each outgoing agent message, tool call and tool result to the installed
:class:`MessageInterceptor` (through :func:`offer`) before the recipient or the tool gets it. What
the interceptor returns (a ``dataclasses.replace`` copy with another ``text`` or ``tool_name``) is
what the hook applies to the framework's own object, so the recipient really gets the change and
the recorded step shows it. ``otel-blame inject`` uses this to plant one fault per run. With no
interceptor installed (the normal case) the path costs one attribute read. An interceptor that
raises is ignored (the message goes out unchanged), as every other instrumentation error is.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from otel_blame.instrumentation._safety import HOOK_ERRORS

# the kinds of outgoing messages (OutgoingMessage.kind)
MESSAGE = "message"
TOOL = "tool"
CODE_EXECUTION = "code_execution"
TOOL_CALL = "tool_call"
HANDOFF = "handoff"


@dataclass(frozen=True)
class OutgoingMessage:
    """One message about to leave ``agent``; ``step`` is the index it will get (None outside a task)."""

    agent: str
    step: int | None
    kind: str  # message | tool | code_execution | tool_call | handoff
    text: str  # the message; for tool / code_execution the result; for tool_call / handoff the arguments JSON
    message: Any  # the framework's own object (read-only for interceptors)
    tool_name: str | None = None  # the tool called (tool_call / tool) or the handoff's transfer tool
    framework: str = ""  # autogen | ag2 | agentchat | openai_agents | langgraph | crewai | api


class MessageInterceptor(Protocol):
    def __call__(self, outgoing: OutgoingMessage) -> OutgoingMessage | None:
        """None: send it unchanged; else a ``dataclasses.replace(outgoing, text=..., tool_name=...)``."""


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


def offer(outgoing: OutgoingMessage) -> OutgoingMessage | None:
    """What the installed interceptor makes of ``outgoing``: a changed copy, or None (unchanged, no
    interceptor, an interceptor that raised or returned something else than an OutgoingMessage)."""
    interceptor = _SLOT.interceptor
    if interceptor is None:
        return None
    try:
        changed = interceptor(outgoing)
    except Exception:
        HOOK_ERRORS.record("intercept")
        return None
    if not isinstance(changed, OutgoingMessage):
        return None
    if changed.text == outgoing.text and changed.tool_name == outgoing.tool_name:
        return None
    return changed
