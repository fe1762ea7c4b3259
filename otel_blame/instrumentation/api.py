"""The plain instrumentation API: ``record_message`` (one step) and ``agent_turn`` (one agent turn as
an envelope span), next to ``task`` / ``set_outcome`` from :mod:`otel_blame.instrumentation._scope`.

A step is one span carrying ``otel_blame.step.index`` (given when the message exists, so numbering
follows the order messages are produced), ``gen_ai.agent.name``, ``otel_blame.step.role``/``kind``
and ``gen_ai.output.messages``. ``record_message`` makes a span for a message that already exists.
``agent_turn`` opens the span ``invoke_agent {agent}`` when the agent starts working and makes it
current, so the LLM ``chat`` spans of any instrumentation (openai-v2, OpenInference, OpenLLMetry)
and the ``execute_tool`` spans of that turn nest under it; :meth:`AgentTurn.answer` puts the turn's
message on it and the span ends when the turn does, so its duration is the agent's latency.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_blame import semconv
from otel_blame.instrumentation._messages import (
    MESSAGE_ROLES,
    StepKind,
    agent_name,
    output_messages,
    prepare,
    to_text,
)
from otel_blame.instrumentation._safety import HOOK_ERRORS, guarded
from otel_blame.instrumentation._scope import (
    _CURRENT_TASK,
    RememberedStep,
    TaskRun,
    current_task,
    set_outcome,
    task,
    warn_once,
)
from otel_blame.instrumentation._settings import current_settings, tracer

_UNSET = object()

__all__ = ["AgentTurn", "agent_turn", "current_task", "record_message", "set_outcome", "task"]


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
    span_name, attributes, index = _step(
        run,
        agent,
        content,
        role,
        kind,
        tool_name,
        tool_calls,
        tool_call_id,
        agent_id,
        extra,
        source,
        is_error,
    )
    span = tracer().start_span(
        span_name,
        context=run.parent_context() if run is not None else None,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        start_time=start_time_ns,
    )
    if is_error:
        span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=max(time.time_ns(), start_time_ns or 0))
    return index


def _step(
    run: TaskRun | None,
    agent: Any,
    content: Any,
    role: Any,
    kind: Any,
    tool_name: Any,
    tool_calls: Sequence[Mapping[str, Any]] | None,
    tool_call_id: Any,
    agent_id: Any,
    extra: Mapping[str, Any] | None,
    source: str | None,
    is_error: bool = False,
) -> tuple[str, dict[str, Any], int | None]:
    """A step's span name, attributes (the step index taken now) and index: the one place the
    attributes the processor reads are made, for point spans and agent turns alike."""
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
    remembered = ""
    if settings.capture_content:
        prepared = prepare(content, settings) if content is not None or not tool_calls else None
        remembered = prepared.text if prepared is not None else ""
        if tool_calls:
            remembered = f"{remembered}\n{to_text(list(tool_calls))}".strip()
        message_role = raw_role if raw_role in MESSAGE_ROLES else "assistant"
        payload, truncated, redacted = output_messages(
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
        run.remember_step(
            RememberedStep(
                index=index,
                agent=name,
                role=raw_role,
                kind=step_kind.value,
                content=remembered,
                tool_name=attributes.get(semconv.GEN_AI_TOOL_NAME),
                is_error=is_error,
            )
        )
    else:
        warn_once("no-task", "otel-blame: record_message outside a task; the span has no step index")
        index = None
    return span_name, attributes, index


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
        self.run = task if task is not None else _CURRENT_TASK.get()
        self.source = source
        self.answered = False
        self.index: int | None = None
        self._closed = False
        self._token: Any = None
        self._agent_id = agent_id
        self._name = semconv.agent_span_name(self.agent)
        self._tool: tuple[Any, Any] | None = None
        initial: dict[str, Any] = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
            semconv.GEN_AI_AGENT_NAME: self.agent,
        }
        if agent_id is not None:
            initial[semconv.GEN_AI_AGENT_ID] = to_text(agent_id)
        if self.run is not None:
            initial[semconv.GEN_AI_CONVERSATION_ID] = self.run.conversation_id
        if source:
            initial[semconv.INSTRUMENTATION_SOURCE] = source
        redactor = self.run.settings.redactor if self.run is not None else current_settings().redactor
        for key, value in (attributes or {}).items():
            if isinstance(key, str) and isinstance(value, str | bool | int | float):
                if isinstance(value, str) and redactor is not None:
                    value = redactor(value)  # extra attributes are content too: no secret leaves
                initial.setdefault(key, value)
        self._initial = initial
        try:
            self.span: Span = tracer().start_span(
                self._name,
                context=self.run.parent_context() if self.run is not None else None,
                kind=SpanKind.INTERNAL,
                attributes=initial,
                start_time=start_time_ns,
            )
        except Exception:  # never stand between the app and its agent: the turn goes untraced
            HOOK_ERRORS.record("agent_turn.open")
            self.span = trace.INVALID_SPAN
        if self.run is not None:
            self.run.turn_opened(self)

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
    ) -> int | None:
        """The turn's message: the span becomes its step (index taken now). A second answer in the
        same turn is a step of its own, a child span of the turn. ``agent`` names the speaker when it
        is known only now (e.g. a LangGraph node answering as a named agent). Never raises."""
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
            )
        if agent is not None:
            self.agent = agent_name(agent)
        return self._answer(content, role, kind, tool_name, tool_calls, tool_call_id, is_error, attributes)

    @guarded("agent_turn.answer")
    def _answer(
        self,
        content: Any,
        role: Any,
        kind: Any,
        tool_name: Any,
        tool_calls: Sequence[Mapping[str, Any]] | None,
        tool_call_id: Any,
        is_error: bool,
        extra: Mapping[str, Any] | None,
    ) -> int | None:
        span_name, attributes, index = _step(
            self.run,
            self.agent,
            content,
            role,
            kind,
            tool_name,
            tool_calls,
            tool_call_id,
            self._agent_id,
            extra,
            self.source,
            is_error,
        )
        self.answered = True
        self.index = index
        span = self.span
        if span_name != self._name:
            span.update_name(span_name)  # a tool result (the turn was the tool's run), or a named speaker
        initial = self._initial
        # only what the span does not carry yet: each attribute set costs the SDK a lock and a check
        span.set_attributes({k: v for k, v in attributes.items() if initial.get(k, _UNSET) != v})
        if is_error:
            span.set_status(Status(StatusCode.ERROR))
        return index

    def as_tool(self, tool_name: Any, tool_call_id: Any = None) -> AgentTurn:
        """This turn is one tool execution: the span is named ``execute_tool {tool}`` from now on and a
        failure (:meth:`fail`) makes it a ``tool`` step of that tool. Returns the turn."""
        self._tool = (tool_name, tool_call_id)
        self._name = semconv.tool_span_name(agent_name(tool_name))
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
        self.span.set_status(Status(StatusCode.ERROR, text[:1024]))

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
