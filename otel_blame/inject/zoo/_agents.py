"""A small multi-agent runtime on the plain instrumentation API, shared by the zoo's ``api`` apps.

Agents take turns on one conversation. A turn asks the (scripted) LLM for the agent's next message
with the real ``openai`` client; a reply with a tool call runs the tool. Every step goes through
the message path before anyone sees it: the agent's message, a tool call (before the tool runs, so
a changed argument or tool name changes what the tool returns) and the tool's result. So a fault
planted by ``otel-blame inject`` is what the other agents, the tools and the recorded step get.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_blame.instrumentation import agent_turn
from otel_blame.instrumentation.core import offer_tool_call

SOURCE = "api"


class ToolError(Exception):
    """A tool's own failure: its text becomes the tool result, marked as an error."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, str]  # argument -> JSON type
    run: Callable[..., str]

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {k: {"type": v} for k, v in self.parameters.items()},
                    "required": list(self.parameters),
                },
            },
        }


@dataclass(frozen=True)
class Agent:
    name: str
    instructions: str  # the system message after "You are NAME."
    tools: tuple[Tool, ...] = ()

    @property
    def system(self) -> str:
        return f"You are {self.name}. {self.instructions}"


@dataclass
class Entry:
    """One step of the conversation as the agents see it."""

    speaker: str
    kind: str  # message | tool | code_execution
    text: str
    tool_name: str | None = None
    arguments: str | None = None  # a tool call's JSON arguments (on the calling message)
    call_id: str | None = None
    is_error: bool = False
    step: int | None = None


@dataclass
class Conversation:
    """The run's shared conversation: who said what, in order, with tool calls and results."""

    base_url: str
    model: str = "scripted-model"
    entries: list[Entry] = field(default_factory=list)
    _client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            import openai

            self._client = openai.OpenAI(base_url=self.base_url, api_key="offline", max_retries=0)
        return self._client

    def post(self, speaker: str, text: str, *, kind: str = "message", is_error: bool = False) -> str:
        """A step that is not an LLM's reply (the user's request, a terminal's output); returns what
        was sent."""
        with agent_turn(speaker, source=SOURCE) as turn:
            text = turn.answer(text, kind=kind, is_error=is_error)
            self.entries.append(Entry(speaker, kind, text, is_error=is_error, step=turn.index))
        return text

    def _messages(self, agent: Agent, see: Callable[[Entry], bool] | None) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": agent.system}]
        for entry in self.entries:
            if see is not None and not see(entry):
                continue
            if entry.kind == "tool":
                if entry.speaker != agent.name:
                    continue  # another agent's tool results are its own business
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": entry.call_id,
                        "name": entry.tool_name,
                        "content": entry.text,
                    }
                )
                continue
            own = entry.speaker == agent.name
            message: dict[str, Any] = {
                "role": "assistant" if own else "user",
                "name": entry.speaker,
                "content": entry.text,
            }
            if own and entry.tool_name is not None:
                message["tool_calls"] = [
                    {
                        "id": entry.call_id,
                        "type": "function",
                        "function": {"name": entry.tool_name, "arguments": entry.arguments or "{}"},
                    }
                ]
            messages.append(message)
        return messages

    def act(
        self, agent: Agent, *, see: Callable[[Entry], bool] | None = None, max_tool_calls: int = 6
    ) -> str:
        """The agent's turn: tool calls (each run and its result recorded) until it answers in text;
        returns that text."""
        tools = {tool.name: tool for tool in agent.tools}
        for _ in range(max_tool_calls + 1):
            with agent_turn(agent.name, source=SOURCE) as turn:
                kwargs: dict[str, Any] = {"model": self.model, "messages": self._messages(agent, see)}
                if tools:
                    kwargs["tools"] = [tool.spec() for tool in tools.values()]
                reply = self.client.chat.completions.create(**kwargs).choices[0].message
                content = reply.content or ""
                if not reply.tool_calls:
                    text = turn.answer(content)
                    self.entries.append(Entry(agent.name, "message", text, step=turn.index))
                    return text
                call = reply.tool_calls[0]
                name, arguments = call.function.name, call.function.arguments
                # the call, before its tool runs: a changed argument or tool is what runs
                changed = offer_tool_call(agent.name, arguments, name, message=call, source=SOURCE)
                if changed is not None:
                    name, arguments = changed.tool_name or name, changed.text
                call_id = call.id or f"call_{uuid.uuid4().hex[:12]}"
                function = {"name": name, "arguments": arguments}
                content = turn.answer(
                    content or None, tool_calls=[{"id": call_id, "type": "function", "function": function}]
                )
                self.entries.append(
                    Entry(agent.name, "message", content, name, arguments, call_id, step=turn.index)
                )
            self._run_tool(agent, tools, name, arguments, call_id)
        text = f"I stopped after {max_tool_calls} tool calls without an answer."
        return self.post(agent.name, text)

    def _run_tool(
        self, agent: Agent, tools: Mapping[str, Tool], name: str, arguments: str, call_id: str
    ) -> None:
        with agent_turn(agent.name, source=SOURCE) as turn:
            turn.as_tool(name, call_id)
            result, is_error = _call(tools.get(name), name, arguments)
            result = turn.answer(
                result, "tool", kind="tool", tool_name=name, tool_call_id=call_id, is_error=is_error
            )
            self.entries.append(Entry(agent.name, "tool", result, name, None, call_id, is_error, turn.index))


def _call(tool: Tool | None, name: str, arguments: str) -> tuple[str, bool]:
    """Run the tool on the call's arguments: (result text, is an error)."""
    if tool is None:
        return json.dumps({"error": f"unknown tool {name!r}"}), True
    try:
        parsed = json.loads(arguments or "{}")
        if not isinstance(parsed, dict):
            raise ToolError("the arguments are not a JSON object")
        return tool.run(**parsed), False
    except ToolError as error:
        return json.dumps({"error": str(error)}), True
    except (TypeError, ValueError) as error:
        return json.dumps({"error": f"{type(error).__name__}: {error}"}), True


def run_python(code: str) -> tuple[str, bool]:
    """Run a code block the way a terminal agent does: its printed output, or the error it raised."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<code block>", "exec"), {"__name__": "__main__"})  # noqa: S102 - the app's own agent
    except Exception as error:
        return (
            f"exitcode: 1 (execution failed)\nCode output: {out.getvalue()}\n{type(error).__name__}: {error}",
            True,
        )
    return f"exitcode: 0 (execution succeeded)\nCode output: {out.getvalue()}", False
