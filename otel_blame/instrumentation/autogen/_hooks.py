"""Hooks for the classic ``autogen`` package (AG2 0.x): every agent turn is an envelope span.

An agent's turn starts in ``generate_reply`` / ``a_generate_reply``: an :class:`AgentTurn` span
``invoke_agent {agent}`` is opened and made current there, so the LLM calls the agent makes (and
their ``chat`` spans from any LLM instrumentation) and the group chat members' turns inside a
manager's turn nest under it. The reply is sent next, through ``send`` / ``a_send``, which call
``_process_message_before_send`` exactly once with the final message: that is where the turn gets
its message and step index, and ends. A turn that replies nothing ends without a step (a group
chat manager around its members). A tool result is the executor's turn renamed
``execute_tool {tool}``. The manager's relays of a message to the other members are not new
messages and are skipped. ``initiate_chat`` opens a task root when the app has not opened
``task()``; ``run`` and ``run_iter`` start a thread, so the caller's context is handed to the chat
that thread starts.
"""

from __future__ import annotations

import contextvars
import time
import weakref
from collections.abc import Mapping
from typing import Any

from otel_blame import semconv
from otel_blame.instrumentation._messages import StepKind, to_text
from otel_blame.instrumentation._safety import HOOK_ERRORS
from otel_blame.instrumentation._wrapping import Around
from otel_blame.instrumentation.core import (
    AgentTurn,
    TaskRun,
    current_task,
    offer_tool_call,
    record_message,
    task,
)
from otel_blame.instrumentation.interception import current_interceptor

SOURCE = "autogen"
# an agent's turn whose reply is generated but not yet sent: (turn, when generate_reply returned)
_pending: weakref.WeakKeyDictionary[Any, tuple[AgentTurn, int]] = weakref.WeakKeyDictionary()
# context captured by ``run`` for the chat its thread starts, keyed by the agents involved
_handoffs: weakref.WeakKeyDictionary[Any, contextvars.Context] = weakref.WeakKeyDictionary()
_tool_names: weakref.WeakKeyDictionary[TaskRun, dict[str, str]] = weakref.WeakKeyDictionary()


def forget() -> None:
    """Drop what the hooks keep between calls (after uninstrument)."""
    for turn, ended in list(_pending.values()):
        turn.close(ended)
    _pending.clear()
    _handoffs.clear()


# -- steps -----------------------------------------------------------------------------------


def process_message_before_send(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    processed = wrapped(*args, **kwargs)
    recipient = args[1] if len(args) > 1 else kwargs.get("recipient")
    if _is_manager_relay(instance, recipient):
        return processed
    try:
        return _send(instance, processed)
    except Exception:
        HOOK_ERRORS.record("autogen.send")
        return processed


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


def _send(sender: Any, message: Any) -> Any:
    """The message on the message path: recorded as the sender's turn's answer (or as a step of its
    own when no turn is open), returned as it goes out (an interceptor may have changed it)."""
    run = current_task()
    pending = _pending.pop(sender, None)
    turn = pending[0] if pending is not None else None
    if turn is not None and turn.run is not run:  # a reply generated in another task
        turn.close(pending[1])
        turn = None
    try:
        return _answer(turn, sender, message, run)
    finally:
        if turn is not None:
            turn.close()


def _answer(turn: AgentTurn | None, sender: Any, message: Any, run: TaskRun | None) -> Any:
    """Record the sent message; return it, or a copy with what the interceptor changed."""

    def step(content: Any, role: str = "assistant", **fields: Any) -> str:
        if turn is not None:
            return turn.answer(content, role, message=message, **fields)
        return record_message(sender.name, content, role, source=SOURCE, message=message, **fields)

    if not isinstance(message, Mapping):
        text = to_text(message)
        kind = StepKind.CODE_EXECUTION if _is_code_result(sender, text) else StepKind.MESSAGE
        sent = step(text, "assistant", kind=kind)
        return message if sent == text else sent
    role = message.get("role") or "assistant"
    content = _content_text(message.get("content"))
    tool_responses = message.get("tool_responses")
    if tool_responses or role in ("tool", "function"):
        names = _tool_names.get(run, {}) if run is not None else {}
        call_ids = [to_text(r.get("tool_call_id")) for r in tool_responses or () if isinstance(r, Mapping)]
        tool_name = message.get("name") if role == "function" else None
        tool_name = tool_name or ", ".join(dict.fromkeys(names.get(i, "tool") for i in call_ids)) or "tool"
        sent = step(
            content,
            "tool",
            kind=StepKind.TOOL,
            tool_name=tool_name,
            tool_call_id=", ".join(call_ids) or None,
            is_error=_tool_failed(tool_responses),
        )
        return message if content is None or sent == to_text(content) else _with_content(message, sent)
    message = _with_offered_tool_calls(sender, message, run)
    tool_calls = message.get("tool_calls")
    if message.get("function_call"):
        tool_calls = [*(tool_calls or []), {"function": message["function_call"]}]
    if tool_calls and run is not None:
        names = _tool_names.setdefault(run, {})
        for call in tool_calls:
            function = call.get("function") or {}
            if call.get("id") is not None:
                names[to_text(call["id"])] = to_text(function.get("name"))
    kind = StepKind.CODE_EXECUTION if _is_code_result(sender, content) else StepKind.MESSAGE
    sent = step(
        content if content is not None or not tool_calls else None,
        role,
        kind=kind,
        tool_calls=tool_calls,
        is_error=kind is StepKind.CODE_EXECUTION and not to_text(content).startswith("exitcode: 0"),
    )
    return message if content is None or sent == to_text(content) else _with_content(message, sent)


def _with_content(message: Mapping[str, Any], text: str) -> dict[str, Any]:
    """A copy of the message dict with its text replaced (a tool result's first response too)."""
    changed = dict(message)
    changed["content"] = text
    responses = changed.get("tool_responses")
    if isinstance(responses, list) and responses:
        changed["tool_responses"] = [{**dict(responses[0]), "content": text}, *responses[1:]]
    return changed


def _with_offered_tool_calls(sender: Any, message: Mapping[str, Any], run: TaskRun | None) -> Any:
    """The message's tool calls offered on the message path before the executor runs them; a copy
    of the message with the changed arguments / tool names, or the message itself."""
    calls = message.get("tool_calls")
    if not calls or current_interceptor() is None:
        return message
    replaced = list(calls)
    for position, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        changed = offer_tool_call(
            getattr(sender, "name", None),
            to_text(function.get("arguments")),
            function.get("name"),
            message=message,
            source=SOURCE,
            task=run,
        )
        if changed is not None:
            new_function = {
                **function,
                "arguments": changed.text,
                "name": changed.tool_name or function.get("name"),
            }
            replaced[position] = {**call, "function": new_function}
    if replaced == list(calls):
        return message
    return {**message, "tool_calls": replaced}


def _is_code_result(sender: Any, content: Any) -> bool:
    """The executor agent's report of running code (AG2 formats it as ``exitcode: N ...``)."""
    return isinstance(content, str) and content.startswith("exitcode:") and _uses_code_execution(sender)


def _tool_failed(tool_responses: Any) -> bool:
    for response in tool_responses or ():
        if isinstance(response, Mapping) and to_text(response.get("content")).startswith("Error:"):
            return True
    return False


def _open_turn(wrapped: Any, agent: Any, args: Any, kwargs: Any) -> Any:
    run = current_task()
    if run is None:
        return None
    earlier = _pending.pop(agent, None)
    if earlier is not None:  # a reply generated and never sent: its turn ends where it returned
        earlier[0].close(earlier[1])
    turn = AgentTurn(getattr(agent, "name", None), task=run, source=SOURCE)
    turn.activate()
    return (agent, turn), args, kwargs


def _reply_generated(state: Any, reply: Any, error: BaseException | None) -> Any:
    agent, turn = state
    turn.deactivate()
    try:
        if error is not None:
            turn.fail(error)
            turn.close()
        elif reply is None:
            turn.close()  # nothing to say: an agent invocation without a message of its own
        else:
            _pending[agent] = (turn, time.time_ns())
    except Exception:
        HOOK_ERRORS.record("autogen.generate_reply")
        turn.close()
    return reply


#: ``generate_reply`` / ``a_generate_reply``: an agent's turn, open until its reply is sent
_turn = Around("autogen.generate_reply", _open_turn, _reply_generated)
generate_reply = _turn.sync
a_generate_reply = _turn.coroutine


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


def _recipient(args: Any, kwargs: Any) -> Any:
    return args[0] if args else kwargs.get("recipient")


def _open_root(wrapped: Any, sender: Any, args: Any, kwargs: Any) -> Any:
    """A chat started outside ``task()`` gets a root of its own."""
    if current_task() is not None:
        return None
    root = task(
        _task_name(sender, _recipient(args, kwargs)),
        input=_initial_input(kwargs),
        attributes={semconv.INSTRUMENTATION_SOURCE: SOURCE},
    )
    return (root, root.__enter__()), args, kwargs


def _close_root(state: Any, result: Any, error: BaseException | None) -> Any:
    root, run = state
    if error is None:
        if run is not None:
            run.note_final_output(getattr(result, "summary", None))
    root.__exit__(type(error) if error else None, error, None)
    return result


_chat = Around("autogen.initiate_chat", _open_root, _close_root)
a_initiate_chat = _chat.coroutine


def initiate_chat(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``initiate_chat``: in the context ``run`` handed over when this chat runs in its thread."""
    handoff = _pop_handoff(instance, _recipient(args, kwargs))
    if handoff is not None and current_task() is None:
        return handoff.run(_chat.sync, wrapped, instance, args, kwargs)
    return _chat.sync(wrapped, instance, args, kwargs)


def thread_starter(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``run`` / ``run_iter`` start the chat in a new thread: hand it the caller's context."""
    if current_task() is not None:
        try:
            context = contextvars.copy_context()
            for agent in (instance, _recipient(args, kwargs)):
                if agent is not None:
                    _handoffs[agent] = context
        except Exception:
            HOOK_ERRORS.record("autogen.run")
    return wrapped(*args, **kwargs)
