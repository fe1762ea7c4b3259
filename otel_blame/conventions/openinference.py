"""OpenInference (Arize Phoenix): ``openinference.span.kind``, ``agent.name``, ``graph.node.id``,
``input.value``/``output.value``, ``llm.input_messages.{i}.message.*`` and
``llm.output_messages.{i}.message.*`` (``content``, or ``contents.{j}.message_content.text``, and
``tool_calls``), the LangChain instrumentor's ``metadata`` (with LangGraph's ``langgraph_node`` and
``langgraph_checkpoint_ns``) and the smolagents instrumentor's ``smolagents.*`` (the task, the
managed agents' names). CHAIN spans group a step's model call with the tools it called; their own
output, when plain text, is what that step's action returned (a framework object's repr, such as
LlamaIndex's ``AgentOutput(...)``, is its state, not an output). An LLM span that records no messages,
prompts or token counts is no model call: LlamaIndex's ``_prepare_chat_with_tools`` and the
``astream_chat`` around the one that streams the answer. LlamaIndex workflow steps name their agent
only in the events they take and return (:mod:`.llamaindex`)."""

from __future__ import annotations

import re
from typing import Any

from otel_blame import semconv as sc

from .llamaindex import current_agent, tool_output_text
from .model import Convention, Kind, Rank, SpanView, Vote
from .text import maybe_json, messages_text, text, tool_call_text

_KINDS: dict[str, Vote] = {
    sc.OPENINFERENCE_KIND_AGENT: (Rank.AGENT, Kind.AGENT),
    sc.OPENINFERENCE_KIND_TOOL: (Rank.TOOL, Kind.TOOL),
    sc.OPENINFERENCE_KIND_LLM: (Rank.LLM, Kind.LLM),
    sc.OPENINFERENCE_KIND_CHAIN: (Rank.GROUP, Kind.GROUP),
}
# AGENT spans named after the method that runs the agent: smolagents' "researcher.run", CrewAI's
# "Researcher._execute_core"; the part before the method is the agent's name unless it is a class
_AGENT_METHOD = re.compile(r"^(?P<agent>[^.()]+)\.(?:run|_execute_core|execute_task|kickoff|invoke)$")
_CLASS_NAME = re.compile(r"^[A-Z]\w*(?:Agent|Crew)$")
_INPUT_MESSAGE = "llm.input_messages."
_OUTPUT_MESSAGE = "llm.output_messages."
_MAX_MANAGED = 64
# what a model call records (any one): its messages, its prompts, its token counts
_MODEL_CALL_KEYS = (_INPUT_MESSAGE, _OUTPUT_MESSAGE, "llm.prompts", "llm.token_count.")
# a Python object's repr, as LlamaIndex's workflow steps return their events: AgentOutput(response=...)
_OBJECT_REPR = re.compile(r"^[A-Z]\w*\(.*\)$", re.DOTALL)


def _metadata(view: SpanView) -> dict[str, Any]:
    found = maybe_json(view.attributes.get(sc.OPENINFERENCE_METADATA))
    return found if isinstance(found, dict) else {}


def _method_owner(view: SpanView) -> str | None:
    """What an OpenInference span named after the method that runs an agent (``researcher.run``)
    calls it by: the agent's name or its class."""
    if not view.attributes.get(sc.OPENINFERENCE_SPAN_KIND):
        return None
    match = _AGENT_METHOD.match(view.span.name.strip())
    return match.group("agent") if match else None


def langgraph_node(metadata: dict[str, Any]) -> str | None:
    """The graph node a LangChain run belongs to: the OUTERMOST node of its checkpoint namespace
    (``researcher:<id>|agent:<id>`` is the researcher, whose prebuilt ReAct subgraph has a node
    called ``agent``), else ``langgraph_node``."""
    namespace = text(metadata.get(sc.LANGGRAPH_CHECKPOINT_NS))
    outer = namespace.split("|", 1)[0].split(":", 1)[0] if namespace else ""
    return outer or text(metadata.get(sc.LANGGRAPH_NODE)) or None


def _langchain_message(message: Any) -> Any:
    """A serialised LangChain message (``{"type": "human", "data": {"content": ...}}``) as role/content."""
    if isinstance(message, dict) and isinstance(message.get("data"), dict) and "content" in message["data"]:
        return {"role": message.get("type", "user"), "content": message["data"]["content"]}
    return message


class OpenInference(Convention):
    name = "openinference"

    def vote(self, view: SpanView) -> Vote | None:
        found = _KINDS.get(text(view.attributes.get(sc.OPENINFERENCE_SPAN_KIND)).upper())
        if found is not None and found[1] == Kind.LLM and not _records_a_call(view):
            return None  # a client's helper or wrapper, not the call
        return found

    def agent_name(self, view: SpanView) -> str | None:
        return text(view.attributes.get(sc.OPENINFERENCE_AGENT_NAME)) or None

    def agent_span_name(self, view: SpanView) -> str | None:
        owner = _method_owner(view)
        return owner.strip() if owner is not None and not _CLASS_NAME.match(owner) else None

    def agent_class(self, view: SpanView) -> str | None:
        owner = _method_owner(view)
        return owner if owner is not None and _CLASS_NAME.match(owner) else None

    def managed_agents(self, view: SpanView) -> list[tuple[str, str]]:
        attrs = view.attributes
        found = []
        for index in range(_MAX_MANAGED):
            name = text(attrs.get(f"{sc.SMOLAGENTS_MANAGED_AGENTS}{index}.name"))
            if not name:
                break
            tools = _tools_fingerprint(attrs.get(f"{sc.SMOLAGENTS_MANAGED_AGENTS}{index}.tools_names"))
            found.append((name, tools))
        return found

    def agent_tools(self, view: SpanView) -> str | None:
        if sc.SMOLAGENTS_TOOLS_NAMES not in view.attributes:
            return None
        return _tools_fingerprint(view.attributes[sc.SMOLAGENTS_TOOLS_NAMES]) or None

    def agent_hint(self, view: SpanView) -> str | None:
        # the node's name where the instrumentor gives one (Agno: graph.node.id is a generated id)
        node = text(view.attributes.get(sc.OPENINFERENCE_GRAPH_NODE_NAME)) or text(
            view.attributes.get(sc.OPENINFERENCE_GRAPH_NODE_ID)
        )
        if node and not node.startswith("__"):  # LangGraph's __start__ / __end__ are not agents
            return node
        return (
            langgraph_node(_metadata(view))
            or current_agent(view.attributes.get(sc.OPENINFERENCE_INPUT_VALUE))
            or current_agent(view.attributes.get(sc.OPENINFERENCE_OUTPUT_VALUE))
        )

    def system_prompt(self, view: SpanView) -> str | None:
        attrs = view.attributes
        for index in range(64):
            role = attrs.get(f"{_INPUT_MESSAGE}{index}.message.role")
            if role is None:
                break
            if role in ("system", "developer"):
                return text(attrs.get(f"{_INPUT_MESSAGE}{index}.message.content")) or None
        return None

    def tool_name(self, view: SpanView) -> str | None:
        found = text(view.attributes.get(sc.OPENINFERENCE_TOOL_NAME))
        if found or view.kind != Kind.TOOL or not view.attributes.get(sc.OPENINFERENCE_SPAN_KIND):
            return found or None
        return view.span.name.strip() or None  # a TOOL span without tool.name is named after its tool

    def tool_output(self, view: SpanView) -> tuple[str, str] | None:
        if view.kind == Kind.TOOL and sc.OPENINFERENCE_OUTPUT_VALUE in view.attributes:
            value = view.attributes[sc.OPENINFERENCE_OUTPUT_VALUE]
            found = maybe_json(value)
            if isinstance(found, dict) and "tool_name" in found and "raw_output" in found:
                return tool_output_text(found), "tool"  # LlamaIndex's ToolOutput
            return text(value), "tool"
        return None

    def tool_arguments(self, view: SpanView) -> str | None:
        """A tool span's ``input.value``; smolagents records ``{"args": [...], "kwargs": {...}}`` (LlamaIndex
        only the ``kwargs``), of which the arguments are the keywords, or the positional ones when there
        are none."""
        if view.kind != Kind.TOOL or sc.OPENINFERENCE_INPUT_VALUE not in view.attributes:
            return None
        value = maybe_json(view.attributes[sc.OPENINFERENCE_INPUT_VALUE])
        if isinstance(value, dict) and "kwargs" in value and ("args" in value or len(value) == 1):
            kwargs, args = value.get("kwargs"), value.get("args")
            value = kwargs if kwargs or not args else args
        return text(value)

    def observation(self, view: SpanView) -> str | None:
        if view.kind != Kind.GROUP:
            return None
        attrs = view.attributes
        if "json" in text(attrs.get(sc.OPENINFERENCE_OUTPUT_MIME_TYPE)).lower():
            return None
        value = attrs.get(sc.OPENINFERENCE_OUTPUT_VALUE)
        if not isinstance(value, str) or not value.strip() or _OBJECT_REPR.match(value.strip()):
            return None
        return None if maybe_json(value) is not value else value

    def output(self, view: SpanView) -> tuple[str, str | None] | None:
        attrs = view.attributes
        texts: list[str] = []
        role: str | None = None
        for index in range(64):  # an LLM span's parsed output messages beat its raw response
            prefix = f"{_OUTPUT_MESSAGE}{index}.message."
            if prefix + "role" not in attrs and prefix + "content" not in attrs:
                if prefix + "contents.0.message_content.text" not in attrs:
                    break
            role = text(attrs.get(prefix + "role")) or role
            texts.append(text(attrs.get(prefix + "content")) or _contents_text(attrs, prefix))
            for call in range(16):
                name = attrs.get(f"{prefix}tool_calls.{call}.tool_call.function.name")
                if name is None:
                    break
                arguments = attrs.get(f"{prefix}tool_calls.{call}.tool_call.function.arguments")
                texts.append(tool_call_text(text(name), arguments))
        if any(texts):
            return "\n".join(found for found in texts if found), role
        if sc.OPENINFERENCE_OUTPUT_VALUE in attrs:
            value = maybe_json(attrs[sc.OPENINFERENCE_OUTPUT_VALUE])
            if isinstance(value, dict) and isinstance(value.get("raw"), str):  # CrewAI's TaskOutput
                return value["raw"], "assistant"
            found, role = messages_text(value)
            return (found or text(attrs[sc.OPENINFERENCE_OUTPUT_VALUE])), role
        return None

    def task_input(self, root: SpanView) -> str | None:
        if root.attributes.get(sc.SMOLAGENTS_TASK):
            return text(root.attributes[sc.SMOLAGENTS_TASK])
        value = maybe_json(root.attributes.get(sc.OPENINFERENCE_INPUT_VALUE))
        if isinstance(value, dict) and isinstance(value.get("messages"), list):  # a LangGraph state
            found = messages_text([_langchain_message(m) for m in value["messages"]])[0]
            if found:
                return found
        if isinstance(value, dict) and isinstance(value.get("task"), str):  # an agent run's arguments
            return value["task"] or None
        if isinstance(value, dict) and "start_event" in value:  # a LlamaIndex workflow's state, not a task
            return None
        return text(value) or None

    def task_output(self, root: SpanView) -> str | None:
        return text(root.attributes.get(sc.OPENINFERENCE_OUTPUT_VALUE)) or None


def _records_a_call(view: SpanView) -> bool:
    return any(key.startswith(_MODEL_CALL_KEYS) for key in view.attributes)


def _contents_text(attrs: dict[str, Any], prefix: str) -> str:
    """The text parts of a message recorded as ``contents.{j}.message_content.*``."""
    texts = []
    for index in range(64):
        key = f"{prefix}contents.{index}.message_content."
        if key + "type" not in attrs and key + "text" not in attrs:
            break
        if text(attrs.get(key + "type", "text")) == "text":
            texts.append(text(attrs.get(key + "text")))
    return "\n".join(found for found in texts if found)


def _tools_fingerprint(value: Any) -> str:
    """A list of tool names (a JSON or Python-literal list, or a tuple's repr) as one sorted string."""
    names = re.findall(r"[\w.-]+", text(value))
    return ",".join(sorted(set(names)))
