"""Hooks for the OpenAI Agents SDK (``openai-agents``, module ``agents``), through its ``RunHooks``.

Every run goes through ``AgentRunner.run`` (``Runner.run`` and ``Runner.run_sync`` included) or
``AgentRunner.run_streamed``. The instrumentor wraps both so the run's ``hooks`` become a
:class:`RunHooks` of ours that records each step and then forwards every callback to the app's own
hooks, unchanged. Run hooks fire whether or not the SDK's own tracing is on, so nothing here
depends on (or exports through) ``agents.tracing``.

Steps: the run's input is a ``user`` step (only for the outermost run of a task: a nested run, an
agent used as a tool, was already asked through its caller's tool call); each model response is a
step of the agent that made it (text and tool calls); each tool result is a ``tool`` step; each
handoff is a ``tool`` step of the agent handing off (named by its transfer tool). A run with no
task open gets its own root, named after the starting agent; its final output is noted on the root.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
import time
import types
import weakref
from typing import Any

from otel_blame import semconv
from otel_blame.instrumentation._messages import StepKind, name_of, to_text
from otel_blame.instrumentation._safety import HOOK_ERRORS, guarded
from otel_blame.instrumentation._wrapping import Around
from otel_blame.instrumentation.core import (
    AgentTurn,
    TaskRun,
    current_task,
    offer_message,
    offer_tool_call,
    record_message,
    task,
)
from otel_blame.instrumentation.interception import current_interceptor

SOURCE = "openai_agents"
# the agent turn (one model call and the tools it asked for) the running code is inside
_turn: contextvars.ContextVar[AgentTurn | None] = contextvars.ContextVar(
    "otel_blame_openai_agents_turn", default=None
)
# the function tool execution (an ``execute_tool`` envelope) the running code is inside
_tool_turn: contextvars.ContextVar[AgentTurn | None] = contextvars.ContextVar(
    "otel_blame_openai_agents_tool", default=None
)
TOOL_EXECUTOR = ("agents.run_internal.tool_execution", "_FunctionToolBatchExecutor._run_single_tool")
FAILURE_FORMATTER_MODULES = ("agents.tool", "agents.run_internal.tool_execution")
FAILURE_FORMATTER = "maybe_invoke_function_tool_failure_error_function"
# a function tool's context -> the type of the exception the SDK turned into the tool's result
_failed_tools: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
# a tool envelope (by id) -> the result text an interceptor put in place of the tool's own
_changed_results: dict[int, str] = {}
# the task whose run encloses the running code (None: no run yet, this is the outermost)
_enclosing_run: contextvars.ContextVar[TaskRun | None] = contextvars.ContextVar(
    "otel_blame_openai_agents_enclosing_run", default=None
)


async def failure_formatter(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A function tool that raises answers the model with an error text (by default a fixed one);
    the SDK's formatter is the one place that still sees the exception, so a tool step can be an
    error step. Optional: without it tool steps are recorded, just never as errors."""
    result = await wrapped(*args, **kwargs)
    if result is not None:
        _note_tool_failure(kwargs.get("context"), kwargs.get("error"))
    return result


@guarded("openai_agents.tool_failure")
def _note_tool_failure(context: Any, error: Any) -> None:
    if context is not None and isinstance(error, BaseException):
        try:
            _failed_tools[context] = type(error).__qualname__
        except TypeError:  # a context that cannot be weakly referenced: no error mark
            pass


# -- the runner: a task root when none is open, our hooks in front of the app's ---------------


async def single_turn(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``run_single_turn`` / ``run_single_turn_streamed``: one turn of the runner loop (a model call
    and the tools it asks for) inside an envelope span ``invoke_agent {agent}``, current while the
    turn runs, so the model client's ``chat`` span and the tool steps nest under it."""
    bindings = kwargs.get("bindings", args[1] if len(args) > 1 else None)
    turn = _open_turn(getattr(bindings, "public_agent", None))
    if turn is None:
        return await wrapped(*args, **kwargs)
    token = _turn.set(turn)
    try:
        with turn:
            return await wrapped(*args, **kwargs)
    finally:
        _turn.reset(token)


async def tool_run(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``_FunctionToolBatchExecutor._run_single_tool``: one function tool call, from its start to its
    return, as an envelope ``execute_tool {tool}`` under the agent's turn, current while the tool runs
    (the SDK runs the tool in a task created here, which inherits it), so whatever the tool does (an
    agent asked as a tool, its model calls) nests under it. ``on_tool_end`` answers it."""
    turn = _turn.get()
    func_tool = kwargs.get("func_tool")
    if turn is None or func_tool is None or turn.run is None:
        return await wrapped(*args, **kwargs)
    try:
        tool_call = kwargs.get("tool_call")
        agent = getattr(instance, "public_agent", None)
        step = AgentTurn(_name_of(agent) if agent is not None else turn.agent, task=turn.run, source=SOURCE)
        step.as_tool(getattr(func_tool, "name", None) or "tool", getattr(tool_call, "call_id", None))
    except Exception:
        HOOK_ERRORS.record("openai_agents.tool_run")
        return await wrapped(*args, **kwargs)
    token = _tool_turn.set(step)
    try:
        with step:  # a tool that raises (no failure formatter) is a tool error step: AgentTurn.fail
            result = await wrapped(*args, **kwargs)
    finally:
        _tool_turn.reset(token)
        changed = _changed_results.pop(id(step), None)
    if changed is None:
        return result
    _change_output_item(instance, kwargs.get("task_state"), changed)
    return changed


@guarded("openai_agents.intercept")
def _change_output_item(executor: Any, task_state: Any, text: str) -> None:
    """The tool's output item (what the model gets next) with the interceptor's result: the SDK
    builds it before ``on_tool_end`` sees the result."""
    item = getattr(executor, "output_items_by_tool_run", {}).get(id(getattr(task_state, "tool_run", None)))
    if item is None:
        return
    item.output = text
    raw = item.raw_item
    if isinstance(raw, dict):
        raw["output"] = text
    else:
        raw.output = text


def _open_turn(agent: Any) -> AgentTurn | None:
    run_ = current_task()
    if run_ is None or agent is None:
        return None
    try:
        return AgentTurn(_name_of(agent), task=run_, source=SOURCE)
    except Exception:
        HOOK_ERRORS.record("openai_agents.turn")
        return None


def _run_input(args: tuple, kwargs: dict) -> tuple[Any, Any]:
    """``(starting_agent, input)`` of a call ``run(starting_agent, input, **options)``."""
    starting_agent = args[0] if args else kwargs.get("starting_agent")
    return starting_agent, args[1] if len(args) > 1 else kwargs.get("input")


def _enter_in_task(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    run_ = current_task()
    kwargs = _install_hooks(run_, _run_input(args, kwargs)[1], kwargs)
    return _enclosing_run.set(run_), args, kwargs


def _leave_in_task(token: Any, result: Any, error: BaseException | None) -> Any:
    _enclosing_run.reset(token)
    return result


#: a run inside the current task: our hooks in front of the app's
_in_task = Around("openai_agents.hooks", _enter_in_task, _leave_in_task)


async def run(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AgentRunner.run``: our hooks in front of the app's; a task root when none is open."""
    if current_task() is not None:
        return await _in_task.coroutine(wrapped, instance, args, kwargs)
    scope = _root_scope(*_run_input(args, kwargs))
    if scope is None:
        return await wrapped(*args, **kwargs)
    async with scope as run_:
        result = await _in_task.coroutine(wrapped, instance, args, kwargs)
        if run_ is not None:
            run_.note_final_output(getattr(result, "final_output", None))
        return result


def run_streamed(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AgentRunner.run_streamed``: as :func:`run`, the root ending when the stream's loop does."""
    if current_task() is not None:
        return _in_task.sync(wrapped, instance, args, kwargs)
    scope = _root_scope(*_run_input(args, kwargs))
    if scope is None:
        return wrapped(*args, **kwargs)
    # The stream's loop runs in a background asyncio task that copies the context at creation;
    # open the root in a copy of the caller's context so the loop sees it and the caller's own
    # context stays as it was. The root ends when the loop's task does.
    context = contextvars.copy_context()

    def start() -> tuple[TaskRun | None, Any]:
        run_ = scope.__enter__()
        try:
            return run_, _in_task.sync(wrapped, instance, args, kwargs)
        except BaseException as error:
            scope.__exit__(type(error), error, None)
            raise

    run_, result = context.run(start)
    _close_with_stream(context, scope, run_, result)
    return result


def _close_with_stream(context: contextvars.Context, scope: task, run_: TaskRun | None, result: Any) -> None:
    """End the streamed run's root when its loop task is done (failed if the stream failed)."""

    def end(error: BaseException | None) -> None:
        try:
            context.run(scope.__exit__, type(error) if error else None, error, None)
        except Exception:
            HOOK_ERRORS.record("openai_agents.stream_end")

    def done(finished: Any) -> None:
        error: BaseException | None = None
        try:
            error = finished.exception() if not finished.cancelled() else asyncio.CancelledError()
            if error is None:
                error = getattr(result, "_stored_exception", None)
            if error is None:
                if run_ is not None:
                    run_.note_final_output(getattr(result, "final_output", None))
        except Exception:
            HOOK_ERRORS.record("openai_agents.stream_end")
        end(error)

    loop_task = getattr(result, "run_loop_task", None)
    if loop_task is None or not hasattr(loop_task, "add_done_callback"):
        end(None)
        return
    loop_task.add_done_callback(done)


def _root_scope(starting_agent: Any, input: Any) -> task | None:  # noqa: A002
    try:
        return task(
            _name_of(starting_agent),
            input=input if isinstance(input, str) else _input_text(input) or None,
            attributes={semconv.INSTRUMENTATION_SOURCE: SOURCE},
        )
    except Exception:
        HOOK_ERRORS.record("openai_agents.root")
        return None


def _install_hooks(run_: TaskRun | None, input: Any, kwargs: dict) -> dict:  # noqa: A002
    """The run's keyword arguments with our hooks in front of the app's (unchanged on any doubt)."""
    try:
        from agents.lifecycle import RunHooksBase

        app_hooks = kwargs.get("hooks")
        if app_hooks is not None and not isinstance(app_hooks, RunHooksBase):
            return kwargs  # the SDK rejects these itself, with its own error
        recorder = _StepRecorder(run_)
        hooks = _hooks_class()(recorder, app_hooks)
        if run_ is not None and _enclosing_run.get() is not run_:
            recorder.record_input(input)
        return {**kwargs, "hooks": hooks}
    except Exception:
        HOOK_ERRORS.record("openai_agents.hooks")
        return kwargs


@functools.cache
def _hooks_class() -> type:
    """A ``RunHooks`` that forwards every ``on_*`` callback of the SDK to the app's hooks, after ours."""
    from agents.lifecycle import RunHooks, RunHooksBase

    def forward(name: str) -> Any:
        async def callback(self: Any, *args: Any, **kwargs: Any) -> None:
            ours = getattr(self._otel_blame_recorder, name, None)
            if ours is not None:
                ours(*args, **kwargs)
            app_hooks = self._otel_blame_app_hooks
            if app_hooks is not None:
                await getattr(app_hooks, name)(*args, **kwargs)

        callback.__name__ = name
        return callback

    def __init__(self: Any, recorder: _StepRecorder, app_hooks: Any) -> None:  # noqa: N807
        self._otel_blame_recorder = recorder
        self._otel_blame_app_hooks = app_hooks

    namespace: dict[str, Any] = {"__init__": __init__, "__module__": __name__}
    for name, _member in inspect.getmembers(RunHooksBase, inspect.iscoroutinefunction):
        if name.startswith("on_"):
            namespace[name] = forward(name)
    return types.new_class("OtelBlameRunHooks", (RunHooks,), exec_body=lambda body: body.update(namespace))


# -- the steps ---------------------------------------------------------------------------------


class _StepRecorder:
    """Turns one run's hook callbacks into steps of its task (never raises)."""

    def __init__(self, run_: TaskRun | None) -> None:
        self.run = run_
        self._lock = threading.Lock()
        self._llm_started: dict[int, int] = {}
        self._tool_started: dict[Any, int] = {}
        self._calls_by_name: dict[str, str] = {}  # function-call name -> its latest call id

    @guarded("openai_agents.input")
    def record_input(self, input: Any) -> None:  # noqa: A002
        if isinstance(input, str):
            record_message("user", input, "user", task=self.run, source=SOURCE, intercept=False)
            return
        for item in input if isinstance(input, list) else ():
            role = _field(item, "role")
            if role in ("user", "system", "developer"):
                text = _text_of(_field(item, "content"))
                record_message(role, text, role, task=self.run, source=SOURCE, intercept=False)

    @guarded("openai_agents.llm_start")
    def on_llm_start(self, context: Any, agent: Any, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            self._llm_started[id(agent)] = time.time_ns()

    @guarded("openai_agents.llm_end")
    def on_llm_end(self, context: Any, agent: Any, response: Any, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            started = self._llm_started.pop(id(agent), None)
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for item in getattr(response, "output", None) or ():
            kind = _field(item, "type")
            if kind == "message":
                texts.append(_text_of(_field(item, "content")))
            elif kind == "function_call":
                call_id = _field(item, "call_id") or _field(item, "id")
                name = to_text(_field(item, "name"))
                arguments = _field(item, "arguments")
                calls.append({"id": call_id, "function": {"name": name, "arguments": arguments}})
                with self._lock:
                    self._calls_by_name[name] = call_id
            elif kind == "reasoning":
                continue
        content = "\n".join(t for t in texts if t) if texts or not calls else None
        turn = _turn.get()
        if turn is not None and not turn.answered and turn.run is self.run and turn.agent == _name_of(agent):
            # the response is the answer of the turn enclosing this model call (its envelope span)
            turn.answer(
                content,
                "assistant",
                tool_calls=calls or None,
                attributes=_usage_attributes(response, agent),
                message=response,
                intercept=False,  # offered where the model returned it (model_response)
            )
            return
        record_message(
            _name_of(agent),
            content,
            "assistant",
            tool_calls=calls or None,
            start_time_ns=started,
            attributes=_usage_attributes(response, agent),
            source=SOURCE,
            task=self.run,
            message=response,
            intercept=False,
        )

    @guarded("openai_agents.tool_start")
    def on_tool_start(self, context: Any, agent: Any, tool: Any, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            self._tool_started[_tool_key(context, tool)] = time.time_ns()

    @guarded("openai_agents.tool_end")
    def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any, *args: Any, **_: Any) -> None:
        with self._lock:
            started = self._tool_started.pop(_tool_key(context, tool), None)
        try:
            error_type = _failed_tools.pop(context, None)
        except TypeError:
            error_type = None
        tool_name = getattr(tool, "name", None) or getattr(context, "tool_name", None) or "tool"
        tool_call_id = getattr(context, "tool_call_id", None)
        attributes = {semconv.ERROR_TYPE: error_type} if error_type else None
        envelope = _tool_turn.get()
        if envelope is not None and not envelope.answered and envelope.run is self.run:
            # the result is the answer of the tool's own envelope span (opened where the tool started);
            # the envelope's wrapper hands the model what an interceptor made of it
            text = to_text(result)
            sent = envelope.answer(
                text,
                "tool",
                kind=StepKind.TOOL,
                tool_name=tool_name,
                tool_call_id=tool_call_id,
                is_error=error_type is not None,
                attributes=attributes,
                message=result,
            )
            if sent != text:
                _changed_results[id(envelope)] = sent
            return
        record_message(
            _name_of(agent),
            result,
            "tool",
            kind=StepKind.TOOL,
            tool_name=tool_name,
            tool_call_id=tool_call_id,
            is_error=error_type is not None,
            start_time_ns=started,
            attributes=attributes,
            source=SOURCE,
            task=self.run,
            intercept=False,  # no envelope to hand a change to the model: recorded as it is
        )

    @guarded("openai_agents.handoff")
    def on_handoff(self, context: Any, from_agent: Any, to_agent: Any, *args: Any, **kwargs: Any) -> None:
        tool_name = _handoff_tool_name(from_agent, to_agent)
        with self._lock:
            call_id = self._calls_by_name.get(tool_name)
        record_message(
            _name_of(from_agent),
            f"handoff to {_name_of(to_agent)}",
            "tool",
            kind=StepKind.TOOL,
            tool_name=tool_name,
            tool_call_id=call_id,
            source=SOURCE,
            task=self.run,
            intercept=False,  # the hand-off was offered as the model's call (kind handoff)
        )


def _enter_model_response(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    turn = _turn.get()
    if turn is None or turn.run is None or current_interceptor() is None:
        return None
    bindings = args[0] if args else kwargs.get("bindings")
    return (turn, getattr(bindings, "public_agent", None)), args, kwargs


def _leave_model_response(state: Any, response: Any, error: BaseException | None) -> Any:
    if error is None and response is not None:
        _offer_response(*state, response)
    return response


#: ``get_new_response``: the model's response on the message path as the SDK gets it, before the
#: runner reads its tool calls, hand-offs and text (a change made later would not reach them)
model_response = Around(
    "openai_agents.model_response", _enter_model_response, _leave_model_response
).coroutine


def _offer_response(turn: AgentTurn, agent: Any, response: Any) -> None:
    name = _name_of(agent) if agent is not None else turn.agent
    handoffs = {_handoff_tool_name(agent, h) for h in getattr(agent, "handoffs", None) or ()}
    texts = []
    for item in getattr(response, "output", None) or ():
        kind = _field(item, "type")
        if kind == "message":
            texts.append(_text_of(_field(item, "content")))
        elif kind == "function_call":
            tool_name = to_text(_field(item, "name"))
            changed = offer_tool_call(
                name,
                to_text(_field(item, "arguments")),
                tool_name,
                message=response,
                source=SOURCE,
                task=turn.run,
                handoff=tool_name in handoffs,
            )
            if changed is not None:
                item.arguments = changed.text
                item.name = changed.tool_name or tool_name
    text = "\n".join(t for t in texts if t)
    if text:
        changed = offer_message(name, text, message=response, source=SOURCE, task=turn.run)
        if changed is not None:
            _replace_text(response, changed.text)


def _replace_text(response: Any, text: str) -> None:
    """The response's text parts changed to ``text`` (in the first part; the others emptied)."""
    first = True
    for item in getattr(response, "output", None) or ():
        if _field(item, "type") != "message":
            continue
        for part in _field(item, "content") or ():
            if _field(part, "text") is None:
                continue
            value, first = (text if first else ""), False
            if isinstance(part, dict):
                part["text"] = value
            else:
                part.text = value


def _tool_key(context: Any, tool: Any) -> Any:
    return getattr(context, "tool_call_id", None) or (id(tool), id(context))


def _handoff_tool_name(from_agent: Any, to_agent: Any) -> str:
    """The transfer tool the model called: the matching handoff's own name, else the SDK default."""
    if isinstance(getattr(to_agent, "tool_name", None), str):  # a Handoff itself
        return to_agent.tool_name
    target = _name_of(to_agent)
    for handoff in getattr(from_agent, "handoffs", None) or ():
        tool_name = getattr(handoff, "tool_name", None)
        if getattr(handoff, "agent_name", None) == target and isinstance(tool_name, str):
            return tool_name
    try:
        from agents.handoffs import Handoff

        return Handoff.default_tool_name(to_agent)
    except Exception:
        return f"transfer_to_{target}"


def _name_of(agent: Any) -> str:
    return name_of(agent)


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _text_of(content: Any) -> str:
    """Text of a message content: a string, or a list of parts (output_text, input_text, refusal)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content if isinstance(content, list) else (content,):
        value = _field(part, "text")
        if value is None:
            value = _field(part, "refusal")
        if value is not None:
            texts.append(to_text(value))
    return "\n".join(texts)


def _input_text(input: Any) -> str:  # noqa: A002
    if not isinstance(input, list):
        return ""
    return "\n".join(_text_of(_field(item, "content")) for item in input if _field(item, "role") == "user")


def _usage_attributes(response: Any, agent: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    model = getattr(agent, "model", None)
    model_name = model if isinstance(model, str) else getattr(model, "model", None)
    if isinstance(model_name, str):
        attributes[semconv.GEN_AI_REQUEST_MODEL] = model_name
    usage = getattr(response, "usage", None)
    for key, field in (
        (semconv.GEN_AI_USAGE_INPUT_TOKENS, "input_tokens"),
        (semconv.GEN_AI_USAGE_OUTPUT_TOKENS, "output_tokens"),
    ):
        value = getattr(usage, field, None)
        if isinstance(value, int) and value > 0:
            attributes[key] = value
    return attributes
