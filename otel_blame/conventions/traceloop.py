"""OpenLLMetry (Traceloop): ``traceloop.span.kind`` workflow/agent/task/tool spans with
``traceloop.entity.*``, and LLM spans (``llm.request.type``) with ``gen_ai.prompt.{i}.*`` and
``gen_ai.completion.{i}.*``. Its LlamaIndex instrumentation makes every workflow step a task span: one
that calls a tool says so with ``tool.name`` and ``tool.arguments`` (a tool step, its
``ToolCallResult`` the output), and the agent a step works for is named only in the workflow events
(:mod:`.llamaindex`)."""

from __future__ import annotations

from otel_blame import semconv as sc

from .llamaindex import current_agent, tool_call_result, tool_output_text
from .model import Convention, Kind, Rank, SpanView, Vote
from .openinference import langgraph_node
from .text import messages_text, text

_ASSOCIATION = "traceloop.association.properties."
_TOOL_NAME = "tool.name"  # on the task span of a tool call (LlamaIndex's call_tool step)
_TOOL_ARGUMENTS = "tool.arguments"

_KINDS: dict[str, Vote] = {
    sc.TRACELOOP_KIND_AGENT: (Rank.AGENT, Kind.AGENT),
    sc.TRACELOOP_KIND_TOOL: (Rank.TOOL, Kind.TOOL),
    sc.TRACELOOP_KIND_WORKFLOW: (Rank.WORKFLOW, Kind.WORKFLOW),
}


class Traceloop(Convention):
    name = "traceloop"

    def vote(self, view: SpanView) -> Vote | None:
        kind = text(view.attributes.get(sc.TRACELOOP_SPAN_KIND)).lower()
        found = _KINDS.get(kind)
        if found is not None:
            return found
        if kind == sc.TRACELOOP_KIND_TASK and view.attributes.get(_TOOL_NAME):
            return Rank.TOOL, Kind.TOOL
        if sc.LLM_REQUEST_TYPE in view.attributes:
            return Rank.LLM, Kind.LLM
        return None

    def agent_span_name(self, view: SpanView) -> str | None:
        return text(view.attributes.get(sc.TRACELOOP_ENTITY_NAME)) or None

    def agent_hint(self, view: SpanView) -> str | None:
        """LangGraph's run metadata, which OpenLLMetry copies into association properties."""
        attrs = view.attributes
        node = langgraph_node(
            {
                sc.LANGGRAPH_CHECKPOINT_NS: attrs.get(_ASSOCIATION + sc.LANGGRAPH_CHECKPOINT_NS),
                sc.LANGGRAPH_NODE: attrs.get(_ASSOCIATION + sc.LANGGRAPH_NODE),
            }
        )
        if node and not node.startswith("__"):
            return node
        return current_agent(attrs.get(sc.TRACELOOP_ENTITY_INPUT)) or current_agent(
            attrs.get(sc.TRACELOOP_ENTITY_OUTPUT)
        )

    def system_prompt(self, view: SpanView) -> str | None:
        attrs = view.attributes
        for index in range(64):
            role = attrs.get(f"{sc.OPENLLMETRY_PROMPT_PREFIX}{index}.role")
            if role is None:
                break
            if role in ("system", "developer"):
                return text(attrs.get(f"{sc.OPENLLMETRY_PROMPT_PREFIX}{index}.content")) or None
        return None

    def tool_name(self, view: SpanView) -> str | None:
        attrs = view.attributes
        return text(attrs.get(_TOOL_NAME)) or text(attrs.get(sc.TRACELOOP_ENTITY_NAME)) or None

    def tool_output(self, view: SpanView) -> tuple[str, str] | None:
        if view.kind == Kind.TOOL and sc.TRACELOOP_ENTITY_OUTPUT in view.attributes:
            value = view.attributes[sc.TRACELOOP_ENTITY_OUTPUT]
            result = tool_call_result(value)
            return (tool_output_text(result) if result is not None else text(value)), "tool"
        return None

    def tool_arguments(self, view: SpanView) -> str | None:
        if view.kind != Kind.TOOL:
            return None
        for key in (_TOOL_ARGUMENTS, sc.TRACELOOP_ENTITY_INPUT):
            if key in view.attributes:
                return text(view.attributes[key])
        return None

    def is_error(self, view: SpanView) -> bool:
        """A tool call whose ``ToolCallResult`` says it failed (LlamaIndex catches the exception)."""
        result = tool_call_result(view.attributes.get(sc.TRACELOOP_ENTITY_OUTPUT))
        return result is not None and result.get("is_error") is True

    def output(self, view: SpanView) -> tuple[str, str | None] | None:
        attrs = view.attributes
        if sc.TRACELOOP_ENTITY_OUTPUT in attrs:
            return messages_text(attrs[sc.TRACELOOP_ENTITY_OUTPUT])
        completions = sorted(
            key
            for key in attrs
            if key.startswith(sc.OPENLLMETRY_COMPLETION_PREFIX) and key.endswith(".content")
        )
        if completions:
            role_key = completions[-1][: -len("content")] + "role"
            return "\n".join(text(attrs[key]) for key in completions), text(attrs.get(role_key)) or None
        return None

    def task_name(self, root: SpanView) -> str | None:
        return text(root.attributes.get(sc.TRACELOOP_WORKFLOW_NAME)) or None

    def task_input(self, root: SpanView) -> str | None:
        return text(root.attributes.get(sc.TRACELOOP_ENTITY_INPUT)) or None

    def task_output(self, root: SpanView) -> str | None:
        return text(root.attributes.get(sc.TRACELOOP_ENTITY_OUTPUT)) or None
