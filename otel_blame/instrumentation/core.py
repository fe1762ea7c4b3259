"""The instrumentation core: task runs, agent turns, steps, and the one message path.

- A **task** (:class:`task`, :class:`TaskRun`) is the root span ``invoke_workflow {name}``; it
  numbers its steps 0, 1, 2, ... under a lock in the order they are recorded, whatever thread or
  asyncio task they come from. The current run travels in a context variable (as the
  OpenTelemetry context does); code running where context is not copied can pass ``task=run``.
- A **step** is one agent message or tool result: :func:`record_message` makes a point span for a
  message that already exists; an **agent turn** (:class:`AgentTurn`) is the envelope span
  ``invoke_agent {agent}`` from when the agent starts working to its answer, so the LLM and tool
  spans of the turn nest under it, and :meth:`AgentTurn.answer` makes it the turn's step.
- **The message path**: every step a framework hook records on its way to the recipient, and every
  tool call before its tool runs, is first offered to the installed interceptor
  (:mod:`otel_blame.instrumentation.interception`); the step records what the interceptor made of
  it, and the function returns it so the hook hands the change to the framework.

Which version of the GenAI conventions the spans follow (the legacy shape, or the latest with
``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``) is a setting of the task; the shapes
differ only where the root's attributes, ``_identity`` and ``_step`` are made (docs/semconv.md, "Two
shapes of the conventions").

When a root task ends, its trace id is logged (logger ``otel_blame.instrumentation``, INFO unless
``OTEL_BLAME_TRACE_ID_LOG_LEVEL`` says otherwise) and kept for :func:`last_trace_id`, so an app
whose answer turns out wrong later can send ``otel-blame verdict TRACE_ID --failed``.
"""

from __future__ import annotations

import contextvars
import inspect
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_blame import semconv
from otel_blame.instrumentation import interception
from otel_blame.instrumentation._messages import (
    MESSAGE_ROLES,
    PreparedContent,
    StepKind,
    agent_name,
    output_messages,
    prepare,
    to_text,
)
from otel_blame.instrumentation._safety import HOOK_ERRORS, guarded, logger
from otel_blame.instrumentation._settings import CaptureSettings, current_settings, tracer
from otel_blame.instrumentation._wrapping import Around
from otel_blame.instrumentation.interception import OutgoingMessage

F = TypeVar("F", bound=Callable[..., Any])
_UNSET = object()

_CURRENT_TASK: contextvars.ContextVar[TaskRun | None] = contextvars.ContextVar(
    "otel_blame_task", default=None
)
_warned: set[str] = set()
_warned_lock = threading.Lock()
# steps a task keeps in memory for attribute_current_task (beyond them, only spans are made), and the
# content they keep in all (beyond it, later steps are kept without their text)
MAX_REMEMBERED_STEPS = 10_000
MAX_REMEMBERED_CHARS = 8 * 1024 * 1024
MAX_STATUS_DESCRIPTION = 1024  # characters of a raised exception's text kept as the status description


class RememberedStep(NamedTuple):
    """A step as the task recorded it (content as captured: capped, redacted, or empty when off)."""

    index: int
    agent: str
    role: str
    kind: str
    content: str
    tool_name: str | None = None
    is_error: bool = False


def warn_once(key: str, message: str) -> None:
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    logger.warning(message)


class _LastTrace:
    """The trace id of the root task that ended last in this process (for late verdicts)."""

    def __init__(self) -> None:
        self.trace_id: str | None = None


_LAST_TRACE = _LastTrace()


def format_trace_id(trace_id: int) -> str:
    """The 32-hex-digit form ``otel-blame verdict``, Jaeger and Tempo use."""
    return f"{trace_id:032x}"


def current_trace_id() -> str | None:
    """The trace id (32 hex digits) of the task the calling code runs in, else of the current span."""
    run = _CURRENT_TASK.get()
    if run is not None:
        return run.trace_id_hex
    span_context = trace.get_current_span().get_span_context()
    return format_trace_id(span_context.trace_id) if span_context.is_valid else None


def last_trace_id() -> str | None:
    """The trace id of the root task that ended last in this process (None before the first)."""
    return _LAST_TRACE.trace_id


class TaskRun:
    """One running task: its root span, its settings and its step counter."""

    def __init__(
        self,
        name: str,
        span: Span,
        conversation_id: str,
        settings: CaptureSettings,
        parent: TaskRun | None = None,
    ) -> None:
        self.name = name
        self.span = span
        self.conversation_id = conversation_id
        self.settings = settings
        self.parent = parent
        self.source: str | None = None  # otel_blame.instrumentation.source, set on the root once
        self.outcome: str | None = None
        self.started_ns = time.time_ns()
        self._lock = threading.Lock()
        self._next_index = 0
        self._span_context = span.get_span_context()
        self._root_context = trace.set_span_in_context(span)
        self._open_turns: dict[int, Any] = {}  # agent turns not yet ended, ended with the task
        self.input: str | None = None  # as captured (None when content capture is off)
        self.expected_output: str | None = None
        self._steps: list[RememberedStep] = []
        self._remembered_chars = 0

    def add_step(self, agent: str, role: str, kind: str, content: str, tool_name: Any, is_error: bool) -> int:
        """The next step index, and the step kept for :meth:`remembered_steps` (bounded by
        ``MAX_REMEMBERED_STEPS``; past ``MAX_REMEMBERED_CHARS`` without its text)."""
        with self._lock:
            index = self._next_index
            self._next_index += 1
            if len(self._steps) < MAX_REMEMBERED_STEPS:
                if self._remembered_chars + len(content) > MAX_REMEMBERED_CHARS:
                    content = ""
                self._remembered_chars += len(content)
                self._steps.append(RememberedStep(index, agent, role, kind, content, tool_name, is_error))
        return index

    def note_final_output(self, value: Any) -> None:
        """The run's final output on the root (as captured: capped, redacted; nothing when content
        capture is off or there is none). Every hook that opened a root notes it here."""
        if value is None or value == "" or not self.settings.capture_content:
            return
        try:
            self.span.set_attribute(semconv.TASK_FINAL_OUTPUT, prepare(value, self.settings).text)
        except Exception:
            HOOK_ERRORS.record("task.final_output")

    def note_source(self, source: str | None) -> None:
        """Which hook records into this task: on the root, once (not on every step)."""
        if source and self.source is None:
            self.source = source
            self.span.set_attribute(semconv.INSTRUMENTATION_SOURCE, source)

    def remembered_steps(self) -> list[RememberedStep]:
        """The steps recorded so far, in step-index order."""
        with self._lock:
            return sorted(self._steps, key=lambda step: step.index)

    @property
    def trace_id(self) -> int:
        return self._span_context.trace_id

    @property
    def trace_id_hex(self) -> str:
        return format_trace_id(self._span_context.trace_id)

    def turn_opened(self, turn: Any) -> None:
        self._open_turns[id(turn)] = turn  # one dict operation: atomic, no lock needed

    def turn_closed(self, turn: Any) -> None:
        self._open_turns.pop(id(turn), None)

    def close_open_turns(self) -> None:
        """End the agent turns a framework opened and never finished (their spans would be lost)."""
        left, self._open_turns = self._open_turns, {}
        for turn in list(left.values()):
            turn.close()

    @property
    def steps_recorded(self) -> int:
        with self._lock:
            return self._next_index

    def parent_context(self) -> otel_context.Context:
        """The current context when it is inside this task's trace, else the task root."""
        current = otel_context.get_current()  # read once: the span lookup below reuses it
        span_context = trace.get_current_span(current).get_span_context()
        if span_context.is_valid and span_context.trace_id == self._span_context.trace_id:
            return current
        return self._root_context

    def prepare(self, value: Any) -> PreparedContent:
        return prepare(value, self.settings)

    def record_message(self, agent: Any, content: Any, role: str = "assistant", **kwargs: Any) -> str:
        """:func:`record_message` on this task, whatever the current context is."""
        return record_message(agent, content, role, task=self, **kwargs)

    def set_outcome(self, success: bool, final_output: Any = None, reason: str | None = None) -> None:
        set_outcome(success, final_output, reason, task=self)


def current_task() -> TaskRun | None:
    """The task the calling code runs in, or None."""
    return _CURRENT_TASK.get()


class task:  # noqa: N801 - used like a function: ``with task("name"):`` / ``@task("name")``
    """Open a task: root span ``invoke_workflow {name}``; steps recorded inside are numbered 0, 1, ...

    A context manager (``with`` / ``async with``, yielding the :class:`TaskRun`) and a decorator
    of sync and async functions (each call is one task). A task inside a task is a task of its
    own: its root span is a child of the outer task's span and its steps count from 0.
    An exception from the app is recorded on the root span (outcome ``failure`` unless one was
    set) and re-raised unchanged.
    """

    def __init__(
        self,
        name: Any = "task",
        input: Any = None,  # noqa: A002 - the issue's public argument name
        expected_output: Any = None,
        conversation_id: Any = None,
        *,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = agent_name(name) if name is not None else "task"
        self.input = input
        self.expected_output = expected_output
        self.conversation_id = to_text(conversation_id) if conversation_id is not None else None
        self.attributes = dict(attributes or {})
        self._tokens: list[tuple[Any, Any, TaskRun | None]] = []

    # -- context manager -----------------------------------------------------------------
    def __enter__(self) -> TaskRun | None:
        run = self._start()
        return run

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        self._finish(exc)
        return False

    async def __aenter__(self) -> TaskRun | None:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)

    # -- decorator -------------------------------------------------------------------------
    def __call__(self, function: F) -> F:
        def enter(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            scope = task(
                self.name, self.input, self.expected_output, self.conversation_id, attributes=self.attributes
            )
            scope.__enter__()
            return scope, args, kwargs

        def leave(scope: task, result: Any, error: BaseException | None) -> Any:
            scope.__exit__(type(error) if error else None, error, None)
            return result

        return Around("task", enter, leave).decorate(function)  # type: ignore[return-value]

    # -- internals -------------------------------------------------------------------------
    def _start(self) -> TaskRun | None:
        try:
            settings = current_settings()
            parent = _CURRENT_TASK.get()
            conversation_id = self.conversation_id or uuid.uuid4().hex
            attributes: dict[str, Any] = {
                semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_WORKFLOW,
                semconv.GEN_AI_CONVERSATION_ID: conversation_id,
                semconv.TASK_NAME: self.name,
            }
            if settings.latest_genai_conventions:
                attributes[semconv.GEN_AI_WORKFLOW_NAME] = self.name
            if settings.capture_content:
                for key, value in (
                    (semconv.TASK_INPUT, self.input),
                    (semconv.TASK_EXPECTED_OUTPUT, self.expected_output),
                ):
                    if value is not None:
                        attributes[key] = prepare(value, settings).text
            for key, value in self.attributes.items():
                if isinstance(key, str) and isinstance(value, str | bool | int | float):
                    attributes[key] = value
            span = tracer().start_span(
                semconv.workflow_span_name(self.name), kind=SpanKind.INTERNAL, attributes=attributes
            )
            run = TaskRun(self.name, span, conversation_id, settings, parent)
            source = attributes.get(semconv.INSTRUMENTATION_SOURCE)
            run.source = source if isinstance(source, str) else None
            run.input = attributes.get(semconv.TASK_INPUT)
            run.expected_output = attributes.get(semconv.TASK_EXPECTED_OUTPUT)
            otel_token = otel_context.attach(trace.set_span_in_context(span))
            task_token = _CURRENT_TASK.set(run)
            self._tokens.append((otel_token, task_token, run))
            return run
        except Exception:
            HOOK_ERRORS.record("task.start")
            self._tokens.append((None, None, None))
            return None

    def _finish(self, exc: BaseException | None) -> None:
        if not self._tokens:
            return
        otel_token, task_token, run = self._tokens.pop()
        if run is None:
            return
        try:
            if exc is not None:
                run.span.record_exception(exc, escaped=True)
                reason = f"{type(exc).__name__}: {exc}"
                if run.outcome is None:
                    _apply_outcome(run, False, None, reason)
                else:
                    run.span.set_status(Status(StatusCode.ERROR, reason[:1024]))
                run.span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)
        except Exception:
            HOOK_ERRORS.record("task.finish")
        try:
            run.close_open_turns()  # before the task's context is restored: turns detach first
        except Exception:
            HOOK_ERRORS.record("task.finish")
        for reset in (
            lambda: _CURRENT_TASK.reset(task_token),
            lambda: otel_context.detach(otel_token),
        ):
            try:
                reset()
            except Exception:
                # Exited in another context than entered (e.g. an async generator): nothing to restore.
                pass
        try:
            run.span.end()
            if run.parent is None:
                _announce_trace(run)
        except Exception:
            HOOK_ERRORS.record("task.finish")


def _announce_trace(run: TaskRun) -> None:
    """Keep and log the finished root task's trace id: what ``otel-blame verdict`` needs later."""
    trace_id = run.trace_id_hex
    _LAST_TRACE.trace_id = trace_id
    level = logging.getLevelName(os.environ.get(semconv.ENV_TRACE_ID_LOG_LEVEL, "").strip().upper() or "INFO")
    logger.log(
        level if isinstance(level, int) else logging.INFO,
        "otel-blame: task %r ended (outcome %s), trace_id=%s; if its answer turns out wrong: "
        "otel-blame verdict %s --failed",
        run.name,
        run.outcome or "not set",
        trace_id,
        trace_id,
    )


def set_outcome(
    success: bool, final_output: Any = None, reason: Any = None, *, task: TaskRun | None = None
) -> None:
    """Mark the current task ``success`` or ``failure``; failure sets the root span's status to ERROR."""
    _set_outcome(success, final_output, reason, task)


@guarded("set_outcome")
def _set_outcome(success: Any, final_output: Any, reason: Any, run: TaskRun | None) -> None:
    run = run if run is not None else _CURRENT_TASK.get()
    if run is None:
        warn_once("no-task-outcome", "otel-blame: set_outcome outside a task is ignored")
        return
    _apply_outcome(run, bool(success), final_output, to_text(reason) if reason is not None else None)


def _apply_outcome(run: TaskRun, success: bool, final_output: Any, reason: str | None) -> None:
    run.outcome = semconv.OUTCOME_SUCCESS if success else semconv.OUTCOME_FAILURE
    span = run.span
    span.set_attribute(semconv.TASK_OUTCOME, run.outcome)
    if final_output is not None and run.settings.capture_content:
        span.set_attribute(semconv.TASK_FINAL_OUTPUT, prepare(final_output, run.settings).text)
    if reason:
        span.set_attribute(semconv.TASK_OUTCOME_REASON, prepare(reason, run.settings).text)
    if success:
        span.set_status(Status(StatusCode.OK))
    else:
        span.set_status(Status(StatusCode.ERROR, (reason or "task failed")[:1024]))


# --- the message path ----------------------------------------------------------------------------


_KINDS: dict[Any, StepKind] = {**{kind.value: kind for kind in StepKind}, **{kind: kind for kind in StepKind}}


def _kind_of(kind: Any) -> StepKind:
    return _KINDS.get(kind, StepKind.MESSAGE)


def _text_of(content: Any) -> str | None:
    return content if type(content) is str else (None if content is None else to_text(content))


def _offered(
    run: TaskRun | None, agent: str, kind: str, text: str, message: Any, tool_name: Any, source: str | None
) -> OutgoingMessage | None:
    """``outgoing`` as the installed interceptor changed it, or None (the normal case: no
    interceptor, one attribute read). ``step`` is the index the next step of ``run`` gets."""
    if interception.current_interceptor() is None:
        return None
    outgoing = OutgoingMessage(
        agent=agent,
        step=run.steps_recorded if run is not None else None,
        kind=kind,
        text=text,
        message=message,
        tool_name=to_text(tool_name) if tool_name is not None else None,
        framework=source or "api",
    )
    return interception.offer(outgoing)


def _sent(
    run: TaskRun | None,
    agent: Any,
    content: Any,
    kind: Any,
    tool_name: Any,
    message: Any,
    source: str | None,
    intercept: bool,
) -> tuple[str | None, Any]:
    """A step's text and tool name as they go out: through the interceptor when ``intercept``."""
    text = _text_of(content)
    if intercept and text is not None:
        outgoing = content if message is None else message
        changed = _offered(run, agent_name(agent), _kind_of(kind).value, text, outgoing, tool_name, source)
        if changed is not None:
            return changed.text, changed.tool_name or tool_name
    return text, tool_name


def offer_tool_call(
    agent: Any,
    arguments: Any,
    tool_name: Any,
    *,
    message: Any = None,
    source: str | None = None,
    task: TaskRun | None = None,
    handoff: bool = False,
) -> OutgoingMessage | None:
    """A tool call (or a hand-off) before its tool runs, offered on the message path: the changed
    copy (other ``text`` = arguments JSON, or another ``tool_name``) for the hook to apply, else
    None. Its ``step`` is the index the next step (the call's own message, or its result) gets."""
    run = task if task is not None else _CURRENT_TASK.get()
    kind = interception.HANDOFF if handoff else interception.TOOL_CALL
    text = arguments if isinstance(arguments, str) else to_text(arguments)
    return _offered(run, agent_name(agent), kind, text, message, tool_name, source)


def offer_message(
    agent: Any,
    text: str,
    *,
    kind: StepKind | str = StepKind.MESSAGE,
    message: Any = None,
    tool_name: Any = None,
    source: str | None = None,
    task: TaskRun | None = None,
) -> OutgoingMessage | None:
    """A message offered on the message path where it leaves its agent, for a hook that records its
    step later (with ``intercept=False``): the changed copy for the hook to apply, else None."""
    run = task if task is not None else _CURRENT_TASK.get()
    return _offered(run, agent_name(agent), _kind_of(kind).value, text, message, tool_name, source)


# --- steps ---------------------------------------------------------------------------------------


def record_message(
    agent: Any,
    content: Any,
    role: str = "assistant",
    *,
    kind: StepKind | str = StepKind.MESSAGE,
    tool_name: Any = None,
    tool_calls: Sequence[Mapping[str, Any]] | None = None,
    tool_call_id: Any = None,
    agent_id: Any = None,
    is_error: bool = False,
    start_time_ns: int | None = None,
    attributes: Mapping[str, Any] | None = None,
    source: str | None = None,
    task: TaskRun | None = None,
    message: Any = None,
    intercept: bool = True,
) -> str:
    """Record one agent message as a span ``invoke_agent {agent}``; return its text as it goes out.

    The message first goes through the message path: an installed interceptor
    (:func:`~otel_blame.instrumentation.interception.intercept_messages`) may change it, and the
    step records the change; send what this returns. ``message`` is the framework's own object
    (shown read-only to the interceptor); ``intercept=False`` records a message the recipient
    already has. ``role`` is the raw speaker label (kept in ``otel_blame.step.role``); it becomes
    the message role when it is one of system/user/assistant/tool. ``kind`` is ``message``,
    ``tool`` (span ``execute_tool {tool_name}``) or ``code_execution``. Outside any task the span
    is still emitted, without a step index. Never raises.
    """
    run = task if task is not None else _CURRENT_TASK.get()
    text, tool_name = _sent(run, agent, content, kind, tool_name, message, source, intercept)
    _record_message(
        run,
        agent,
        text,
        role,
        kind,
        tool_name,
        tool_calls,
        tool_call_id,
        agent_id,
        is_error,
        start_time_ns,
        attributes,
        source,
    )
    return text if text is not None else ""


@guarded("record_message")
def _record_message(
    run: TaskRun | None,
    agent: Any,
    text: str | None,
    role: Any,
    kind: Any,
    tool_name: Any,
    tool_calls: Sequence[Mapping[str, Any]] | None,
    tool_call_id: Any,
    agent_id: Any,
    is_error: bool,
    start_time_ns: int | None,
    extra: Mapping[str, Any] | None,
    source: str | None,
) -> None:
    name = agent_name(agent)
    step_kind = _kind_of(kind)
    settings = run.settings if run is not None else current_settings()
    span_name, attributes = _identity(name, step_kind, tool_name, agent_id, run, settings)
    step = _step(
        run, settings, name, text, role, step_kind, attributes, tool_calls, tool_call_id, extra, is_error
    )
    attributes.update(step.attributes)
    if run is not None:
        run.note_source(source)
    span = tracer().start_span(
        span_name,
        context=run.parent_context() if run is not None else None,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        start_time=start_time_ns,
    )
    if is_error:
        span.set_status(Status(StatusCode.ERROR, step.error_text))
    span.end(end_time=max(time.time_ns(), start_time_ns or 0))


def _identity(
    name: str, kind: StepKind, tool_name: Any, agent_id: Any, run: TaskRun | None, settings: CaptureSettings
) -> tuple[str, dict[str, Any]]:
    """Who a step's span is: its name, operation, agent and tool. In the latest GenAI conventions an
    in-process agent's span carries no ``gen_ai.agent.id`` (it names a hosted agent now) and every
    agent and tool span carries the conversation id; otherwise the id is on the root alone."""
    attributes: dict[str, Any] = {semconv.GEN_AI_AGENT_NAME: name}
    if kind is StepKind.TOOL:
        tool = agent_name(tool_name) if tool_name is not None else "tool"
        attributes[semconv.GEN_AI_OPERATION_NAME] = semconv.OP_EXECUTE_TOOL
        attributes[semconv.GEN_AI_TOOL_NAME] = tool
        span_name = semconv.tool_span_name(tool)
    else:
        attributes[semconv.GEN_AI_OPERATION_NAME] = semconv.OP_INVOKE_AGENT
        if tool_name is not None:
            attributes[semconv.GEN_AI_TOOL_NAME] = agent_name(tool_name)
        span_name = semconv.agent_span_name(name)
    if settings.latest_genai_conventions:
        if run is not None:
            attributes[semconv.GEN_AI_CONVERSATION_ID] = run.conversation_id
    elif agent_id is not None:
        attributes[semconv.GEN_AI_AGENT_ID] = to_text(agent_id)
    return span_name, attributes


class StepAttributes(NamedTuple):
    """A step's index (None outside a task), its span attributes, and, for an error step, its text as
    captured for the span's status description."""

    index: int | None
    attributes: dict[str, Any]
    error_text: str | None = None


# the raw role a step's kind implies when nothing else says it (what the processor assumes)
_DEFAULT_ROLES = {
    StepKind.MESSAGE: "assistant",
    StepKind.TOOL: "tool",
    StepKind.CODE_EXECUTION: "code_execution",
}


def _step(
    run: TaskRun | None,
    settings: CaptureSettings,
    name: str,
    text: str | None,
    role: Any,
    kind: StepKind,
    identity: Mapping[str, Any],
    tool_calls: Sequence[Mapping[str, Any]] | None,
    tool_call_id: Any,
    extra: Mapping[str, Any] | None,
    is_error: bool = False,
) -> StepAttributes:
    """What makes a span a step (the index taken now), for point spans and agent turns alike: the
    one place the attributes the processor reads are made. Only what the span, its envelope or the
    root do not carry already: the conversation id and the hook's name are on the root, the
    message's role is in ``gen_ai.output.messages`` (``otel_blame.step.role`` only for another
    label), the kind in the operation name (``otel_blame.step.kind`` only for code execution). In the
    latest GenAI conventions a tool's result is ``gen_ai.tool.call.result`` (an ``execute_tool`` span
    has no messages)."""
    raw_role = (
        role
        if type(role) is str and role in MESSAGE_ROLES
        else agent_name(role)
        if role is not None
        else "assistant"
    )
    attributes: dict[str, Any] = {}
    if kind is StepKind.CODE_EXECUTION:
        attributes[semconv.STEP_KIND] = kind.value
    captured = settings.capture_content
    implied = raw_role in MESSAGE_ROLES if captured else raw_role == _DEFAULT_ROLES[kind]
    if not implied:
        attributes[semconv.STEP_ROLE] = raw_role
    if tool_call_id is not None:
        attributes[semconv.GEN_AI_TOOL_CALL_ID] = call_id = to_text(tool_call_id)
    else:
        call_id = None
    remembered = ""
    if captured and kind is StepKind.TOOL and not tool_calls and settings.latest_genai_conventions:
        prepared = prepare(text, settings) if text is not None else None
        truncated = redacted = False
        remembered = prepared.text if prepared is not None else ""
        if prepared is not None and not is_error:  # a result "if execution was successful"
            attributes[semconv.GEN_AI_TOOL_CALL_RESULT] = remembered
    elif captured:
        prepared = prepare(text, settings) if text is not None or not tool_calls else None
        remembered = prepared.text if prepared is not None else ""
        payload, truncated, redacted = output_messages(
            raw_role if raw_role in MESSAGE_ROLES else "assistant",
            remembered if prepared is not None else None,
            tool_calls,
            call_id,
            settings,
        )
        attributes[semconv.GEN_AI_OUTPUT_MESSAGES] = payload
        if tool_calls:
            remembered = f"{remembered}\n{to_text(list(tool_calls))}".strip()
    else:
        prepared, truncated, redacted = None, False, False
    if (prepared is not None and prepared.truncated) or truncated:
        attributes[semconv.CONTENT_TRUNCATED] = True
    if (prepared is not None and prepared.redacted) or redacted:
        attributes[semconv.CONTENT_REDACTED] = True
    if extra:
        for key, value in extra.items():
            if isinstance(key, str) and isinstance(value, str | bool | int | float) and key not in identity:
                if isinstance(value, str) and settings.redactor is not None:
                    value = settings.redactor(value)  # extra attributes are content too: no secret leaves
                attributes.setdefault(key, value)
    # an error step's text (as captured: capped, redacted) is its span's status description too: in the
    # latest conventions a failed tool's span has no result attribute, the description is where it is
    error_text = (remembered or None) if is_error else None
    if run is None:
        warn_once("no-task", "otel-blame: record_message outside a task; the span has no step index")
        return StepAttributes(None, attributes, error_text)
    index = run.add_step(
        name, raw_role, kind.value, remembered, identity.get(semconv.GEN_AI_TOOL_NAME), is_error
    )
    attributes[semconv.STEP_INDEX] = index
    return StepAttributes(index, attributes, error_text)


# --- agent turns: envelope spans -----------------------------------------------------------------


class AgentTurn:
    """One agent turn: the span ``invoke_agent {agent}`` from when the agent starts to its answer.

    Open it with :func:`agent_turn` (a context manager) or, from framework hooks whose start and
    end are separate callbacks, with :meth:`open` / :meth:`activate` / :meth:`close`. The turn's
    message is given with :meth:`answer` (it takes the next step index then, so steps are numbered
    in the order messages are produced, as ``record_message`` numbers them). A turn closed without
    an answer stays an ``invoke_agent`` span without a step index: an agent invocation that
    produced no message of its own (e.g. a group chat manager around its members' turns).
    """

    __slots__ = (
        "agent",
        "run",
        "span",
        "source",
        "answered",
        "index",
        "_closed",
        "_token",
        "_agent_id",
        "_name",
        "_tool",
        "_initial",
        "_settings",
    )

    def __init__(
        self,
        agent: Any,
        *,
        agent_id: Any = None,
        task: TaskRun | None = None,
        source: str | None = None,
        start_time_ns: int | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        self.agent = agent_name(agent)
        self.run = run = task if task is not None else _CURRENT_TASK.get()
        self.source = source
        self.answered = False
        self.index: int | None = None
        self._closed = False
        self._token: Any = None
        self._agent_id = agent_id
        self._tool: tuple[Any, Any] | None = None
        self._settings = settings = run.settings if run is not None else current_settings()
        self._name, initial = _identity(self.agent, StepKind.MESSAGE, None, agent_id, run, settings)
        if attributes:
            redactor = settings.redactor
            for key, value in attributes.items():
                if isinstance(key, str) and isinstance(value, str | bool | int | float):
                    if isinstance(value, str) and redactor is not None:
                        value = redactor(value)  # extra attributes are content too: no secret leaves
                    initial.setdefault(key, value)
        self._initial = initial
        try:
            if run is not None:
                run.note_source(source)
            self.span: Span = tracer().start_span(
                self._name,
                context=run.parent_context() if run is not None else None,
                kind=SpanKind.INTERNAL,
                attributes=initial,
                start_time=start_time_ns,
            )
        except Exception:  # never stand between the app and its agent: the turn goes untraced
            HOOK_ERRORS.record("agent_turn.open")
            self.span = trace.INVALID_SPAN
        if run is not None:
            run.turn_opened(self)

    # -- scope ----------------------------------------------------------------------------------
    def activate(self) -> None:
        """Make the turn's span current (children nest under it) until :meth:`deactivate`."""
        if self._token is None:
            self._token = otel_context.attach(trace.set_span_in_context(self.span))

    def deactivate(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            try:
                otel_context.detach(token)
            except Exception:  # detached in another context than attached: nothing to restore
                pass

    def __enter__(self) -> AgentTurn:
        self.activate()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        self.deactivate()
        if exc is not None and not self._closed:
            self.fail(exc)
        self.close()
        return False

    async def __aenter__(self) -> AgentTurn:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)

    # -- the turn's message -----------------------------------------------------------------------
    def answer(
        self,
        content: Any,
        role: str = "assistant",
        *,
        kind: StepKind | str = StepKind.MESSAGE,
        tool_name: Any = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        tool_call_id: Any = None,
        is_error: bool = False,
        attributes: Mapping[str, Any] | None = None,
        agent: Any = None,
        message: Any = None,
        intercept: bool = True,
    ) -> str:
        """The turn's message: the span becomes its step (index taken now); returns the message's
        text as it goes out (the message path: an interceptor may change it, see
        :func:`record_message`). A second answer in the same turn is a step of its own, a child span
        of the turn. ``agent`` names the speaker when it is known only now (e.g. a LangGraph node
        answering as a named agent). Never raises."""
        if self.answered or self._closed:
            return record_message(
                agent if agent is not None else self.agent,
                content,
                role,
                kind=kind,
                tool_name=tool_name,
                tool_calls=tool_calls,
                tool_call_id=tool_call_id,
                agent_id=self._agent_id,
                is_error=is_error,
                attributes=attributes,
                source=self.source,
                task=self.run,
                message=message,
                intercept=intercept,
            )
        if agent is not None:
            self.agent = agent_name(agent)
        text, tool_name = _sent(
            self.run, self.agent, content, kind, tool_name, message, self.source, intercept
        )
        self._answer(text, role, kind, tool_name, tool_calls, tool_call_id, is_error, attributes)
        return text if text is not None else ""

    @guarded("agent_turn.answer")
    def _answer(
        self,
        text: str | None,
        role: Any,
        kind: Any,
        tool_name: Any,
        tool_calls: Sequence[Mapping[str, Any]] | None,
        tool_call_id: Any,
        is_error: bool,
        extra: Mapping[str, Any] | None,
    ) -> None:
        step_kind = _kind_of(kind)
        if (
            step_kind is StepKind.MESSAGE
            and tool_name is None
            and self._initial[semconv.GEN_AI_AGENT_NAME] == self.agent
        ):
            span_name, identity = self._name, self._initial  # the turn's own message: nothing new to say who
        else:
            span_name, identity = _identity(
                self.agent, step_kind, tool_name, self._agent_id, self.run, self._settings
            )
        step = _step(
            self.run,
            self._settings,
            self.agent,
            text,
            role,
            step_kind,
            identity,
            tool_calls,
            tool_call_id,
            extra,
            is_error,
        )
        attributes = step.attributes
        self.answered = True
        self.index = step.index
        span = self.span
        if span_name != self._name:
            span.update_name(span_name)  # a tool result (the turn was the tool's run), or a named speaker
        initial = self._initial
        if identity is not initial:
            for key, value in identity.items():  # only what the span does not carry yet: no attribute twice
                if initial.get(key, _UNSET) != value:
                    attributes[key] = value
        span.set_attributes(attributes)
        if is_error:
            span.set_status(Status(StatusCode.ERROR, step.error_text))

    def as_tool(self, tool: Any, tool_call_id: Any = None) -> Any:
        """This turn is one tool execution: the span is named ``execute_tool {tool}`` from now on and a
        failure (:meth:`fail`) makes it a ``tool`` step of that tool. Returns the turn.

        Given a function instead of a name, returns that function run as this turn's tool: each
        call offers the call on the message path (``tool_call``, its arguments as JSON) before the
        function runs and the result (``tool``) after, and answers the turn with the result; a
        changed argument reaches the function, a changed result is what the caller gets."""
        if callable(tool) and not isinstance(tool, str):
            return _as_tool_function(self, tool, tool_call_id)
        self._tool = (tool, tool_call_id)
        self._name = semconv.tool_span_name(agent_name(tool))
        try:
            self.span.update_name(self._name)
        except Exception:
            HOOK_ERRORS.record("agent_turn.as_tool")
        return self

    @guarded("agent_turn.fail")
    def fail(self, error: BaseException) -> None:
        """The turn raised. The one rule for every framework: the exception goes on the span (an
        ``exception`` event, ``error.type``, status ERROR) and, when the turn has no answer yet and
        the error is an ``Exception``, the turn is answered with ``{Type}: {message}`` as an error
        step of its agent (a ``tool`` step for :meth:`as_tool` turns), so attribution sees the step
        that failed even when a run fails before any message. Cancellation, ``GeneratorExit``,
        ``KeyboardInterrupt`` and ``SystemExit`` are not failures of the agent: no step for them."""
        if isinstance(error, GeneratorExit):
            return  # the consumer stopped early: nothing failed
        text = f"{type(error).__name__}: {error}"
        if not self.answered and not self._closed and isinstance(error, Exception):
            if self._tool is not None:
                tool_name, tool_call_id = self._tool
                self._answer(text, "tool", StepKind.TOOL, tool_name, None, tool_call_id, True, None)
            else:
                self._answer(text, "assistant", StepKind.MESSAGE, None, None, None, True, None)
        self.span.record_exception(error, escaped=True)
        self.span.set_attribute(semconv.ERROR_TYPE, type(error).__qualname__)
        self.span.set_status(Status(StatusCode.ERROR, text[:MAX_STATUS_DESCRIPTION]))

    def close(self, end_time_ns: int | None = None) -> None:
        """End the turn's span (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.deactivate()
        try:
            if self.run is not None:
                self.run.turn_closed(self)
            self.span.end(end_time=end_time_ns)
        except Exception:
            HOOK_ERRORS.record("agent_turn.close")


def agent_turn(
    agent: Any,
    *,
    agent_id: Any = None,
    task: TaskRun | None = None,
    source: str | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> AgentTurn:
    """One agent turn as an envelope span: ``with agent_turn("coder") as turn: ... turn.answer(text)``.

    Everything the agent does inside the ``with`` (LLM calls, tool calls) nests under the span
    ``invoke_agent {agent}``; ``turn.answer(...)`` takes the same arguments as
    :func:`record_message` (without the agent) and makes the span this turn's step. An exception
    leaving the block is recorded on the span (error status) and re-raised unchanged.
    """
    return AgentTurn(agent, agent_id=agent_id, task=task, source=source, attributes=attributes)


def _tool_call_arguments(
    function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The call's arguments by name (what a model's tool call carries)."""
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {**{str(i): a for i, a in enumerate(args)}, **kwargs}
    return dict(bound.arguments)


def _enter_tool(
    turn: AgentTurn, function: Any, tool_call_id: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    name = getattr(function, "__name__", None) or "tool"
    turn.as_tool(name, tool_call_id)
    arguments = _tool_call_arguments(function, args, kwargs)
    changed = offer_tool_call(
        turn.agent,
        json.dumps(arguments, default=str),
        name,
        message=arguments,
        source=turn.source,
        task=turn.run,
    )
    if changed is not None:
        try:
            replaced = json.loads(changed.text)
        except ValueError:
            replaced = None
        if isinstance(replaced, dict):  # the changed arguments, by name (the model's form of a call)
            args, kwargs = (), {str(key): value for key, value in replaced.items()}
    return name, args, kwargs


def _leave_tool(turn: AgentTurn, name: str, result: Any, error: BaseException | None) -> Any:
    if error is not None:
        return result  # the turn's own exit records the failure (a tool error step)
    text = turn.answer(result, "tool", kind=StepKind.TOOL, tool_name=name)
    return result if text == _text_of(result) else text


def _as_tool_function(turn: AgentTurn, function: Callable[..., Any], tool_call_id: Any) -> Callable[..., Any]:
    return Around(
        "agent_turn.as_tool",
        lambda wrapped, _instance, args, kwargs: _enter_tool(turn, wrapped, tool_call_id, args, kwargs),
        lambda name, result, error: _leave_tool(turn, name, result, error),
    ).decorate(function)
