"""Logfire's GenAI spans (``logfire.instrument_openai`` and friends)."""

from __future__ import annotations

from .model import Convention


class Logfire(Convention):
    name = "logfire"
