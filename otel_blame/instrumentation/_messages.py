"""Messages as span content: text of anything, capped and redacted; agent names; roles; the
``gen_ai.output.messages`` JSON.

Anything is accepted (None, bytes, dicts, lists, objects); the text is always a string no
longer than the cap plus a visible marker. Redaction runs on a window a little wider than the
cap so a secret straddling the cut is still masked before the cut is made. Every framework
module reads messages through these, so names and roles come out the same everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, NamedTuple

from otel_blame.instrumentation._settings import CaptureSettings

# How far past the cap redaction looks, so a secret crossing the cut is masked whole.
_REDACTION_MARGIN_CHARS = 512


class PreparedContent(NamedTuple):
    text: str
    truncated: bool = False
    redacted: bool = False


def truncation_marker(total_bytes: int) -> str:
    return f"…[otel-blame: truncated; the message had {total_bytes} bytes]"


def to_text(value: Any) -> str:
    """Best-effort text of any value; never raises for ordinary Python data."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, dict | list | tuple):
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            return repr(value)
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def _cut_to_bytes(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits ``limit`` bytes."""
    if len(text) * 4 <= limit:
        return text
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", errors="ignore")


def prepare(value: Any, settings: CaptureSettings) -> PreparedContent:
    """Text for a span attribute: stringified, redacted, then capped at ``max_content_bytes``."""
    text = to_text(value)
    limit = settings.max_content_bytes
    # A character is at least one UTF-8 byte, so ``limit`` characters always cover the byte cap.
    windowed = len(text) > limit + _REDACTION_MARGIN_CHARS
    window = text[: limit + _REDACTION_MARGIN_CHARS] if windowed else text
    redacted = False
    if settings.redactor is not None:
        outcome = settings.redactor.redact(window)
        window, redacted = outcome.text, outcome.changed
    kept = _cut_to_bytes(window, limit)
    if kept is window and not windowed:
        return PreparedContent(window, truncated=False, redacted=redacted)
    total = len(text.encode("utf-8", errors="replace"))
    return PreparedContent(kept + truncation_marker(total), truncated=True, redacted=redacted)


class StepKind(StrEnum):
    """What a step is (``otel_blame.step.kind``); the same values as ``otel_blame.trajectory.StepKind``,
    kept here so that instrumenting an app needs none of the processor's dependencies (pydantic)."""

    MESSAGE = "message"
    TOOL = "tool"
    CODE_EXECUTION = "code_execution"


# --- agent names and roles ----------------------------------------------------------------------

# the roles gen_ai.output.messages knows; any other speaker label is kept in otel_blame.step.role
MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool"})
# LangChain message types -> roles
LANGCHAIN_ROLES = {"ai": "assistant", "human": "user", "system": "system", "tool": "tool", "function": "tool"}


def agent_name(value: Any) -> str:
    """A usable agent name from anything (None, bytes, objects with ``.name``, numbers)."""
    if type(value) is str and 0 < len(value) <= 256 and value.isidentifier():
        return value  # the common case, already clean
    if isinstance(value, str):
        name = value
    elif value is None:
        name = ""
    elif isinstance(value, bytes | bytearray):
        name = bytes(value).decode("utf-8", errors="replace")
    elif isinstance(getattr(value, "name", None), str):
        name = value.name
    else:
        name = to_text(value)
    name = " ".join(name.split())[:256]
    return name or "unknown"


def name_of(agent: Any, default: str = "agent") -> str:
    """The ``.name`` of a framework's agent object as text, else ``default``."""
    return to_text(getattr(agent, "name", None)) or default


# --- gen_ai.output.messages ---------------------------------------------------------------------

# one encoder for all: json.dumps with non-default options builds a new encoder per call
_encode_json = json.JSONEncoder(ensure_ascii=False).encode
# the string encoder that encoder uses; the text-only fast path below joins its pieces by hand
_encode_string = json.encoder.encode_basestring


def output_messages(
    role: str,
    text: str | None,
    tool_calls: Sequence[Mapping[str, Any]] | None,
    tool_call_id: str | None,
    settings: CaptureSettings,
) -> tuple[str, bool, bool]:
    """The ``gen_ai.output.messages`` JSON (role, parts) and whether anything was cut or masked.
    The speaker is the span's ``gen_ai.agent.name``: not repeated in the JSON."""
    if not tool_calls:
        return _plain_output_messages(role, text, tool_call_id), False, False
    parts: list[dict[str, Any]] = []
    truncated = redacted = False
    if text is not None:
        if role == "tool" and tool_call_id:
            parts.append({"type": "tool_call_response", "id": tool_call_id, "response": text})
        else:
            parts.append({"type": "text", "content": text})
    for call in tool_calls or ():
        if not isinstance(call, Mapping):
            call = {"name": "unknown", "arguments": call}
        function = call.get("function") if isinstance(call.get("function"), Mapping) else call
        arguments = prepare(function.get("arguments", ""), settings)
        truncated |= arguments.truncated
        redacted |= arguments.redacted
        part = {"type": "tool_call", "name": agent_name(function.get("name")), "arguments": arguments.text}
        if call.get("id") is not None:
            part["id"] = to_text(call.get("id"))
        parts.append(part)
    return _encode_json([{"role": role, "parts": parts}]), truncated, redacted


def _plain_output_messages(role: str, text: str | None, tool_call_id: str | None) -> str:
    """What ``_encode_json`` makes of a message without tool calls (same separators, same string
    escaping), built without the general encoder's per-call set-up: this runs on every message."""
    if text is None:
        part = ""
    elif role == "tool" and tool_call_id:
        part = (
            f'{{"type": "tool_call_response", "id": {_encode_string(tool_call_id)}, '
            f'"response": {_encode_string(text)}}}'
        )
    else:
        part = f'{{"type": "text", "content": {_encode_string(text)}}}'
    return f'[{{"role": {_encode_string(role)}, "parts": [{part}]}}]'
