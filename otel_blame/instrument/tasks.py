"""The plain instrumentation API: ``task`` (root span), ``record_message`` (one span per step),
``set_outcome``.

A :class:`TaskRun` numbers its steps 0, 1, 2, ... under a lock in the order
:func:`record_message` is called, so the index is right whatever thread or asyncio task the
message comes from. The current run travels in a context variable (as the OpenTelemetry context
does); code running where context is not copied (``loop.run_in_executor`` without the
instrumentor) can pass ``task=run`` explicitly.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_blame import semconv
from otel_blame.instrument.content import PreparedContent, prepare, to_text
from otel_blame.instrument.safety import HOOK_ERRORS, guarded, logger
from otel_blame.instrument.settings import CaptureSettings, current_settings, tracer
from otel_blame.trajectory import StepKind

F = TypeVar("F", bound=Callable[..., Any])

_CURRENT_TASK: contextvars.ContextVar[TaskRun | None] = contextvars.ContextVar(
    "otel_blame_task", default=None
)
# one encoder for all: json.dumps with non-default options builds a new encoder per call
_encode_json = json.JSONEncoder(ensure_ascii=False).encode
# the string encoder that encoder uses; the text-only fast path below joins its pieces by hand
_encode_string = json.encoder.encode_basestring
_MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool"})
_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(key: str, message: str) -> None:
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    logger.warning(message)


def agent_name(value: Any) -> str:
    """A usable agent name from anything (None, bytes, objects with ``.name``, numbers)."""
    if type(value) is str and 0 < len(value) <= 256 and value.isidentifier():
        return value  # the common case, already clean
    if isinstance(value, str):
        name = value
    elif value is None:
        name = ""
    elif isinstance(value, bytes | bytearray):
        name = bytes(value).decode("utf-8", errors="replace")
    elif isinstance(getattr(value, "name", None), str):
        name = value.name
    else:
        name = to_text(value)
    name = " ".join(name.split())[:256]
    return name or "unknown"


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
        self.outcome: str | None = None
        self.started_ns = time.time_ns()
        self._lock = threading.Lock()
        self._next_index = 0
        self._span_context = span.get_span_context()
        self._root_context = trace.set_span_in_context(span)

    @property
    def trace_id(self) -> int:
        return self._span_context.trace_id

    @property
    def steps_recorded(self) -> int:
        with self._lock:
            return self._next_index

    def next_step_index(self) -> int:
        with self._lock:
            index = self._next_index
            self._next_index += 1
            return index

    def parent_context(self) -> otel_context.Context:
        """The current context when it is inside this task's trace, else the task root."""
        current = otel_context.get_current()  # read once: the span lookup below reuses it
        span_context = trace.get_current_span(current).get_span_context()
        if span_context.is_valid and span_context.trace_id == self._span_context.trace_id:
            return current
        return self._root_context

    def prepare(self, value: Any) -> PreparedContent:
        return prepare(value, self.settings)

    def record_message(self, agent: Any, content: Any, role: str = "assistant", **kwargs: Any) -> int | None:
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
        def fresh() -> task:
            return task(
                self.name, self.input, self.expected_output, self.conversation_id, attributes=self.attributes
            )

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with fresh():
                    return await function(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with fresh():
                return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

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
        except Exception:
            HOOK_ERRORS.record("task.finish")


def _output_messages(
    role: str,
    text: str | None,
    tool_calls: Sequence[Mapping[str, Any]] | None,
    tool_call_id: str | None,
    name: str,
    settings: CaptureSettings,
) -> tuple[str, bool, bool]:
    """The ``gen_ai.output.messages`` JSON (role, parts) and whether anything was cut or masked."""
    if not tool_calls:
        return _plain_output_messages(role, text, tool_call_id, name), False, False
    parts: list[dict[str, Any]] = []
    truncated = redacted = False
    if text is not None:
        if role == "tool" and tool_call_id:
            parts.append({"type": "tool_call_response", "id": tool_call_id, "response": text})
        else:
            parts.append({"type": "text", "content": text})
    for call in tool_calls or ():
        if not isinstance(call, Mapping):
            call = {"name": "unknown", "arguments": call}
        function = call.get("function") if isinstance(call.get("function"), Mapping) else call
        arguments = prepare(function.get("arguments", ""), settings)
        truncated |= arguments.truncated
        redacted |= arguments.redacted
        part = {"type": "tool_call", "name": agent_name(function.get("name")), "arguments": arguments.text}
        if call.get("id") is not None:
            part["id"] = to_text(call.get("id"))
        parts.append(part)
    message = {"role": role, "parts": parts, "name": name}
    return _encode_json([message]), truncated, redacted


def _plain_output_messages(role: str, text: str | None, tool_call_id: str | None, name: str) -> str:
    """What ``_encode_json`` makes of a message without tool calls (same separators, same string
    escaping), built without the general encoder's per-call set-up: this runs on every message."""
    if text is None:
        part = ""
    elif role == "tool" and tool_call_id:
        part = (
            f'{{"type": "tool_call_response", "id": {_encode_string(tool_call_id)}, '
            f'"response": {_encode_string(text)}}}'
        )
    else:
        part = f'{{"type": "text", "content": {_encode_string(text)}}}'
    return f'[{{"role": {_encode_string(role)}, "parts": [{part}], "name": {_encode_string(name)}}}]'


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
) -> int | None:
    """Record one agent message as a span ``invoke_agent {agent}``; return its step index.

    ``role`` is the raw speaker label (kept in ``otel_blame.step.role``); it becomes the message
    role when it is one of system/user/assistant/tool. ``kind`` is ``message``, ``tool`` (span
    ``execute_tool {tool_name}``) or ``code_execution``. Outside any task the span is still
    emitted, without a step index. Never raises.
    """
    return _record_message(
        agent,
        content,
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
        task,
    )


@guarded("record_message")
def _record_message(
    agent: Any,
    content: Any,
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
    run: TaskRun | None,
) -> int | None:
    run = run if run is not None else _CURRENT_TASK.get()
    name = agent_name(agent)
    raw_role = agent_name(role) if role is not None else "assistant"
    if kind is StepKind.MESSAGE:
        step_kind = StepKind.MESSAGE
    else:
        try:
            step_kind = StepKind(kind)
        except ValueError:
            step_kind = StepKind.MESSAGE
    settings = run.settings if run is not None else current_settings()
    attributes: dict[str, Any] = {
        semconv.GEN_AI_AGENT_NAME: name,
        semconv.STEP_ROLE: raw_role,
        semconv.STEP_KIND: step_kind.value,
    }
    if step_kind is StepKind.TOOL:
        tool = agent_name(tool_name) if tool_name is not None else "tool"
        span_name = semconv.tool_span_name(tool)
        attributes[semconv.GEN_AI_OPERATION_NAME] = semconv.OP_EXECUTE_TOOL
        attributes[semconv.GEN_AI_TOOL_NAME] = tool
    else:
        span_name = semconv.agent_span_name(name)
        attributes[semconv.GEN_AI_OPERATION_NAME] = semconv.OP_INVOKE_AGENT
        if tool_name is not None:
            attributes[semconv.GEN_AI_TOOL_NAME] = agent_name(tool_name)
    if agent_id is not None:
        attributes[semconv.GEN_AI_AGENT_ID] = to_text(agent_id)
    if tool_call_id is not None:
        attributes[semconv.GEN_AI_TOOL_CALL_ID] = to_text(tool_call_id)
    if source:
        attributes[semconv.INSTRUMENTATION_SOURCE] = source
    if settings.capture_content:
        prepared = prepare(content, settings) if content is not None or not tool_calls else None
        message_role = raw_role if raw_role in _MESSAGE_ROLES else "assistant"
        payload, truncated, redacted = _output_messages(
            message_role,
            prepared.text if prepared is not None else None,
            tool_calls,
            to_text(tool_call_id) if tool_call_id is not None else None,
            name,
            settings,
        )
        attributes[semconv.GEN_AI_OUTPUT_MESSAGES] = payload
        if (prepared is not None and prepared.truncated) or truncated:
            attributes[semconv.CONTENT_TRUNCATED] = True
        if (prepared is not None and prepared.redacted) or redacted:
            attributes[semconv.CONTENT_REDACTED] = True
    for key, value in (extra or {}).items():
        if isinstance(key, str) and isinstance(value, str | bool | int | float):
            if isinstance(value, str) and settings.redactor is not None:
                value = settings.redactor(value)  # extra attributes are content too: no secret leaves
            attributes.setdefault(key, value)
    if run is not None:
        attributes[semconv.GEN_AI_CONVERSATION_ID] = run.conversation_id
        attributes[semconv.STEP_INDEX] = index = run.next_step_index()
        parent = run.parent_context()
    else:
        _warn_once("no-task", "otel-blame: record_message outside a task; the span has no step index")
        index = None
        parent = None
    span = tracer().start_span(
        span_name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes, start_time=start_time_ns
    )
    if is_error:
        span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=max(time.time_ns(), start_time_ns or 0))
    return index


def set_outcome(
    success: bool, final_output: Any = None, reason: Any = None, *, task: TaskRun | None = None
) -> None:
    """Mark the current task ``success`` or ``failure``; failure sets the root span's status to ERROR."""
    _set_outcome(success, final_output, reason, task)


@guarded("set_outcome")
def _set_outcome(success: Any, final_output: Any, reason: Any, run: TaskRun | None) -> None:
    run = run if run is not None else _CURRENT_TASK.get()
    if run is None:
        _warn_once("no-task-outcome", "otel-blame: set_outcome outside a task is ignored")
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
