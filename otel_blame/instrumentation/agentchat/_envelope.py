"""Envelope steps: an ``invoke_agent`` / ``execute_tool`` span that is open while the work happens.

A point step (``record_message``) is created after the message exists, so nothing can nest under
it. An envelope step starts when the agent (or tool) starts working and ends with its answer: the
model calls and tool calls of the turn become its children and its duration is the turn's latency.
Its step index is taken when it ends, when its message exists, so steps stay numbered in the order
the messages happened (a tool's result before the answer that used it), as point steps are.

Private to this package until the shared envelope of ``otel_blame.instrumentation.api`` exists;
built on the same internals as ``record_message`` so the attributes are the same.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_blame import semconv
from otel_blame.instrument.content import to_text
from otel_blame.instrument.safety import HOOK_ERRORS
from otel_blame.instrument.settings import tracer
from otel_blame.instrument.tasks import TaskRun, _output_messages, agent_name
from otel_blame.trajectory import StepKind


class EnvelopeStep:
    """One open step span of a task; :meth:`finish` numbers it, writes its message and ends it."""

    def __init__(
        self,
        run: TaskRun,
        agent: Any,
        *,
        source: str,
        tool_name: Any = None,
        tool_call_id: Any = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        self.run = run
        self.agent = agent_name(agent)
        self.kind = StepKind.TOOL if tool_name is not None else StepKind.MESSAGE
        self.tool_call_id = to_text(tool_call_id) if tool_call_id is not None else None
        self.finished = False
        attrs: dict[str, Any] = {
            semconv.GEN_AI_AGENT_NAME: self.agent,
            semconv.STEP_KIND: self.kind.value,
            semconv.GEN_AI_CONVERSATION_ID: run.conversation_id,
            semconv.INSTRUMENTATION_SOURCE: source,
        }
        if self.kind is StepKind.TOOL:
            tool = agent_name(tool_name)
            name = semconv.tool_span_name(tool)
            attrs[semconv.GEN_AI_OPERATION_NAME] = semconv.OP_EXECUTE_TOOL
            attrs[semconv.GEN_AI_TOOL_NAME] = tool
            attrs[semconv.STEP_ROLE] = "tool"
            if self.tool_call_id is not None:
                attrs[semconv.GEN_AI_TOOL_CALL_ID] = self.tool_call_id
        else:
            name = semconv.agent_span_name(self.agent)
            attrs[semconv.GEN_AI_OPERATION_NAME] = semconv.OP_INVOKE_AGENT
            attrs[semconv.STEP_ROLE] = "assistant"
        for key, value in (attributes or {}).items():
            if isinstance(key, str) and isinstance(value, str | bool | int | float):
                attrs.setdefault(key, value)
        parent = run.parent_context()
        self.span: Span = tracer().start_span(name, context=parent, kind=SpanKind.INTERNAL, attributes=attrs)
        self.context = trace.set_span_in_context(self.span, parent)

    def attach(self) -> object:
        """Make this step the current span (returns the token for :meth:`detach`)."""
        return otel_context.attach(self.context)

    @staticmethod
    def detach(token: object) -> None:
        try:
            otel_context.detach(token)  # type: ignore[arg-type]
        except Exception:
            pass  # detached in another context than attached: nothing to restore

    def finish(
        self,
        content: Any,
        *,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        is_error: bool = False,
        error: BaseException | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> int | None:
        """Number the step, write its message and end the span; never raises, runs once."""
        if self.finished:
            return None
        self.finished = True
        try:
            span = self.span
            index = self.run.next_step_index()
            span.set_attribute(semconv.STEP_INDEX, index)
            settings = self.run.settings
            if settings.capture_content:
                prepared = self.run.prepare(content) if content is not None or not tool_calls else None
                role = "tool" if self.kind is StepKind.TOOL else "assistant"
                payload, truncated, redacted = _output_messages(
                    role,
                    prepared.text if prepared is not None else None,
                    tool_calls,
                    self.tool_call_id,
                    self.agent,
                    settings,
                )
                span.set_attribute(semconv.GEN_AI_OUTPUT_MESSAGES, payload)
                if (prepared is not None and prepared.truncated) or truncated:
                    span.set_attribute(semconv.CONTENT_TRUNCATED, True)
                if (prepared is not None and prepared.redacted) or redacted:
                    span.set_attribute(semconv.CONTENT_REDACTED, True)
            for key, value in (attributes or {}).items():
                if isinstance(key, str) and isinstance(value, str | bool | int | float):
                    span.set_attribute(key, value)
            if error is not None:
                span.record_exception(error)
                span.set_attribute(semconv.ERROR_TYPE, type(error).__qualname__)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:1024]))
            elif is_error:
                span.set_status(Status(StatusCode.ERROR))
            span.end(end_time=time.time_ns())
            return index
        except Exception:
            HOOK_ERRORS.record("envelope.finish")
            return None
