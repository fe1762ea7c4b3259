"""The OpenTelemetry GenAI semantic conventions: ``invoke_agent``/``execute_tool``/``chat`` spans,
``gen_ai.agent.name``, content in ``gen_ai.*.messages`` attributes, in log records (the contrib
``opentelemetry-instrumentation-openai-v2`` writes ``gen_ai.client.inference.operation.details``
or the older per-message events) or in span events of the same names (Strands).

Both versions of the conventions read the same (docs/semconv.md, "Two shapes of the conventions"):
up to v1.40 and v1.41 of semantic-conventions, and the semantic-conventions-genai repository after
it: ``invoke_agent`` as a client or an internal span, the workflow name (``gen_ai.workflow.name``) as
the task's name, a framework's turn (``handle_conversation_turn``) as a workflow, a ``plan`` span as
what groups the planning model call (no step of its own), a tool's result in
``gen_ai.tool.call.result`` or in its messages, and a failure's ``gen_ai.client.operation.exception``
(a log record joined to its span, or a span event) as that span's error."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_blame import semconv as sc

from .model import Convention, Kind, Rank, SpanView, Vote
from .otlp import any_value_to_python, attributes_to_dict
from .text import maybe_json, messages_text, system_text, text, tool_call_text

_LLM_OPERATIONS = {sc.OP_CHAT, sc.OP_TEXT_COMPLETION, sc.OP_GENERATE_CONTENT}
_WORKFLOW_OPERATIONS = {sc.OP_INVOKE_WORKFLOW, sc.OP_HANDLE_CONVERSATION_TURN}


class GenAI(Convention):
    name = "genai"

    def vote(self, view: SpanView) -> Vote | None:
        operation = view.attributes.get(sc.GEN_AI_OPERATION_NAME)
        if operation == sc.OP_INVOKE_AGENT:
            return Rank.AGENT, Kind.AGENT
        if operation == sc.OP_EXECUTE_TOOL:
            return Rank.TOOL, Kind.TOOL
        if operation in _LLM_OPERATIONS:
            return Rank.LLM, Kind.LLM
        if operation in _WORKFLOW_OPERATIONS:
            return Rank.WORKFLOW, Kind.WORKFLOW
        return None

    def agent_name(self, view: SpanView) -> str | None:
        return text(view.attributes.get(sc.GEN_AI_AGENT_NAME)) or None

    def agent_span_name(self, view: SpanView) -> str | None:
        prefix = sc.OP_INVOKE_AGENT + " "
        if view.span.name.startswith(prefix):
            return view.span.name[len(prefix) :] or None
        return None

    def system_prompt(self, view: SpanView) -> str | None:
        attrs = view.attributes
        if attrs.get(sc.GEN_AI_SYSTEM_INSTRUCTIONS):
            found, _ = messages_text(attrs[sc.GEN_AI_SYSTEM_INSTRUCTIONS])
            if found:
                return found
        if sc.GEN_AI_INPUT_MESSAGES in attrs:
            found = system_text(attrs[sc.GEN_AI_INPUT_MESSAGES])
            if found:
                return found
        for record in view.logs:
            name = log_event_name(record)
            if name == sc.EVENT_SYSTEM_MESSAGE:
                found, _ = messages_text(any_value_to_python(record.body))
                if found:
                    return found
            elif name == sc.EVENT_INFERENCE_DETAILS:
                log_attrs = attributes_to_dict(record.attributes)
                for key in (sc.GEN_AI_SYSTEM_INSTRUCTIONS, sc.GEN_AI_INPUT_MESSAGES):
                    if key in log_attrs:
                        found = (
                            messages_text(log_attrs[key])[0]
                            if key == sc.GEN_AI_SYSTEM_INSTRUCTIONS
                            else system_text(log_attrs[key])
                        )
                        if found:
                            return found
        return None

    def tool_name(self, view: SpanView) -> str | None:
        if view.attributes.get(sc.GEN_AI_TOOL_NAME):
            return text(view.attributes[sc.GEN_AI_TOOL_NAME])
        prefix = sc.OP_EXECUTE_TOOL + " "
        if view.span.name.startswith(prefix):
            return view.span.name[len(prefix) :] or None
        return None

    def tool_output(self, view: SpanView) -> tuple[str, str] | None:
        if view.kind == Kind.TOOL and sc.GEN_AI_TOOL_CALL_RESULT in view.attributes:
            return text(view.attributes[sc.GEN_AI_TOOL_CALL_RESULT]), "tool"
        return None

    def output(self, view: SpanView) -> tuple[str, str | None] | None:
        if sc.GEN_AI_OUTPUT_MESSAGES in view.attributes:
            found, role = messages_text(view.attributes[sc.GEN_AI_OUTPUT_MESSAGES])
            if found:
                return found, role
        return None

    def tool_arguments(self, view: SpanView) -> str | None:
        """What a tool was called with: the attribute, else the ``gen_ai.tool.message`` span event
        Strands records them in."""
        if view.kind != Kind.TOOL:
            return None
        if sc.GEN_AI_TOOL_CALL_ARGUMENTS in view.attributes:
            return text(view.attributes[sc.GEN_AI_TOOL_CALL_ARGUMENTS])
        for event in view.span.events:
            if event.name == sc.EVENT_TOOL_MESSAGE:
                found = text(attributes_to_dict(event.attributes).get("content"))
                if found:
                    return found
        return None

    def task_name(self, root: SpanView) -> str | None:
        return text(root.attributes.get(sc.GEN_AI_WORKFLOW_NAME)) or None

    def task_input(self, root: SpanView) -> str | None:
        if sc.GEN_AI_INPUT_MESSAGES in root.attributes:
            return messages_text(root.attributes[sc.GEN_AI_INPUT_MESSAGES])[0] or None
        return None

    def task_output(self, root: SpanView) -> str | None:
        if sc.GEN_AI_OUTPUT_MESSAGES in root.attributes:
            return messages_text(root.attributes[sc.GEN_AI_OUTPUT_MESSAGES])[0] or None
        return None

    def is_error(self, view: SpanView) -> bool:
        return sc.ERROR_TYPE in view.attributes or bool(client_exception_text(view))


class GenAIEvents(Convention):
    """Content that a GenAI instrumentation put in log records, joined to its span by id. Asked
    after every attribute-based dialect: attributes on the span itself are the better source."""

    name = "genai-events"

    def output(self, view: SpanView) -> tuple[str, str | None] | None:
        found, role = content_from_logs(view.logs, view.kind) if view.logs else ("", None)
        if not found:
            found, role = content_from_span_events(view.span, view.kind)
        return (found, role) if found else None


def content_from_span_events(span: Span, kind: Kind | None) -> tuple[str, str | None]:
    """Output content recorded as span events (Strands): ``gen_ai.client.inference.operation.details``
    with ``gen_ai.output.messages``, or ``gen_ai.choice`` whose ``message`` holds content blocks."""
    texts: list[str] = []
    role: str | None = None
    for event in span.events:
        if event.name not in (sc.EVENT_INFERENCE_DETAILS, sc.EVENT_CHOICE):
            continue
        attrs = attributes_to_dict(event.attributes)
        if event.name == sc.EVENT_INFERENCE_DETAILS and sc.GEN_AI_OUTPUT_MESSAGES in attrs:
            found, role = messages_text(attrs[sc.GEN_AI_OUTPUT_MESSAGES])
            texts.append(found)
        elif event.name == sc.EVENT_CHOICE and "message" in attrs:
            texts.append(content_blocks_text(attrs["message"]))
            role = "tool" if kind in (Kind.TOOL, Kind.CODE) else "assistant"
    return "\n".join(found for found in texts if found), role


def content_blocks_text(value: object) -> str:
    """Bedrock Converse-style content blocks (``[{"text": ...}, {"toolUse": {"name", "input"}}]``)."""
    value = maybe_json(value)
    if not isinstance(value, list):
        return text(value)
    texts: list[str] = []
    for block in value:
        if isinstance(block, dict) and isinstance(block.get("toolUse"), dict):
            texts.append(tool_call_text(text(block["toolUse"].get("name")), block["toolUse"].get("input")))
        elif isinstance(block, dict) and "text" in block:
            texts.append(text(block["text"]).strip())
    return "\n".join(found for found in texts if found)


def client_exception_text(view: SpanView) -> str:
    """``{exception.type}: {exception.message}`` of the span's ``gen_ai.client.operation.exception``, the
    conventions' log record for a failed GenAI client call (joined to its span), or a span event of that
    name; "" without one."""
    for event in view.span.events:
        if event.name == sc.EVENT_CLIENT_OPERATION_EXCEPTION:
            return _exception(attributes_to_dict(event.attributes))
    for record in view.logs:
        if log_event_name(record) == sc.EVENT_CLIENT_OPERATION_EXCEPTION:
            return _exception(attributes_to_dict(record.attributes))
    return ""


def _exception(attrs: dict) -> str:
    kind, message = text(attrs.get(sc.EXCEPTION_TYPE)), text(attrs.get(sc.EXCEPTION_MESSAGE))
    return f"{kind}: {message}" if kind else message or "exception"


def log_event_name(record: LogRecord) -> str:
    if record.event_name:
        return record.event_name
    for kv in record.attributes:
        if kv.key == sc.EVENT_NAME:
            return text(any_value_to_python(kv.value))
    return ""


def content_from_logs(records: Sequence[LogRecord], kind: Kind | None) -> tuple[str, str | None]:
    """Output content an instrumentation put in log records instead of span attributes. Beside a
    ``gen_ai.choice`` (the call's answer), a ``gen_ai.assistant.message`` is an earlier turn of the
    history the call was sent (Semantic Kernel logs both), not its output."""
    texts: list[str] = []
    role: str | None = None
    answered = any(log_event_name(record) == sc.EVENT_CHOICE for record in records)
    for record in sorted(records, key=lambda r: r.time_unix_nano or r.observed_time_unix_nano):
        name = log_event_name(record)
        if answered and name == sc.EVENT_ASSISTANT_MESSAGE:
            continue
        body = any_value_to_python(record.body)
        if name == sc.EVENT_INFERENCE_DETAILS:
            attrs = attributes_to_dict(record.attributes)
            output = attrs.get(sc.GEN_AI_OUTPUT_MESSAGES)
            if output is None and isinstance(body, dict):
                output = body.get(sc.GEN_AI_OUTPUT_MESSAGES)
            if output is not None:
                found, role = messages_text(output)
                texts.append(found)
        elif name in (sc.EVENT_CHOICE, sc.EVENT_ASSISTANT_MESSAGE) or (
            name == sc.EVENT_TOOL_MESSAGE and kind in (Kind.TOOL, Kind.CODE)
        ):
            found, found_role = messages_text(body)
            texts.append(found)
            role = found_role or ("assistant" if name != sc.EVENT_TOOL_MESSAGE else "tool")
    return "\n".join(found for found in texts if found), role
