"""Hooks for the classic ``autogen`` package (AG2 0.x): every sent message is one step span.

Every agent-to-agent message goes through ``ConversableAgent.send`` / ``a_send``, which call
``_process_message_before_send`` exactly once with the final message; that is where a step is
recorded, before the recipient reacts (so nested replies get later indices). The group chat
manager's relays of a message to the other members are not new messages and are skipped.
``initiate_chat`` opens a task root when the app has not opened ``task()``; ``run`` and
``run_iter`` start a thread, so the caller's context is handed to the chat that thread starts.

Class attributes are patched (not instances), so AG2's own tracing, which wraps instances,
keeps working on top; ``uninstrument`` puts every original back.
"""

from __future__ import annotations

import contextvars
import functools
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from otel_blame import semconv
from otel_blame.instrument.content import to_text
from otel_blame.instrument.safety import HOOK_ERRORS, guarded
from otel_blame.instrument.tasks import TaskRun, current_task, record_message, task
from otel_blame.trajectory import StepKind

SOURCE = "autogen"
_WRAPPED = "__otel_blame_wrapped__"
_patches: list[tuple[type, str, Any]] = []
# when an agent started generating its reply (span start of the message it then sends)
_reply_started: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
# context captured by ``run`` for the chat its thread starts, keyed by the agents involved
_handoffs: weakref.WeakKeyDictionary[Any, contextvars.Context] = weakref.WeakKeyDictionary()
_tool_names: weakref.WeakKeyDictionary[TaskRun, dict[str, str]] = weakref.WeakKeyDictionary()


def _patch(owner: type, name: str, make: Callable[[Any], Any]) -> None:
    original = owner.__dict__.get(name)
    if original is None or getattr(original, _WRAPPED, False):
        return
    wrapper = make(original)
    setattr(wrapper, _WRAPPED, True)
    setattr(owner, name, wrapper)
    _patches.append((owner, name, original))


def instrument() -> None:
    from autogen.agentchat.conversable_agent import ConversableAgent

    _patch(ConversableAgent, "_process_message_before_send", _wrap_process_before_send)
    _patch(ConversableAgent, "generate_reply", _wrap_generate_reply)
    _patch(ConversableAgent, "a_generate_reply", _wrap_a_generate_reply)
    _patch(ConversableAgent, "initiate_chat", _wrap_initiate_chat)
    _patch(ConversableAgent, "a_initiate_chat", _wrap_a_initiate_chat)
    for name in ("run", "run_iter"):
        _patch(ConversableAgent, name, _wrap_thread_starter)


def uninstrument() -> None:
    while _patches:
        owner, name, original = _patches.pop()
        setattr(owner, name, original)
    _handoffs.clear()
    _reply_started.clear()


# -- steps -----------------------------------------------------------------------------------


def _wrap_process_before_send(original: Any) -> Any:
    @functools.wraps(original)
    def _process_message_before_send(self: Any, message: Any, recipient: Any, silent: Any) -> Any:
        processed = original(self, message, recipient, silent)
        _record_sent(self, processed, recipient)
        return processed

    return _process_message_before_send


def _is_manager_relay(sender: Any, recipient: Any) -> bool:
    """A group chat manager passing a member's message on to the other members."""
    # runs for every send (three of four in a four-member group chat are relays): plain loops,
    # no generator, no attribute lookups on None
    groupchat = getattr(sender, "_groupchat", None) or getattr(sender, "groupchat", None)
    if groupchat is None:
        return False
    agents = getattr(groupchat, "agents", None)
    if not agents:
        return False
    for agent in agents:
        if agent is recipient:
            return True
    return False


def _content_text(content: Any) -> Any:
    """Multimodal content lists become their text parts; everything else is left to ``to_text``."""
    if isinstance(content, list):
        texts = [
            to_text(part.get("text"))
            if isinstance(part, Mapping) and part.get("type") == "text"
            else to_text(part)
            for part in content
        ]
        return "\n".join(texts)
    return content


def _uses_code_execution(agent: Any) -> bool:
    config = getattr(agent, "_code_execution_config", False)
    return config is not False and config is not None


@guarded("autogen.send")
def _record_sent(sender: Any, message: Any, recipient: Any) -> None:
    if _is_manager_relay(sender, recipient):
        return
    run = current_task()
    started = _reply_started.pop(sender, None)
    if run is not None and started is not None and started < run.started_ns:
        started = None
    fields: dict[str, Any] = {"start_time_ns": started}
    if not isinstance(message, Mapping):
        text = to_text(message)
        kind = StepKind.CODE_EXECUTION if _is_code_result(sender, text) else StepKind.MESSAGE
        record_message(sender.name, text, "assistant", kind=kind, **fields)
        return
    role = message.get("role") or "assistant"
    content = _content_text(message.get("content"))
    tool_calls = message.get("tool_calls")
    if message.get("function_call"):
        tool_calls = [*(tool_calls or []), {"function": message["function_call"]}]
    tool_responses = message.get("tool_responses")
    if tool_responses or role in ("tool", "function"):
        names = _tool_names.get(run, {}) if run is not None else {}
        call_ids = [to_text(r.get("tool_call_id")) for r in tool_responses or () if isinstance(r, Mapping)]
        tool_name = message.get("name") if role == "function" else None
        tool_name = tool_name or ", ".join(dict.fromkeys(names.get(i, "tool") for i in call_ids)) or "tool"
        record_message(
            sender.name,
            content,
            "tool",
            kind=StepKind.TOOL,
            tool_name=tool_name,
            tool_call_id=", ".join(call_ids) or None,
            is_error=_tool_failed(tool_responses),
            **fields,
        )
        return
    if tool_calls and run is not None:
        names = _tool_names.setdefault(run, {})
        for call in tool_calls:
            function = call.get("function") or {}
            if call.get("id") is not None:
                names[to_text(call["id"])] = to_text(function.get("name"))
    kind = StepKind.CODE_EXECUTION if _is_code_result(sender, content) else StepKind.MESSAGE
    record_message(
        sender.name,
        content if content is not None or not tool_calls else None,
        role,
        kind=kind,
        tool_calls=tool_calls,
        is_error=kind is StepKind.CODE_EXECUTION and not to_text(content).startswith("exitcode: 0"),
        **fields,
    )


def _is_code_result(sender: Any, content: Any) -> bool:
    """The executor agent's report of running code (AG2 formats it as ``exitcode: N ...``)."""
    return isinstance(content, str) and content.startswith("exitcode:") and _uses_code_execution(sender)


def _tool_failed(tool_responses: Any) -> bool:
    for response in tool_responses or ():
        if isinstance(response, Mapping) and to_text(response.get("content")).startswith("Error:"):
            return True
    return False


def _wrap_generate_reply(original: Any) -> Any:
    @functools.wraps(original)
    def generate_reply(self: Any, *args: Any, **kwargs: Any) -> Any:
        _note_reply_start(self)
        return original(self, *args, **kwargs)

    return generate_reply


def _wrap_a_generate_reply(original: Any) -> Any:
    @functools.wraps(original)
    async def a_generate_reply(self: Any, *args: Any, **kwargs: Any) -> Any:
        _note_reply_start(self)
        return await original(self, *args, **kwargs)

    return a_generate_reply


def _note_reply_start(agent: Any) -> None:
    try:
        _reply_started[agent] = time.time_ns()
    except Exception:
        HOOK_ERRORS.record("autogen.generate_reply")


# -- task roots --------------------------------------------------------------------------------


def _task_name(sender: Any, recipient: Any) -> str:
    return f"{getattr(sender, 'name', 'agent')} -> {getattr(recipient, 'name', 'agent')}"


def _initial_input(kwargs: Mapping[str, Any]) -> Any:
    message = kwargs.get("message")
    if isinstance(message, Mapping):
        return message.get("content")
    return message if isinstance(message, str) else None


def _pop_handoff(*agents: Any) -> contextvars.Context | None:
    found = None
    for agent in agents:
        try:
            context = _handoffs.pop(agent, None)
        except TypeError:
            context = None
        found = found or context
    return found


@guarded("autogen.final_output")
def _note_final_output(run: TaskRun | None, result: Any) -> None:
    if run is None or not run.settings.capture_content:
        return
    summary = getattr(result, "summary", None)
    if summary:
        run.span.set_attribute(semconv.TASK_FINAL_OUTPUT, run.prepare(summary).text)


def _root(sender: Any, recipient: Any, kwargs: Mapping[str, Any]) -> task:
    return task(
        _task_name(sender, recipient),
        input=_initial_input(kwargs),
        attributes={semconv.INSTRUMENTATION_SOURCE: SOURCE},
    )


def _wrap_initiate_chat(original: Any) -> Any:
    @functools.wraps(original)
    def initiate_chat(self: Any, recipient: Any, *args: Any, **kwargs: Any) -> Any:
        handoff = _pop_handoff(self, recipient)
        if handoff is not None and current_task() is None:
            return handoff.run(initiate_chat, self, recipient, *args, **kwargs)
        if current_task() is not None:
            return original(self, recipient, *args, **kwargs)
        with _root(self, recipient, kwargs) as run:
            result = original(self, recipient, *args, **kwargs)
            _note_final_output(run, result)
            return result

    return initiate_chat


def _wrap_a_initiate_chat(original: Any) -> Any:
    @functools.wraps(original)
    async def a_initiate_chat(self: Any, recipient: Any, *args: Any, **kwargs: Any) -> Any:
        if current_task() is not None:
            return await original(self, recipient, *args, **kwargs)
        async with _root(self, recipient, kwargs) as run:
            result = await original(self, recipient, *args, **kwargs)
            _note_final_output(run, result)
            return result

    return a_initiate_chat


def _wrap_thread_starter(original: Any) -> Any:
    """``run`` / ``run_iter`` start the chat in a new thread: hand it the caller's context."""

    @functools.wraps(original)
    def starter(self: Any, recipient: Any = None, *args: Any, **kwargs: Any) -> Any:
        if current_task() is not None:
            try:
                context = contextvars.copy_context()
                for agent in (self, recipient):
                    if agent is not None:
                        _handoffs[agent] = context
            except Exception:
                HOOK_ERRORS.record("autogen.run")
        return original(self, recipient, *args, **kwargs)

    return starter
