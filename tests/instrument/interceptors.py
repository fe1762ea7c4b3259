"""Interceptors for the message-path tests: one that rewrites what its rules match, one that raises."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from otel_blame.instrumentation.interception import OutgoingMessage


class Rewriter:
    """Replaces ``old`` by ``new`` in the text of the first outgoing message of ``kind`` (from
    ``agent``, when given) that contains it, once per rule; keeps every message it saw."""

    def __init__(self, *rules: tuple[str, str | None, str, str]) -> None:
        self.rules = list(rules)
        self.seen: list[OutgoingMessage] = []
        self.changed: list[OutgoingMessage] = []

    def __call__(self, outgoing: OutgoingMessage) -> OutgoingMessage | None:
        self.seen.append(outgoing)
        for rule in self.rules:
            kind, agent, old, new = rule
            if outgoing.kind == kind and agent in (None, outgoing.agent) and old in outgoing.text:
                self.rules.remove(rule)
                changed = dataclasses.replace(outgoing, text=outgoing.text.replace(old, new))
                self.changed.append(changed)
                return changed
        return None

    @property
    def unused(self) -> list[tuple[str, str | None, str, str]]:
        return self.rules


def raising(outgoing: OutgoingMessage) -> Any:
    raise RuntimeError("a broken interceptor")


def sent_to_model(llm: Any, call: int) -> str:
    """Everything the app sent the scripted model in its ``call``-th request (0-based), as text."""
    return json.dumps(llm.requests[call], ensure_ascii=False)
