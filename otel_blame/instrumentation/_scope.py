"""The root-task scope: ``task`` (root span ``invoke_workflow {name}``), ``set_outcome`` and the
trace id of a run.

A :class:`TaskRun` numbers its steps 0, 1, 2, ... under a lock in the order they are recorded, so
the index is right whatever thread or asyncio task the message comes from. The current run travels
in a context variable (as the OpenTelemetry context does); code running where context is not
copied (``loop.run_in_executor`` without the instrumentor) can pass ``task=run`` explicitly.

When a root task ends, its trace id is logged (logger ``otel_blame.instrumentation``, INFO unless
``OTEL_BLAME_TRACE_ID_LOG_LEVEL`` says otherwise) and
kept for :func:`last_trace_id`, so an app whose answer turns out wrong later can send
``otel-blame verdict TRACE_ID --failed``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_blame import semconv
from otel_blame.instrumentation._messages import PreparedContent, agent_name, prepare, to_text
from otel_blame.instrumentation._safety import HOOK_ERRORS, guarded, logger
from otel_blame.instrumentation._settings import CaptureSettings, current_settings, tracer

F = TypeVar("F", bound=Callable[..., Any])

_CURRENT_TASK: contextvars.ContextVar[TaskRun | None] = contextvars.ContextVar(
    "otel_blame_task", default=None
)
_warned: set[str] = set()
_warned_lock = threading.Lock()
# steps a task keeps in memory for attribute_current_task (beyond them, only spans are made), and the
# content they keep in all (beyond it, later steps are kept without their text)
MAX_REMEMBERED_STEPS = 10_000
MAX_REMEMBERED_CHARS = 8 * 1024 * 1024


@dataclass(frozen=True)
class RememberedStep:
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

    def remember_step(self, step: RememberedStep) -> None:
        """Keep a recorded step for :meth:`remembered_steps` (bounded by ``MAX_REMEMBERED_STEPS``)."""
        with self._lock:
            if len(self._steps) >= MAX_REMEMBERED_STEPS:
                return
            if self._remembered_chars + len(step.content) > MAX_REMEMBERED_CHARS:
                step = dataclasses.replace(step, content="")
            self._remembered_chars += len(step.content)
            self._steps.append(step)

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
        with self._lock:
            self._open_turns[id(turn)] = turn

    def turn_closed(self, turn: Any) -> None:
        with self._lock:
            self._open_turns.pop(id(turn), None)

    def close_open_turns(self) -> None:
        """End the agent turns a framework opened and never finished (their spans would be lost)."""
        with self._lock:
            left = list(self._open_turns.values())
            self._open_turns.clear()
        for turn in left:
            turn.close()

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
        from otel_blame.instrumentation.api import record_message

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
