"""The AgentChat hooks: run roots, agent turns as envelope spans, tool runs as envelope steps.

- ``BaseGroupChat.run_stream`` (so ``run`` too: RoundRobinGroupChat, SelectorGroupChat, Swarm,
  MagenticOne, GraphFlow) and ``BaseChatAgent.run`` / ``run_stream``: a run outside any task gets a
  root ``invoke_workflow {team or agent name}``; the run's input messages are steps (their
  ``source``, usually ``user``) of the outermost run only.
- ``on_messages_stream`` of the built-in agents: each call is one agent turn, an
  :class:`~otel_blame.instrumentation.core.AgentTurn` current while the agent's generator runs (its
  model calls nest under it) and answered with the turn's final message (a ``HandoffMessage``
  included). A ``ToolCallRequestEvent`` the agent yields is a step of that agent, under the turn.
- ``BaseTool.run_json``: each tool execution (handoff tools included) is an envelope
  ``execute_tool {tool}`` step under the turn; a tool that raises is an error step with
  ``error.type`` (AgentChat answers the model with the error text and the run goes on).

Turns outside any task are not recorded (an agent driven by hand with ``on_messages``: wrap it in
``task(...)``).
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator
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

SOURCE = "agentchat"

# the task whose run encloses the running code (None: this run is the outermost)
_enclosing_run: contextvars.ContextVar[TaskRun | None] = contextvars.ContextVar(
    "otel_blame_agentchat_enclosing_run", default=None
)
# the agent turn the running code belongs to
_current_turn: contextvars.ContextVar[_Turn | None] = contextvars.ContextVar(
    "otel_blame_agentchat_turn", default=None
)


# -- runs: a root when no task is open, the input messages as steps ----------------------------


def _task_messages(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [("user", value)]
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


def _record_input(run: TaskRun, value: Any) -> None:
    """The run's input messages as steps, for the outermost run of the task only."""
    if _enclosing_run.get() is run:
        return
    for message in _task_messages(value):
        try:
            if isinstance(message, tuple):
                source, text = message
            else:
                source, text = getattr(message, "source", "user"), _message_text(message)
            record_message(source, text, "user", source=SOURCE, task=run, intercept=False)
        except Exception:
            HOOK_ERRORS.record("agentchat.input")


def _input_text(value: Any) -> str | None:
    texts = [m[1] if isinstance(m, tuple) else _message_text(m) for m in _task_messages(value)]
    return "\n".join(t for t in texts if t) or None


def _open_root(name: Any, value: Any) -> task:
    return task(name, input=_input_text(value), attributes={semconv.INSTRUMENTATION_SOURCE: SOURCE})


def _note_result(run: TaskRun | None, root: task | None, result: Any) -> None:
    """A root we opened carries the run's last message as the final output."""
    if run is None or root is None:
        return
    try:
        messages = getattr(result, "messages", None) or []
        last = next((m for m in reversed(messages) if _is_chat_message(m)), None)
        if last is not None:
            run.note_final_output(_message_text(last))
        reason = getattr(result, "stop_reason", None)
        if reason:
            run.span.set_attribute("otel_blame.agentchat.stop_reason", to_text(reason))
    except Exception:
        HOOK_ERRORS.record("agentchat.result")


def _enter_run(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """A team's or agent's run inside a task: the current one, else a root of its own."""
    value = kwargs.get("task")
    name = getattr(instance, "name", None) or type(instance).__name__
    root = _open_root(name, value) if current_task() is None else None
    run = root.__enter__() if root is not None else current_task()
    if run is None:  # no task, and none could be opened: the app's run, untouched
        return None
    _record_input(run, value)
    return (run, root, _enclosing_run.set(run)), args, kwargs


def _leave_run(state: Any, result: Any, error: BaseException | None) -> Any:
    run, root, token = state
    _reset(token)
    if result is not None:
        _note_result(run, root, result)
    if root is not None:
        root.__exit__(type(error) if error else None, error, None)
    return result


def _streamed(state: Any, item: Any) -> None:
    if type(item).__name__ == "TaskResult":
        _note_result(state[0], state[1], item)


def _reset(token: contextvars.Token) -> None:
    try:
        _enclosing_run.reset(token)
    except ValueError:
        pass  # reset in another context than set (a generator closed elsewhere)


#: ``BaseGroupChat.run_stream``, ``BaseChatAgent.run_stream`` and ``BaseChatAgent.run``
_run = Around("agentchat.run", _enter_run, _leave_run, each=_streamed)
team_run_stream = _run.async_generator
agent_run_stream = _run.async_generator
agent_run = _run.coroutine


# -- agent turns -----------------------------------------------------------------------------------


class _Turn:
    """One agent turn: the envelope span and the tool calls already recorded under it."""

    def __init__(self, agent: Any, envelope: AgentTurn) -> None:
        self.agent = agent
        self.envelope = envelope
        self.tool_call_ids: set[str] = set()


def turn(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    run = current_task()
    outer = _current_turn.get()
    if run is None or (outer is not None and outer.agent is instance):
        return wrapped(*args, **kwargs)  # outside a task, or a subclass calling super(): one turn
    try:
        envelope = AgentTurn(
            getattr(instance, "name", None) or type(instance).__name__,
            task=run,
            source=SOURCE,
            attributes=_agent_attributes(instance),
        )
    except Exception:
        HOOK_ERRORS.record("agentchat.turn")
        return wrapped(*args, **kwargs)
    return _turn_stream(_Turn(instance, envelope), wrapped(*args, **kwargs))


def _agent_attributes(agent: Any) -> dict[str, Any]:
    description = getattr(agent, "description", None)
    return {semconv.GEN_AI_AGENT_DESCRIPTION: description} if isinstance(description, str) else {}


async def _turn_stream(turn_: _Turn, stream: Any) -> AsyncIterator[Any]:
    """The agent's stream, each step of it run with the turn current (so what the agent does
    nests under the turn) and the consumer's context left alone between items."""
    envelope = turn_.envelope
    answered = False
    try:
        while True:
            envelope.activate()
            token = _current_turn.set(turn_)
            try:
                item = await stream.__anext__()
                _observe(turn_, item)
            except StopAsyncIteration:
                break
            finally:
                _current_turn.reset(token)
                envelope.deactivate()
            if type(item).__name__ == "Response":
                # the last item by contract; a caller such as ``on_messages`` stops iterating here
                _answer(envelope, item)
                envelope.close()
                answered = True
            yield item
    except BaseException as error:
        if not answered:
            # the turn's error is what it produced: an error step of its agent, so a run that
            # fails before any answer still has the step that failed (AgentTurn.fail, every framework)
            envelope.fail(error)
        raise
    finally:
        envelope.close()
        await _close(stream)


def _answer(envelope: AgentTurn, response: Any) -> None:
    """The turn's final message on its span, on the message path: what an interceptor changes is
    changed on the message the team passes on. Never raises."""
    message = getattr(response, "chat_message", None)
    try:
        text = _response_text(response)
        attributes = _response_attributes(response)
    except Exception:
        HOOK_ERRORS.record("agentchat.turn_end")
        text, attributes = None, {}
    content = getattr(message, "content", None)
    applicable = isinstance(content, str) and text == content  # a text the message carries as is
    sent = envelope.answer(text, attributes=attributes, message=message, intercept=applicable)
    if applicable and sent != content:
        try:
            message.content = sent
        except Exception:
            HOOK_ERRORS.record("agentchat.intercept")


async def _close(stream: Any) -> None:
    try:
        await stream.aclose()
    except Exception:
        pass


def _observe(turn_: _Turn, item: Any) -> None:
    """Record what a turn yields that is a message of its own: the model's tool-call requests, and
    tool results no ``run_json`` envelope saw (a workbench that does not go through ``BaseTool``)."""
    try:
        kind = type(item).__name__
        envelope = turn_.envelope
        if kind == "ToolCallRequestEvent":
            _offer_tool_calls(envelope, item)
            calls = [
                {"id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
                for c in getattr(item, "content", None) or ()
            ]
            record_message(
                getattr(item, "source", None) or envelope.agent,
                None,
                "assistant",
                tool_calls=calls,
                source=SOURCE,
                task=envelope.run,
            )
        elif kind == "ToolCallExecutionEvent":
            for result in getattr(item, "content", None) or ():
                call_id = getattr(result, "call_id", None)
                if call_id in turn_.tool_call_ids:
                    continue
                record_message(
                    envelope.agent,
                    getattr(result, "content", None),
                    "tool",
                    kind=StepKind.TOOL,
                    tool_name=getattr(result, "name", None) or "tool",
                    tool_call_id=call_id,
                    is_error=bool(getattr(result, "is_error", False)),
                    source=SOURCE,
                    task=envelope.run,
                    intercept=False,  # already in the agent's hands
                )
    except Exception:
        HOOK_ERRORS.record("agentchat.observe")


def _offer_tool_calls(envelope: AgentTurn, request: Any) -> None:
    """The model's tool calls on the message path before the agent runs them: the agent executes
    the very ``FunctionCall`` objects of the request, so a change made on them reaches the tool."""
    for call in getattr(request, "content", None) or ():
        changed = offer_tool_call(
            getattr(request, "source", None) or envelope.agent,
            call.arguments,
            call.name,
            message=request,
            source=SOURCE,
            task=envelope.run,
        )
        if changed is not None:
            call.arguments = changed.text
            call.name = changed.tool_name or call.name


def _is_chat_message(message: Any) -> bool:
    return any(cls.__name__ == "BaseChatMessage" for cls in type(message).__mro__)


def _message_text(message: Any) -> str:
    try:
        return to_text(message.to_model_text())
    except Exception:
        return to_text(getattr(message, "content", message))


def _response_text(response: Any) -> str | None:
    message = getattr(response, "chat_message", None)
    return _message_text(message) if message is not None else None


def _response_attributes(response: Any) -> dict[str, Any]:
    message = getattr(response, "chat_message", None)
    if message is None:
        return {}
    attributes: dict[str, Any] = {"otel_blame.agentchat.message_type": type(message).__name__}
    target = getattr(message, "target", None)
    if isinstance(target, str):
        attributes["otel_blame.agentchat.handoff_target"] = target
    return attributes


# -- tools -----------------------------------------------------------------------------------------


def _enter_tool(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    turn_ = _current_turn.get()
    if turn_ is None:
        return None
    call_id = kwargs.get("call_id", args[2] if len(args) > 2 else None)
    tool_name = getattr(instance, "name", None) or "tool"
    step = AgentTurn(
        turn_.envelope.agent,
        task=turn_.envelope.run,
        source=SOURCE,
        attributes={semconv.GEN_AI_TOOL_NAME: to_text(tool_name)},
    ).as_tool(tool_name, call_id)
    if call_id is not None:
        turn_.tool_call_ids.add(call_id)
    step.activate()
    return (step, instance, tool_name, call_id), args, kwargs


def _leave_tool(state: Any, result: Any, error: BaseException | None) -> Any:
    """The tool's result as its envelope's step, on the message path: a changed result is what the
    agent gets back (as the text ``return_value_as_string`` makes of it)."""
    step, instance, tool_name, call_id = state
    step.deactivate()
    try:
        if error is not None:
            step.fail(error)  # a tool error step
            return None
        try:
            text = instance.return_value_as_string(result)
        except Exception:
            text = to_text(result)
        sent = step.answer(
            text, "tool", kind=StepKind.TOOL, tool_name=tool_name, tool_call_id=call_id, message=result
        )
        return result if sent == text else sent
    finally:
        step.close()


#: ``BaseTool.run_json``: each tool execution (handoff tools included) an envelope step under the turn
tool_run = Around("agentchat.tool", _enter_tool, _leave_tool).coroutine
