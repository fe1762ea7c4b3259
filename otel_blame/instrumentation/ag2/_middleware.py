"""Hooks for the ``ag2`` 1.x package, through its own middleware chain.

``Agent._drive_scope`` is the one place every turn (``ask``, ``run``, ``resume``, replies)
instantiates its middleware; the instrumentor adds :class:`OtelBlameMiddleware`, bound to the
agent, to the turn's ``additional_middleware``. Each model call is an agent turn: an envelope span
``invoke_agent {agent}`` open (and current) while the model works, so the model client's ``chat``
span nests under it, ending with the response (text and tool calls) as its step. Each tool
execution is an ``execute_tool {tool}`` span open while the tool runs, ending with its result as a
step. The question that started the outermost turn is a ``user`` step. An ag2 ``Task``
(``async with agent.task(...)``) is an otel-blame task: its title names the root,
``complete``/``fail`` set the outcome. A turn with no task around it gets its own root.
"""

from __future__ import annotations

import contextvars
import functools
import json
from collections.abc import Sequence
from typing import Any

from otel_blame import semconv
from otel_blame.instrumentation._messages import StepKind, to_text
from otel_blame.instrumentation._safety import HOOK_ERRORS, guarded
from otel_blame.instrumentation._wrapping import Around
from otel_blame.instrumentation.core import (
    AgentTurn,
    TaskRun,
    current_task,
    offer_tool_call,
    record_message,
    set_outcome,
    task,
)

SOURCE = "ag2"
# the task whose ag2 turn encloses the running code (None: no turn yet, this is the outermost)
_enclosing_turn: contextvars.ContextVar[TaskRun | None] = contextvars.ContextVar(
    "otel_blame_ag2_enclosing_turn", default=None
)


def drive_scope(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``Agent._drive_scope``: our middleware joins the turn's ``additional_middleware``."""
    try:
        extra = tuple(kwargs.get("additional_middleware", ()))
        kwargs = {**kwargs, "additional_middleware": (*extra, _Factory(instance))}
    except Exception:  # never stand between the app and its turn
        HOOK_ERRORS.record("ag2.drive_scope")
    return wrapped(*args, **kwargs)


# -- ag2 Task: its lifecycle is an otel-blame task -------------------------------------------

_SCOPE = "_otel_blame_scope"


def _run_of(ag2_task: Any) -> TaskRun | None:
    scope = ag2_task.__dict__.get(_SCOPE)
    return scope[1] if scope else None


@guarded("ag2.task_enter")
def _open_task(ag2_task: Any) -> None:
    spec = getattr(ag2_task, "_spec", None)
    title = to_text(getattr(spec, "title", "")) or to_text(getattr(ag2_task, "_owner_id", "")) or "task"
    scope = task(
        title,
        input=to_text(getattr(spec, "description", "")) or title,
        conversation_id=getattr(ag2_task, "task_id", None),
        attributes={semconv.INSTRUMENTATION_SOURCE: SOURCE},
    )
    run = scope.__enter__()
    ag2_task.__dict__[_SCOPE] = (scope, run)


def _close_task(ag2_task: Any, exc: BaseException | None) -> None:
    opened = ag2_task.__dict__.pop(_SCOPE, None)
    if opened is not None:
        opened[0].__exit__(type(exc) if exc else None, exc, None)


def _is_running(ag2_task: Any) -> bool:
    metadata = getattr(ag2_task, "_metadata", None)
    return getattr(getattr(metadata, "state", None), "value", None) == "running"


async def task_enter(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    entered = await wrapped(*args, **kwargs)
    _open_task(instance)
    return entered


async def task_exit(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    exc = args[1] if len(args) > 1 else kwargs.get("exc")
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _close_task(instance, exc if isinstance(exc, BaseException) else None)


def _outcome(success: bool) -> Around:
    """``Task.complete`` / ``Task.fail`` of a running ag2 task: the outcome of its otel-blame task."""

    def enter(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        run = _run_of(instance) if _is_running(instance) else None
        if run is None:
            return None
        given = args[0] if args else kwargs.get("result" if success else "error")
        return (run, given), args, kwargs

    def leave(state: Any, returned: Any, error: BaseException | None) -> Any:
        run, given = state
        if error is None and success:
            set_outcome(True, final_output=given, task=run)
        elif error is None:
            reason = f"{type(given).__name__}: {given}" if isinstance(given, BaseException) else given
            set_outcome(False, reason=reason, task=run)
        return returned

    return Around(f"ag2.task_{'complete' if success else 'fail'}", enter, leave)


task_complete = _outcome(True).coroutine
task_fail = _outcome(False).coroutine


class _Factory:
    """A middleware factory bound to the agent whose turn it instruments."""

    def __init__(self, agent: Any) -> None:
        self.agent_name = to_text(getattr(agent, "name", None)) or "agent"

    def __call__(self, event: Any, context: Any) -> Any:
        return OtelBlameMiddleware(event, context, agent_name=self.agent_name)


def _base_middleware() -> type:
    from ag2.middleware import BaseMiddleware

    return BaseMiddleware


def _input_text(event: Any) -> str:
    """The text of a ``ModelRequest`` (its text parts), else the event's own text."""
    parts = getattr(event, "parts", None)
    if parts is None:
        return to_text(getattr(event, "content", None) or "")
    texts = []
    for part in parts:
        content = getattr(part, "content", None)
        if isinstance(content, str):
            texts.append(content)
        elif getattr(part, "data", None) is not None:
            texts.append(to_text(part.data))
    return "\n".join(texts)


def _tool_result_text(result: Any) -> str:
    inner = getattr(result, "result", None)
    parts = getattr(inner, "parts", None)
    if parts is None:
        return to_text(inner if inner is not None else getattr(result, "arguments", ""))
    texts = []
    for part in parts:
        if isinstance(getattr(part, "content", None), str):
            texts.append(part.content)
        elif getattr(part, "data", None) is not None:
            try:
                texts.append(json.dumps(part.data, default=str))
            except (TypeError, ValueError):
                texts.append(repr(part.data))
        elif getattr(part, "url", None):
            texts.append(part.url)
    return "\n".join(texts)


def _tool_calls(response: Any) -> list[dict[str, Any]]:
    calls = getattr(getattr(response, "tool_calls", None), "calls", None) or ()
    return [{"id": call.id, "function": {"name": call.name, "arguments": call.arguments}} for call in calls]


class _MiddlewareMixin:
    """The hooks; mixed into ag2's ``BaseMiddleware`` lazily so importing this module needs no ag2."""

    agent_name: str

    async def on_turn(self, call_next: Any, event: Any, context: Any) -> Any:
        run = current_task()
        if run is None:
            async with task(
                self.agent_name,
                input=_input_text(event),
                attributes={semconv.INSTRUMENTATION_SOURCE: SOURCE},
            ) as run:
                response = await self._turn(call_next, event, context, run)
                if run is not None:
                    run.note_final_output(getattr(response, "content", None))
                return response
        return await self._turn(call_next, event, context, run)

    async def _turn(self, call_next: Any, event: Any, context: Any, run: TaskRun | None) -> Any:
        if run is not None and _enclosing_turn.get() is not run:
            # The outermost turn of this task: its question is a step. A nested turn's question
            # is already recorded as the calling agent's tool call.
            self._record_question(run, event)
        token = _enclosing_turn.set(run)
        try:
            return await call_next(event, context)
        finally:
            _enclosing_turn.reset(token)

    @guarded("ag2.turn")
    def _record_question(self, run: TaskRun, event: Any) -> None:
        if type(event).__name__ in ("ModelRequest", "DrainedModelRequest"):
            record_message("user", _input_text(event), "user", task=run, source=SOURCE, intercept=False)

    async def on_llm_call(self, call_next: Any, events: Sequence[Any], context: Any) -> Any:
        with AgentTurn(self.agent_name, source=SOURCE) as turn:
            response = await call_next(events, context)
            self._record_response(turn, response)
            return response

    @guarded("ag2.llm_call")
    def _record_response(self, turn: AgentTurn, response: Any) -> None:
        """The model's response on the message path: its tool calls (before ag2 runs them) and its
        text; what an interceptor changes is changed on the response ag2 goes on with."""
        for call in getattr(getattr(response, "tool_calls", None), "calls", None) or ():
            changed = offer_tool_call(
                self.agent_name, call.arguments, call.name, message=response, source=SOURCE, task=turn.run
            )
            if changed is not None:
                call.arguments = changed.text
                call.name = changed.tool_name or call.name
                call.serialized_arguments = None  # parsed again from the changed arguments
        calls = _tool_calls(response)
        content = getattr(response, "content", None)
        sent = turn.answer(
            content if content is not None or not calls else None,
            "assistant",
            tool_calls=calls or None,
            attributes=_model_attributes(response),
            message=response,
        )
        if content is not None and sent != content and response.message is not None:
            response.message.content = sent

    async def on_tool_execution(self, call_next: Any, event: Any, context: Any) -> Any:
        turn = AgentTurn(self.agent_name, source=SOURCE)
        # a tool execution from its start: a failure leaving it is a tool error step (AgentTurn.fail)
        turn.as_tool(to_text(getattr(event, "name", None)) or "tool", getattr(event, "id", None))
        with turn:
            result = await call_next(event, context)
            self._record_tool(turn, event, result)
            return result

    @guarded("ag2.tool_execution")
    def _record_tool(self, turn: AgentTurn, event: Any, result: Any) -> None:
        failed = type(result).__name__ == "ToolErrorEvent"
        text = _tool_result_text(result)
        sent = turn.answer(
            text,
            "tool",
            kind=StepKind.TOOL,
            tool_name=getattr(event, "name", None) or "tool",
            tool_call_id=getattr(event, "id", None),
            is_error=failed,
            message=result,
        )
        if sent != text:  # the model gets the changed result
            from ag2.events.tool_events import ToolResult

            result.result = ToolResult(sent)


def _model_attributes(response: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    model = getattr(response, "model", None)
    if isinstance(model, str):
        attributes[semconv.GEN_AI_RESPONSE_MODEL] = model
    provider = getattr(response, "provider", None)
    if isinstance(provider, str):
        attributes[semconv.GEN_AI_PROVIDER_NAME] = provider
    return attributes


@functools.cache
def _middleware_class() -> type:
    base = _base_middleware()
    return type("OtelBlameMiddleware", (_MiddlewareMixin, base), {"__module__": __name__})


def OtelBlameMiddleware(event: Any, context: Any, *, agent_name: str) -> Any:  # noqa: N802 - a class factory
    """An ag2 middleware instance that records this turn's messages as steps of the current task."""
    middleware = _middleware_class()(event, context)
    middleware.agent_name = agent_name
    return middleware
