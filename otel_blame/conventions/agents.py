"""Which agent a step belongs to, from whatever the trace's conventions give.

Best first: an attribute naming the agent on the span; an agent span's own name; the nearest
ancestor agent; the graph node the span ran in (OpenInference ``graph.node.id``, LangGraph's
``langgraph_node``) on the span or an ancestor; an agent named in the LLM call's system prompt.
A span or method name (``ChatCompletion``, ``openai.chat``, ``researcher._execute_core``) is
never an agent: when nothing names one, the caller falls back to the service name and counts it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .model import Convention, Kind, SpanView, TraceGraph

# "You are Researcher." / "You are the Coder, ..." / "Your name is Ada" / "name: Ada"
_NAMED_IN_PROMPT = re.compile(
    r"(?i:\byou are (?:the |an? )?|\byour name is |\bname:\s*)"
    r"(?P<name>[A-Z][\w-]*(?: [A-Z][\w-]*){0,3})",
)
# Span names that name code, not an agent: dotted or called methods, operation names.
_METHOD_LIKE = re.compile(r"[.()]|^(chat|invoke_agent|execute_tool|text_completion)\b")


def first(conventions: Sequence[Convention], ask: str, view: SpanView) -> str | None:
    for convention in conventions:
        found = getattr(convention, ask)(view)
        if found:
            return found
    return None


def _own_name(conventions: Sequence[Convention], view: SpanView) -> str | None:
    found = first(conventions, "agent_name", view)
    if found or view.kind != Kind.AGENT:
        return found
    found = first(conventions, "agent_span_name", view)
    if found:
        return found
    name = view.span.name.strip()
    return name if name and not _METHOD_LIKE.search(name) else None


def named_in_prompt(prompt: str, known: Iterable[str]) -> str | None:
    """The agent a system prompt speaks to: a name known from elsewhere in the trace that it
    mentions (earliest mention wins), else the name in "You are X" / "Your name is X"."""
    lowered = prompt.lower()
    best: tuple[int, str] | None = None
    for name in known:
        match = re.search(rf"(?<!\w){re.escape(name.lower())}(?!\w)", lowered)
        if match and (best is None or match.start() < best[0]):
            best = (match.start(), name)
    if best is not None:
        return best[1]
    match = _NAMED_IN_PROMPT.search(prompt)
    return match.group("name") if match else None


class AgentResolver:
    """Resolves step agents for one trace; knows every agent name the trace mentions."""

    def __init__(self, conventions: Sequence[Convention], graph: TraceGraph) -> None:
        self.conventions = conventions
        self.graph = graph
        self.known: dict[str, None] = {}
        for view in graph.views:
            found = _own_name(conventions, view) or first(conventions, "agent_hint", view)
            if found:
                self.known.setdefault(found, None)

    def hint(self, view: SpanView) -> str | None:
        """The graph node the span ran in, from the span or its nearest ancestor that says."""
        for candidate in (view, *self.graph.ancestors(view)):
            found = first(self.conventions, "agent_hint", candidate)
            if found:
                return found
        return None

    def runs_apart(self, view: SpanView) -> bool:
        """An LLM span inside an agent span that ran in a graph node of another name: a sub-agent's
        call inside a workflow-wide agent span (OpenLLMetry wraps a whole LangGraph run in one)."""
        agent = next((a for a in self.graph.ancestors(view) if a.kind == Kind.AGENT), None)
        if agent is None:
            return False
        node = self.hint(view)
        return bool(node) and node != (
            _own_name(self.conventions, agent) or first(self.conventions, "agent_hint", agent)
        )

    def resolve(self, view: SpanView) -> str | None:
        found = _own_name(self.conventions, view)
        if found:
            return found
        if view.kind == Kind.LLM and self.runs_apart(view):
            return self.hint(view)
        for ancestor in self.graph.ancestors(view):
            if ancestor.kind in (Kind.AGENT, Kind.LLM):
                found = _own_name(self.conventions, ancestor)
                if found:
                    return found
        found = first(self.conventions, "agent_hint", view)
        if found:
            return found
        for ancestor in self.graph.ancestors(view):
            found = first(self.conventions, "agent_hint", ancestor)
            if found:
                return found
        prompt = first(self.conventions, "system_prompt", view)
        if prompt:
            return named_in_prompt(prompt, self.known)
        return None
