"""Which agent a step belongs to, from what the trace's telemetry says about agents.

Best first:
1. an attribute naming the agent on the step's span (``gen_ai.agent.name``, ``agent.name``), unless it
   is a stamp: a name no agent span of the trace carries, claimed inside agent spans of two or more
   other names (contrib's ``opentelemetry-instrumentation-openai-agents-v2`` writes its configured
   ``OpenAI Agent`` on every model and tool span, whichever agent made the call);
2. for a model call that ran in another graph node than its enclosing agent span, that node; for a
   step inside a tool that hands the work to another agent (CrewAI's delegation tools, which name
   it as their ``coworker`` argument), that agent;
3. the agent span the step ran in (the span itself, or its nearest agent ancestor): its name
   attribute, the name its span name carries (``invoke_agent Researcher``, ``researcher.run``),
   the name its manager gave it (smolagents lists its managed agents' names on the manager's run),
   else the class that ran it (``CodeAgent``, from ``CodeAgent.run``);
4. the graph node the span ran in (OpenInference ``graph.node.id``, LangGraph's ``langgraph_node``,
   LlamaIndex's ``current_agent_name``), on the span or an ancestor, else on the latest earlier
   sibling of either (a flat workflow's steps, the agent its last step named);
5. for a model call outside every agent span, the agent its system prompt opens by addressing ("You
   are X." / "Your name is X": the app's configuration of that agent, the only identity a client-only
   trace has).
Never a service or host name, and never a name read from the conversation. A span or method name
(``ChatCompletion``, ``openai.chat``, ``LiteLLMModel.__call__``) is never an agent: when nothing
names one, the builder names the step after the app's span it ran in, else "unnamed agent", and
counts it.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable, Sequence
from typing import Any

from .model import Convention, Kind, SpanView, TraceGraph
from .ours import is_declared_step
from .text import maybe_json

# "You are Researcher." / "You are the Coder, ..." / "Your name is Ada", as the prompt's opening words
_NAMED_IN_PROMPT = re.compile(
    r"^\s*(?i:you are (?:the |an? )?|your name is )(?P<name>[A-Z][\w-]*(?: [A-Z][\w-]*){0,3})",
)
# Span names that name code, not an agent: dotted or called methods, operation names.
_METHOD_LIKE = re.compile(r"[.()]|^(chat|invoke_agent|execute_tool|text_completion)\b")
_IDENTIFIER = re.compile(r"^[A-Za-z_][\w-]{0,63}$")
# a tool argument naming the agent the tool runs (CrewAI's "Delegate work to coworker" and "Ask question to
# coworker")
DELEGATION_ARGUMENTS = ("coworker",)


def first(conventions: Sequence[Convention], ask: str, view: SpanView) -> Any:
    """The first truthy answer the conventions give to ``ask`` about the span (a name, a list of
    managed agents), else None."""
    for convention in conventions:
        found = getattr(convention, ask)(view)
        if found:
            return found
    return None


def _declared_name(conventions: Sequence[Convention], view: SpanView) -> str | None:
    """The name an agent span declares: an attribute, the name in its span name, or a plain span name."""
    found = first(conventions, "agent_name", view) or first(conventions, "agent_span_name", view)
    if found:
        return found
    name = view.span.name.strip()
    return name if name and not _METHOD_LIKE.search(name) else None


def named_in_prompt(prompt: str, known: Iterable[str]) -> str | None:
    """The agent a system prompt opens by addressing ("You are Researcher." / "Your name is Ada"), as
    the trace spells it elsewhere when it does. A name further into the prompt is not the agent's: a
    prompt that quotes the task ("Earlier you were asked: ... You are Van Helsing") names a person."""
    match = _NAMED_IN_PROMPT.match(prompt)
    if match is None:
        return None
    name = match.group("name")
    return next((found for found in known if found.lower() == name.lower()), name)


class AgentResolver:
    """Resolves step agents for one trace; knows every agent name the trace declares."""

    def __init__(self, conventions: Sequence[Convention], graph: TraceGraph) -> None:
        self.conventions = conventions
        self.graph = graph
        self._agent_names: dict[bytes, str | None] = {}
        self._enclosing: dict[bytes, SpanView | None] = {}
        self._sibling_hints: dict[bytes, list[tuple[int, str]]] = {}
        self._delegations: dict[bytes, str | None] = {}

    @functools.cached_property
    def known(self) -> dict[str, None]:
        """Every agent name the trace declares, in span order: built only when a system prompt is read
        for the agent's name, which few steps need."""
        conventions = self.conventions
        known: dict[str, None] = {}
        for view in self.graph.views:
            found = self.agent_span_name(view) if view.kind == Kind.AGENT else None
            found = found or first(conventions, "agent_name", view) or first(conventions, "agent_hint", view)
            if found:
                known.setdefault(found, None)
        return known

    def enclosing_agent(self, view: SpanView) -> SpanView | None:
        """The span's nearest agent ancestor (the span itself is not one of its ancestors)."""
        if view.span_id not in self._enclosing:
            self._enclosing[view.span_id] = next(
                (a for a in self.graph.ancestors(view) if a.kind == Kind.AGENT), None
            )
        return self._enclosing[view.span_id]

    @functools.cached_property
    def top_agent(self) -> SpanView | None:
        """The earliest agent span with no agent span above it (the run the task was given to), found
        only when asked: a trace that declares its task and outcome never needs it."""
        tops = [
            view
            for view in self.graph.views
            if view.kind == Kind.AGENT and self.enclosing_agent(view) is None
        ]
        return min(tops, key=lambda view: view.span.start_time_unix_nano) if tops else None

    @functools.cached_property
    def agent_span_names(self) -> frozenset[str]:
        """The names the trace's agent spans give themselves."""
        return frozenset(
            name
            for view in self.graph.views
            if view.kind == Kind.AGENT and (name := self.agent_span_name(view))
        )

    @functools.cached_property
    def _claimed_inside(self) -> dict[str, set[str]]:
        """For each agent name a model or tool span claims, the names of the agent spans it is claimed
        inside."""
        found: dict[str, set[str]] = {}
        for view in self.graph.views:
            if view.kind in (None, Kind.AGENT) or is_declared_step(view):
                continue
            name = first(self.conventions, "agent_name", view)
            agent = self.enclosing_agent(view) if name else None
            inside = self.agent_span_name(agent) if agent is not None else None
            if name and inside:
                found.setdefault(name, set()).add(inside)
        return found

    def stamped(self, view: SpanView, name: str) -> bool:
        """Whether the agent name on a model or tool span is a stamp, not its agent: no agent span of the
        trace carries it, and spans claim it inside agent spans of two or more other names (an
        instrumentation's configured name on every call, whichever agent made it). A numbered step of
        otel-blame's own instrumentation names its agent, always."""
        if view.kind == Kind.AGENT or name in self.agent_span_names or is_declared_step(view):
            return False
        return len(self._claimed_inside.get(name, set()) - {name}) >= 2

    def delegated_to(self, view: SpanView) -> str | None:
        """The agent a tool span runs inside it: the coworker a delegation tool's arguments name."""
        if view.kind != Kind.TOOL:
            return None
        if view.span_id not in self._delegations:
            arguments = maybe_json(first(self.conventions, "tool_arguments", view))
            if not isinstance(arguments, dict):
                arguments = {}
            named = [arguments.get(key) for key in DELEGATION_ARGUMENTS]
            found = next((name.strip() for name in named if isinstance(name, str)), "")
            self._delegations[view.span_id] = found if _IDENTIFIER.match(found.replace(" ", "_")) else None
        return self._delegations[view.span_id]

    def owner(self, view: SpanView) -> SpanView | None:
        """The agent span a step ran in: the span itself when it is one, else its nearest agent ancestor."""
        return view if view.kind == Kind.AGENT else self.enclosing_agent(view)

    def agent_span_name(self, view: SpanView) -> str | None:
        """An agent span's name: declared, else given by its manager, else its class."""
        if view.span_id in self._agent_names:
            return self._agent_names[view.span_id]
        found = (
            _declared_name(self.conventions, view)
            or self._managed_name(view)
            or first(self.conventions, "agent_class", view)
        )
        self._agent_names[view.span_id] = found
        return found

    def _managed_name(self, view: SpanView) -> str | None:
        """The name the enclosing agent's run lists for the agent it manages that this span runs: the
        only one, or the one whose tools match, or the one whose name the sub-agent's task states."""
        manager = self.enclosing_agent(view)
        if manager is None:
            return None
        managed: list[tuple[str, str]] = first(self.conventions, "managed_agents", manager) or []
        if len(managed) == 1:
            return managed[0][0]
        if not managed:
            return None
        tools = first(self.conventions, "agent_tools", view)
        if tools:
            matching = [name for name, fingerprint in managed if fingerprint == tools]
            if len(matching) == 1:
                return matching[0]
        task = (first(self.conventions, "task_input", view) or "").lower()
        stated = [
            name for name, _ in managed if re.search(rf"(?<![\w-]){re.escape(name.lower())}(?![\w-])", task)
        ]
        return stated[0] if len(stated) == 1 else None

    def hint(self, view: SpanView) -> str | None:
        """The graph node or workflow agent the span ran in: from the span or its nearest ancestor
        that says; else, in a flat workflow whose steps are siblings (LlamaIndex's ``AgentWorkflow``),
        the one the latest earlier sibling of the span, or of its nearest ancestor, names."""
        lineage = (view, *self.graph.ancestors(view))
        for candidate in lineage:
            found = first(self.conventions, "agent_hint", candidate)
            if found:
                return found
        for candidate in lineage:
            found = self._preceding_hint(candidate)
            if found:
                return found
        return None

    def _preceding_hint(self, view: SpanView) -> str | None:
        parent = self.graph.parent(view)
        if parent is None:
            return None
        if parent.span_id not in self._sibling_hints:
            named = [
                (child.span.start_time_unix_nano, found)
                for child in self.graph.children.get(parent.span_id, [])
                if (found := first(self.conventions, "agent_hint", child))
            ]
            self._sibling_hints[parent.span_id] = sorted(named)
        named = self._sibling_hints[parent.span_id]
        position = bisect.bisect_left(named, (view.span.start_time_unix_nano, ""))
        return named[position - 1][1] if position else None

    def runs_apart(self, view: SpanView, node: str | None) -> bool:
        """An LLM span inside an agent span that ran in a graph node (``node``, its :meth:`hint`) of
        another name: a sub-agent's call inside a workflow-wide agent span (OpenLLMetry wraps a whole
        LangGraph run in one)."""
        agent = self.enclosing_agent(view)
        if agent is None:
            return False
        return bool(node) and node != (
            self.agent_span_name(agent) or first(self.conventions, "agent_hint", agent)
        )

    def resolve(self, view: SpanView) -> str | None:
        found = first(self.conventions, "agent_name", view)
        if found and not self.stamped(view, found):
            return found
        is_llm = view.kind == Kind.LLM
        node = self.hint(view) if is_llm else None  # an LLM span's node, looked up once
        if is_llm and self.runs_apart(view, node):
            return node
        inside_agent = False
        for candidate in (view, *self.graph.ancestors(view)):
            if candidate is not view and candidate.kind == Kind.TOOL:
                found = self.delegated_to(candidate)
                if found:
                    return found
            if candidate.kind == Kind.AGENT:
                inside_agent = True
                found = self.agent_span_name(candidate)
                if found:
                    return found
                break  # a nameless agent span does not borrow the name of the agent around it
            if candidate.kind == Kind.LLM and candidate is not view:
                found = first(self.conventions, "agent_name", candidate)
                if found and not self.stamped(candidate, found):
                    return found
        found = node if is_llm else self.hint(view)
        if found:
            return found
        if not inside_agent:
            prompt = first(self.conventions, "system_prompt", view)
            if prompt:
                return named_in_prompt(prompt, self.known)
        return None

    def caller(self, view: SpanView) -> str | None:
        """When nothing names an agent: the nearest enclosing span named like an operation of the app
        (``answer_question``), which is where the step's code ran."""
        for ancestor in self.graph.ancestors(view):
            name = ancestor.span.name.strip()
            if name and _IDENTIFIER.match(name) and not _METHOD_LIKE.search(name):
                return name
        return None
