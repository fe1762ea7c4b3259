"""Message content in the shapes instrumentations record it, as plain text."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

# contrib's openai-agents-v2 (0.1.0) writes a Responses API function call as its Python repr in a text part
_REPR_CALL = re.compile(r"^ResponseFunctionToolCall\((?P<fields>.*)\)$", re.DOTALL)
_REPR_FIELD = re.compile(r"""(?P<key>\w+)=(?P<value>'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")""")


def text(value: Any) -> str:
    """Any attribute value as text; structured values as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return json.dumps(value, ensure_ascii=False, default=str)


def maybe_json(value: Any) -> Any:
    """A string that holds a JSON object or array, decoded; anything else as is."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def tool_call_text(name: str, arguments: Any) -> str:
    """A tool call as every source is read into a step's text (``tool_call NAME(ARGUMENTS)``): spans of
    each dialect here, chat files in :mod:`otel_blame.loaders`; attribution reads calls in this form."""
    return f"tool_call {name}({text(arguments)})"


def repr_tool_call(value: str) -> str | None:
    """A function call recorded as its repr (``ResponseFunctionToolCall(arguments='{...}', ...,
    name='web_search', ...)``) as ``tool_call NAME(ARGUMENTS)``; None for anything else."""
    match = _REPR_CALL.match(value.strip())
    if match is None:
        return None
    fields: dict[str, Any] = {}
    for field in _REPR_FIELD.finditer(match.group("fields")):
        try:
            fields.setdefault(field.group("key"), ast.literal_eval(field.group("value")))
        except (ValueError, SyntaxError):
            continue
    name = fields.get("name")
    return tool_call_text(name, fields.get("arguments")) if isinstance(name, str) and name else None


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return text(part)
    kind = part.get("type")
    if kind == "tool_call":
        return tool_call_text(str(part.get("name", "")), part.get("arguments"))
    if kind == "tool_call_response":
        return text(part.get("response", part.get("result")))
    for key in ("content", "text", "response"):
        if key in part:
            value = part[key]
            return (isinstance(value, str) and repr_tool_call(value)) or text(value)
    return ""


def messages_text(value: Any) -> tuple[str, str | None]:
    """Text of GenAI messages (``[{role, parts:[...]}]``, or OpenAI-style ``{role, content}``) and
    the last message's role."""
    value = maybe_json(value)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return text(value), None
    texts: list[str] = []
    role: str | None = None
    for message in value:
        if not isinstance(message, dict):
            texts.append(text(message))
            continue
        role = message.get("role", role)
        if "parts" in message and isinstance(message["parts"], list):
            texts.extend(found for found in (_part_text(part) for part in message["parts"]) if found)
        elif "message" in message and isinstance(message["message"], dict):  # a gen_ai.choice body
            inner_text, inner_role = messages_text(message["message"])
            texts.append(inner_text)
            role = inner_role or role
        elif "content" in message:
            content = message["content"]
            texts.append(text(content) if not isinstance(content, list) else messages_text(content)[0])
        if isinstance(message.get("tool_calls"), list):
            for call in message["tool_calls"]:
                function = call.get("function", call) if isinstance(call, dict) else {}
                texts.append(tool_call_text(str(function.get("name", "")), function.get("arguments")))
    return "\n".join(found for found in texts if found), role


def system_text(value: Any) -> str | None:
    """The system message's text among chat messages (GenAI ``parts`` or OpenAI ``content``)."""
    value = maybe_json(value)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return None
    for message in value:
        if isinstance(message, dict) and message.get("role") in ("system", "developer"):
            found, _ = messages_text([{k: v for k, v in message.items() if k != "tool_calls"}])
            return found or None
    return None
