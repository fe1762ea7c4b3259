"""Turn whatever an app hands us into safe span content: text, capped, redacted.

Anything is accepted (None, bytes, dicts, lists, objects); the result is always a string no
longer than the cap plus a visible marker. Redaction runs on a window a little wider than the
cap so a secret straddling the cut is still masked before the cut is made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from otel_blame.instrument.settings import CaptureSettings

# How far past the cap redaction looks, so a secret crossing the cut is masked whole.
_REDACTION_MARGIN_CHARS = 512


@dataclass(frozen=True)
class PreparedContent:
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
