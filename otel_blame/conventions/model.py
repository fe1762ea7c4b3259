"""What the adapters and the builder share: a decoded span, its kind, and the trace's parent graph."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_blame import semconv as sc

_MAX_ANCESTRY = 10_000
TASK_KEYS = (
    sc.TASK_NAME,
    sc.TASK_INPUT,
    sc.TASK_EXPECTED_OUTPUT,
    sc.TASK_FINAL_OUTPUT,
    sc.TASK_OUTCOME,
    sc.TASK_OUTCOME_REASON,
)


class Kind(StrEnum):
    """What a span is to the builder."""

    AGENT = "agent"
    TOOL = "tool"
    CODE = "code"
    LLM = "llm"
    WORKFLOW = "workflow"
    GROUP = "group"  # a span that groups one step's model call with what it set off (smolagents' "Step N")


class Rank(IntEnum):
    """When conventions disagree about a span, the lowest rank wins (an explicit step kind first)."""

    DECLARED = 0
    AGENT = 1
    TOOL = 2
    CODE = 3
    INDEXED = 4
    LLM = 5
    WORKFLOW = 6
    GROUP = 7


Vote = tuple[Rank, Kind]


@dataclass
class SpanView:
    """A span with its attributes (and its resource's) decoded once."""

    span: Span
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)
    kind: Kind | None = None
    logs: list[LogRecord] = field(default_factory=list)

    @property
    def span_id(self) -> bytes:
        return self.span.span_id

    @property
    def parent_id(self) -> bytes:
        return self.span.parent_span_id

    @property
    def has_task(self) -> bool:
        return any(key in self.attributes for key in TASK_KEYS)


class Convention:
    """One instrumentation's dialect. Every method answers for one span, or None when the span
    says nothing in this dialect; the builder asks the conventions in a fixed order."""

    name = "convention"

    def vote(self, view: SpanView) -> Vote | None:
        """What this span is, with how strongly the dialect says so."""
        return None

    def agent_name(self, view: SpanView) -> str | None:
        """The agent this span explicitly belongs to (an attribute naming it)."""
        return None

    def agent_span_name(self, view: SpanView) -> str | None:
        """For a span of kind AGENT without an explicit name: the name its span name carries."""
        return None

    def agent_class(self, view: SpanView) -> str | None:
        """For a span of kind AGENT named after the class that ran it (``CodeAgent.run``): the class."""
        return None

    def managed_agents(self, view: SpanView) -> list[tuple[str, str]]:
        """The agents an agent span manages, as (name, a fingerprint of its tools or ""), in order."""
        return []

    def agent_tools(self, view: SpanView) -> str | None:
        """An agent span's tools as one sorted, comma-separated string (to tell managed agents apart)."""
        return None

    def agent_hint(self, view: SpanView) -> str | None:
        """A weaker identity: the graph node or framework step this span ran in."""
        return None

    def system_prompt(self, view: SpanView) -> str | None:
        """The system prompt an LLM span sent, where the dialect records it."""
        return None

    def tool_name(self, view: SpanView) -> str | None:
        return None

    def tool_output(self, view: SpanView) -> tuple[str, str] | None:
        """A tool or code span's result, with its role."""
        return None

    def output(self, view: SpanView) -> tuple[str, str | None] | None:
        """The message a span produced, with its role."""
        return None

    def tool_arguments(self, view: SpanView) -> str | None:
        """What a tool span was called with, as text (JSON for structured arguments)."""
        return None

    def observation(self, view: SpanView) -> str | None:
        """A grouping span's own output as plain text: what its step's action returned (a code run's
        logs), None when it records nothing or a framework's structured state."""
        return None

    def task_name(self, root: SpanView) -> str | None:
        return None

    def task_input(self, root: SpanView) -> str | None:
        return None

    def task_output(self, root: SpanView) -> str | None:
        return None

    def is_error(self, view: SpanView) -> bool:
        return False


class TraceGraph:
    """Spans of one trace by id, with parent lookups that survive cycles and missing parents."""

    def __init__(self, views: list[SpanView]) -> None:
        self.by_id: dict[bytes, SpanView] = {}
        self.duplicates = 0
        for view in views:
            if view.span_id in self.by_id:
                self.duplicates += 1
                continue
            self.by_id[view.span_id] = view
        self.views = list(self.by_id.values())
        self.children: dict[bytes, list[SpanView]] = {}
        for view in self.views:
            parent = self.parent(view)
            if parent is not None:
                self.children.setdefault(parent.span_id, []).append(view)

    def parent(self, view: SpanView) -> SpanView | None:
        if not view.parent_id or view.parent_id == view.span_id:
            return None
        return self.by_id.get(view.parent_id)

    def ancestors(self, view: SpanView) -> Iterable[SpanView]:
        seen = {view.span_id}
        current = self.parent(view)
        while current is not None and current.span_id not in seen and len(seen) < _MAX_ANCESTRY:
            yield current
            seen.add(current.span_id)
            current = self.parent(current)

    def descendants(self, view: SpanView) -> Iterable[SpanView]:
        stack, seen = list(self.children.get(view.span_id, [])), {view.span_id}
        while stack:
            current = stack.pop()
            if current.span_id in seen:
                continue
            seen.add(current.span_id)
            yield current
            stack.extend(self.children.get(current.span_id, []))

    def root(self) -> SpanView | None:
        if not self.views:
            return None
        candidates = [view for view in self.views if self.parent(view) is None]
        pool = candidates or self.views

        def rank(view: SpanView) -> tuple:
            return (
                not view.has_task,
                view.kind != Kind.WORKFLOW,
                bool(view.parent_id),  # a true root before an orphan
                view.span.start_time_unix_nano,
                -(view.span.end_time_unix_nano - view.span.start_time_unix_nano),
            )

        return min(pool, key=rank)
