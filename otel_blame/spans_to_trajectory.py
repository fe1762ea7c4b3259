"""THE one place where OTLP spans (and their log records) become a :class:`Trajectory`.

Accepted span shapes: the OpenTelemetry GenAI conventions (``invoke_agent``, ``execute_tool``,
``chat``; content in ``gen_ai.output.messages``), AG2's built-in tracing (``ag2.span.type``),
OpenInference (``openinference.span.kind``, ``agent.name``, ``input.value``, ``output.value``),
OpenLLMetry (``traceloop.*``, ``gen_ai.completion.{i}.content``) and otel-blame's own
instrumentation (``otel_blame.step.*``, ``otel_blame.task.*``). Content that an instrumentation
put in log records (``gen_ai.client.inference.operation.details`` or the older per-message
events) is joined to its span by trace and span id.

Broken traces still give an answer: the root is the span without a parent, or whose parent is
absent; with several candidates the one carrying task attributes wins; with none (every span in
a parent cycle) the earliest span stands in. Duplicate span ids keep their first copy.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from otel_blame import semconv as sc
from otel_blame.trajectory import Outcome, Step, StepKind, Task, Trajectory

_AGENT, _TOOL, _CODE, _LLM, _WORKFLOW = "agent", "tool", "code", "llm", "workflow"
_LLM_OPERATIONS = {sc.OP_CHAT, sc.OP_TEXT_COMPLETION, sc.OP_GENERATE_CONTENT}
_WORKFLOW_OPERATIONS = {sc.OP_INVOKE_WORKFLOW, sc.OP_CONVERSATION}
_TASK_KEYS = (
    sc.TASK_NAME,
    sc.TASK_INPUT,
    sc.TASK_EXPECTED_OUTPUT,
    sc.TASK_FINAL_OUTPUT,
    sc.TASK_OUTCOME,
    sc.TASK_OUTCOME_REASON,
)
_MAX_ANCESTRY = 10_000


def any_value_to_python(value: AnyValue) -> Any:
    """An OTLP AnyValue as a plain Python value (str, bool, int, float, bytes, list, dict or None)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value_to_python(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value_to_python(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which)


def attributes_to_dict(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    """Attributes as a dict; with repeated keys the first wins, as the OTLP spec asks."""
    out: dict[str, Any] = {}
    for kv in attributes:
        if kv.key not in out:
            out[kv.key] = any_value_to_python(kv.value)
    return out


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return json.dumps(value, ensure_ascii=False, default=str)


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return _text(part)
    kind = part.get("type")
    if kind == "tool_call":
        return f"tool_call {part.get('name', '')}({_text(part.get('arguments'))})"
    if kind == "tool_call_response":
        return _text(part.get("response", part.get("result")))
    for key in ("content", "text", "response"):
        if key in part:
            return _text(part[key])
    return ""


def messages_text(value: Any) -> tuple[str, str | None]:
    """Text of GenAI messages (``[{role, parts:[...]}]``, or OpenAI-style ``{role, content}``) and
    the last message's role."""
    value = _maybe_json(value)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return _text(value), None
    texts: list[str] = []
    role: str | None = None
    for message in value:
        if not isinstance(message, dict):
            texts.append(_text(message))
            continue
        role = message.get("role", role)
        if "parts" in message and isinstance(message["parts"], list):
            texts.extend(text for text in (_part_text(part) for part in message["parts"]) if text)
        elif "message" in message and isinstance(message["message"], dict):  # a gen_ai.choice body
            inner_text, inner_role = messages_text(message["message"])
            texts.append(inner_text)
            role = inner_role or role
        elif "content" in message:
            content = message["content"]
            texts.append(_text(content) if not isinstance(content, list) else messages_text(content)[0])
        if isinstance(message.get("tool_calls"), list):
            for call in message["tool_calls"]:
                function = call.get("function", call) if isinstance(call, dict) else {}
                texts.append(f"tool_call {function.get('name', '')}({_text(function.get('arguments'))})")
    return "\n".join(text for text in texts if text), role


@dataclass
class _SpanView:
    """A span with its attributes decoded once."""

    span: Span
    attributes: dict[str, Any]
    kind: str | None = None
    logs: list[LogRecord] = field(default_factory=list)

    @property
    def span_id(self) -> bytes:
        return self.span.span_id

    @property
    def parent_id(self) -> bytes:
        return self.span.parent_span_id


def _classify(view: _SpanView) -> str | None:
    attrs = view.attributes
    operation = attrs.get(sc.GEN_AI_OPERATION_NAME)
    ag2_type = attrs.get(sc.AG2_SPAN_TYPE)
    oi_kind = str(attrs.get(sc.OPENINFERENCE_SPAN_KIND, "")).upper()
    tl_kind = str(attrs.get(sc.TRACELOOP_SPAN_KIND, "")).lower()
    declared = attrs.get(sc.STEP_KIND)
    if declared in (StepKind.TOOL, StepKind.CODE_EXECUTION):
        return _TOOL if declared == StepKind.TOOL else _CODE
    if (
        operation == sc.OP_INVOKE_AGENT
        or ag2_type == sc.AG2_TYPE_AGENT
        or oi_kind == sc.OPENINFERENCE_KIND_AGENT
        or tl_kind == sc.TRACELOOP_KIND_AGENT
    ):
        return _AGENT
    if (
        operation == sc.OP_EXECUTE_TOOL
        or ag2_type == sc.AG2_TYPE_TOOL
        or oi_kind == sc.OPENINFERENCE_KIND_TOOL
        or tl_kind == sc.TRACELOOP_KIND_TOOL
    ):
        return _TOOL
    if operation == sc.OP_EXECUTE_CODE or ag2_type == sc.AG2_TYPE_CODE_EXECUTION:
        return _CODE
    if sc.STEP_INDEX in attrs:
        return _AGENT
    if (
        operation in _LLM_OPERATIONS
        or ag2_type == sc.AG2_TYPE_LLM
        or oi_kind == sc.OPENINFERENCE_KIND_LLM
        or sc.LLM_REQUEST_TYPE in attrs
    ):
        return _LLM
    if (
        operation in _WORKFLOW_OPERATIONS
        or ag2_type == sc.AG2_TYPE_CONVERSATION
        or tl_kind == sc.TRACELOOP_KIND_WORKFLOW
    ):
        return _WORKFLOW
    return None


def _log_event_name(record: LogRecord) -> str:
    if record.event_name:
        return record.event_name
    for kv in record.attributes:
        if kv.key == sc.EVENT_NAME:
            return _text(any_value_to_python(kv.value))
    return ""


def _content_from_logs(records: Sequence[LogRecord], kind: str) -> tuple[str, str | None]:
    """Output content an instrumentation put in log records instead of span attributes."""
    texts: list[str] = []
    role: str | None = None
    for record in sorted(records, key=lambda r: r.time_unix_nano or r.observed_time_unix_nano):
        name = _log_event_name(record)
        body = any_value_to_python(record.body)
        if name == sc.EVENT_INFERENCE_DETAILS:
            attrs = attributes_to_dict(record.attributes)
            output = attrs.get(sc.GEN_AI_OUTPUT_MESSAGES)
            if output is None and isinstance(body, dict):
                output = body.get(sc.GEN_AI_OUTPUT_MESSAGES)
            if output is not None:
                text, role = messages_text(output)
                texts.append(text)
        elif name in (sc.EVENT_CHOICE, sc.EVENT_ASSISTANT_MESSAGE) or (
            name == sc.EVENT_TOOL_MESSAGE and kind in (_TOOL, _CODE)
        ):
            text, found_role = messages_text(body)
            texts.append(text)
            role = found_role or ("assistant" if name != sc.EVENT_TOOL_MESSAGE else "tool")
    return "\n".join(text for text in texts if text), role


def _own_content(view: _SpanView) -> tuple[str, str | None]:
    """Content and role the span itself carries, by instrumentation, best source first."""
    attrs = view.attributes
    if view.kind in (_TOOL,):
        for key in (sc.GEN_AI_TOOL_CALL_RESULT, sc.OPENINFERENCE_OUTPUT_VALUE, sc.TRACELOOP_ENTITY_OUTPUT):
            if key in attrs:
                return _text(attrs[key]), "tool"
    if view.kind == _CODE and sc.AG2_CODE_EXECUTION_OUTPUT in attrs:
        return _text(attrs[sc.AG2_CODE_EXECUTION_OUTPUT]), "code_execution"
    if sc.GEN_AI_OUTPUT_MESSAGES in attrs:
        text, role = messages_text(attrs[sc.GEN_AI_OUTPUT_MESSAGES])
        if text:
            return text, role
    for key in (sc.OPENINFERENCE_OUTPUT_VALUE, sc.TRACELOOP_ENTITY_OUTPUT):
        if key in attrs:
            text, role = messages_text(attrs[key])
            return text, role
    completions = sorted(
        key for key in attrs if key.startswith(sc.OPENLLMETRY_COMPLETION_PREFIX) and key.endswith(".content")
    )
    if completions:
        role_key = completions[-1][: -len("content")] + "role"
        return "\n".join(_text(attrs[key]) for key in completions), _text(attrs.get(role_key)) or None
    if view.logs:
        text, role = _content_from_logs(view.logs, view.kind or "")
        if text:
            return text, role
    if view.kind == _TOOL and sc.GEN_AI_TOOL_CALL_ARGUMENTS in attrs:
        return _text(attrs[sc.GEN_AI_TOOL_CALL_ARGUMENTS]), "tool"
    return "", None


def _exception_text(span: Span) -> str:
    for event in span.events:
        if event.name == sc.EXCEPTION_EVENT:
            attrs = attributes_to_dict(event.attributes)
            kind = _text(attrs.get(sc.EXCEPTION_TYPE))
            message = _text(attrs.get(sc.EXCEPTION_MESSAGE))
            return f"{kind}: {message}" if kind else message or "exception"
    return ""


def _is_error(view: _SpanView) -> bool:
    if view.span.status.code == Status.STATUS_CODE_ERROR:
        return True
    if sc.ERROR_TYPE in view.attributes:
        return True
    exit_code = view.attributes.get(sc.AG2_CODE_EXECUTION_EXIT_CODE)
    if isinstance(exit_code, int) and exit_code != 0:
        return True
    return any(event.name == sc.EXCEPTION_EVENT for event in view.span.events)


class _TraceGraph:
    """Spans of one trace by id, with parent lookups that survive cycles and missing parents."""

    def __init__(self, views: list[_SpanView]) -> None:
        self.by_id: dict[bytes, _SpanView] = {}
        self.duplicates = 0
        for view in views:
            if view.span_id in self.by_id:
                self.duplicates += 1
                continue
            self.by_id[view.span_id] = view
        self.views = list(self.by_id.values())

    def parent(self, view: _SpanView) -> _SpanView | None:
        if not view.parent_id or view.parent_id == view.span_id:
            return None
        return self.by_id.get(view.parent_id)

    def ancestors(self, view: _SpanView) -> Iterable[_SpanView]:
        seen = {view.span_id}
        current = self.parent(view)
        while current is not None and current.span_id not in seen and len(seen) < _MAX_ANCESTRY:
            yield current
            seen.add(current.span_id)
            current = self.parent(current)

    def root(self) -> _SpanView | None:
        if not self.views:
            return None
        candidates = [view for view in self.views if self.parent(view) is None]
        pool = candidates or self.views

        def rank(view: _SpanView) -> tuple:
            has_task = any(key in view.attributes for key in _TASK_KEYS)
            return (
                not has_task,
                view.kind != _WORKFLOW,
                bool(view.parent_id),  # a true root before an orphan
                view.span.start_time_unix_nano,
                -(view.span.end_time_unix_nano - view.span.start_time_unix_nano),
            )

        return min(pool, key=rank)


def _agent_name(view: _SpanView, graph: _TraceGraph) -> str | None:
    attrs = view.attributes
    for key in (sc.GEN_AI_AGENT_NAME, sc.OPENINFERENCE_AGENT_NAME):
        if attrs.get(key):
            return _text(attrs[key])
    if view.kind == _AGENT:
        if attrs.get(sc.TRACELOOP_ENTITY_NAME):
            return _text(attrs[sc.TRACELOOP_ENTITY_NAME])
        prefix = sc.OP_INVOKE_AGENT + " "
        if view.span.name.startswith(prefix):
            return view.span.name[len(prefix) :]
        return view.span.name or None
    return None


def _nearest_agent(view: _SpanView, graph: _TraceGraph) -> str | None:
    for ancestor in graph.ancestors(view):
        if ancestor.kind in (_AGENT, _LLM):
            name = _agent_name(ancestor, graph)
            if name:
                return name
    return None


def _task_view(graph: _TraceGraph, root: _SpanView | None) -> _SpanView | None:
    if root is not None and any(key in root.attributes for key in _TASK_KEYS):
        return root
    with_task = [view for view in graph.views if any(key in view.attributes for key in _TASK_KEYS)]
    if with_task:
        return min(with_task, key=lambda view: view.span.start_time_unix_nano)
    return root


def _outcome(task_view: _SpanView | None, root: _SpanView | None) -> tuple[Outcome, str | None]:
    attrs = task_view.attributes if task_view is not None else {}
    declared = _text(attrs.get(sc.TASK_OUTCOME)).lower()
    reason = _text(attrs.get(sc.TASK_OUTCOME_REASON)) or None
    if declared in (Outcome.SUCCESS, Outcome.FAILURE):
        return Outcome(declared), reason
    if root is not None:
        status = root.span.status
        if status.code == Status.STATUS_CODE_ERROR:
            return Outcome.FAILURE, reason or status.message or "root span status ERROR"
        exception = _exception_text(root.span)
        if exception:
            return Outcome.FAILURE, reason or exception
        if status.code == Status.STATUS_CODE_OK:
            return Outcome.SUCCESS, reason
    return Outcome.UNKNOWN, reason


def _order_key_all_indexed(view: _SpanView) -> tuple:
    return (int(view.attributes[sc.STEP_INDEX]), view.span.start_time_unix_nano)


def _order_key_by_time(view: _SpanView) -> tuple:
    index = view.attributes.get(sc.STEP_INDEX)
    return (view.span.start_time_unix_nano, int(index) if isinstance(index, int) else 0)


def _views(resource_spans: Sequence[ResourceSpans]) -> list[_SpanView]:
    return [
        _SpanView(span=span, attributes=attributes_to_dict(span.attributes))
        for resource in resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


def _logs_by_span(resource_logs: Sequence[ResourceLogs]) -> dict[tuple[bytes, bytes], list[LogRecord]]:
    out: dict[tuple[bytes, bytes], list[LogRecord]] = defaultdict(list)
    for resource in resource_logs:
        for scope in resource.scope_logs:
            for record in scope.log_records:
                if record.span_id:
                    out[(record.trace_id, record.span_id)].append(record)
    return out


def trace_ids(resource_spans: Sequence[ResourceSpans]) -> list[bytes]:
    """Distinct trace ids in order of first appearance."""
    seen: dict[bytes, None] = {}
    for resource in resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                seen.setdefault(span.trace_id, None)
    return list(seen)


def trajectory_from_spans(
    resource_spans: Sequence[ResourceSpans], resource_logs: Sequence[ResourceLogs] = ()
) -> Trajectory:
    """The Trajectory of the ONE trace in ``resource_spans``.

    Raises ValueError when the spans hold several traces (use :func:`trajectories_from_spans`),
    no spans, or no agent steps.
    """
    views = _views(resource_spans)
    if not views:
        raise ValueError("no spans given")
    found = {view.span.trace_id for view in views}
    if len(found) > 1:
        raise ValueError(f"spans of {len(found)} traces given; use trajectories_from_spans")
    return _build(views, _logs_by_span(resource_logs))


def trajectories_from_spans(
    resource_spans: Sequence[ResourceSpans], resource_logs: Sequence[ResourceLogs] = ()
) -> list[Trajectory]:
    """One Trajectory per trace that has agent steps, in order of first appearance."""
    by_trace: dict[bytes, list[_SpanView]] = defaultdict(list)
    for view in _views(resource_spans):
        by_trace[view.span.trace_id].append(view)
    logs = _logs_by_span(resource_logs)
    out = []
    for views in by_trace.values():
        try:
            out.append(_build(views, logs))
        except ValueError:
            continue
    return out


def _build(views: list[_SpanView], logs: dict[tuple[bytes, bytes], list[LogRecord]]) -> Trajectory:
    trace_id = views[0].span.trace_id
    for view in views:
        view.kind = _classify(view)
        view.logs = logs.get((trace_id, view.span_id), [])
    graph = _TraceGraph(views)
    root = graph.root()

    # children lists for the "agent container" and "LLM under an agent" rules
    children: dict[bytes, list[_SpanView]] = defaultdict(list)
    for view in graph.views:
        parent = graph.parent(view)
        if parent is not None:
            children[parent.span_id].append(view)

    def descendants(view: _SpanView) -> Iterable[_SpanView]:
        stack, seen = list(children.get(view.span_id, [])), {view.span_id}
        while stack:
            current = stack.pop()
            if current.span_id in seen:
                continue
            seen.add(current.span_id)
            yield current
            stack.extend(children.get(current.span_id, []))

    # When an instrumentation numbered its steps (otel_blame.step.index), those spans alone are
    # the steps: other instrumentations' spans in the same trace (AG2's own tracing, LLM client
    # spans) describe the same messages again.
    declared = any(sc.STEP_INDEX in view.attributes for view in graph.views)
    step_views: list[tuple[_SpanView, str, str | None]] = []
    for view in graph.views:
        if view.kind not in (_AGENT, _TOOL, _CODE, _LLM):
            continue
        if declared and sc.STEP_INDEX not in view.attributes:
            continue
        if view is root and view.kind != _AGENT and sc.STEP_INDEX not in view.attributes:
            continue
        content, role = _own_content(view)
        if not declared and view.kind == _LLM and any(a.kind == _AGENT for a in graph.ancestors(view)):
            continue  # the agent span above it is the step
        if view.kind == _AGENT and not content and not declared:
            below = [d for d in descendants(view) if d.kind in (_AGENT, _LLM)]
            if any(d.kind == _AGENT for d in below):
                continue  # a container of other agents, not a message of its own
            llm_below = sorted(
                (d for d in below if d.kind == _LLM), key=lambda d: d.span.start_time_unix_nano
            )
            if llm_below:
                content, role = _own_content(llm_below[-1])
        step_views.append((view, content, role))

    # A tool or code span inside an agent's step whose output that agent's message already
    # carries (AG2 replies with the execution result) says nothing new: it is not a step of its
    # own, but its error marks the agent's step.
    inherited_errors: set[bytes] = set()
    if not declared:
        agent_content = {view.span_id: content for view, content, _ in step_views if view.kind == _AGENT}
        kept = []
        for view, content, role in step_views:
            if view.kind in (_TOOL, _CODE):
                owner = next((a for a in graph.ancestors(view) if a.span_id in agent_content), None)
                if owner is not None and content.strip() in agent_content[owner.span_id]:
                    if _is_error(view):
                        inherited_errors.add(owner.span_id)
                    continue
            kept.append((view, content, role))
        step_views = kept

    if not step_views:
        raise ValueError(f"trace {trace_id.hex()} has no agent steps")

    if all(isinstance(v.attributes.get(sc.STEP_INDEX), int) for v, _, _ in step_views):
        step_views.sort(key=lambda item: _order_key_all_indexed(item[0]))
    else:
        step_views.sort(key=lambda item: _order_key_by_time(item[0]))

    steps: list[Step] = []
    for position, (view, content, role) in enumerate(step_views):
        attrs = view.attributes
        kind = {_TOOL: StepKind.TOOL, _CODE: StepKind.CODE_EXECUTION}.get(view.kind or "", StepKind.MESSAGE)
        tool_name = None
        if kind == StepKind.TOOL:
            tool_name = _text(attrs.get(sc.GEN_AI_TOOL_NAME) or attrs.get(sc.OPENINFERENCE_TOOL_NAME)) or None
            if tool_name is None and attrs.get(sc.TRACELOOP_ENTITY_NAME):
                tool_name = _text(attrs[sc.TRACELOOP_ENTITY_NAME])
            if tool_name is None and view.span.name.startswith(sc.OP_EXECUTE_TOOL + " "):
                tool_name = view.span.name[len(sc.OP_EXECUTE_TOOL) + 1 :]
        agent = _agent_name(view, graph) or _nearest_agent(view, graph) or tool_name or view.span.name
        is_error = _is_error(view) or view.span_id in inherited_errors
        if not content and is_error:
            content = _exception_text(view.span) or view.span.status.message
        raw_role = (
            _text(attrs.get(sc.STEP_ROLE))
            or role
            or (
                "tool"
                if kind == StepKind.TOOL
                else "code_execution"
                if kind == StepKind.CODE_EXECUTION
                else "assistant"
            )
        )
        steps.append(
            Step(
                index=position,
                agent=agent or "unknown",
                role=raw_role,
                content=content,
                kind=kind,
                tool_name=tool_name,
                span_id=view.span_id.hex(),
                start_time_unix_nano=view.span.start_time_unix_nano or None,
                is_error=is_error,
            )
        )

    task_view = _task_view(graph, root)
    task_attrs = task_view.attributes if task_view is not None else {}
    root_attrs = root.attributes if root is not None else {}
    conversation = next(
        (
            _text(v.attributes[sc.GEN_AI_CONVERSATION_ID])
            for v in graph.views
            if sc.GEN_AI_CONVERSATION_ID in v.attributes
        ),
        None,
    )
    task = Task(
        name=_text(task_attrs.get(sc.TASK_NAME) or root_attrs.get(sc.TRACELOOP_WORKFLOW_NAME))
        or (root.span.name if root is not None else "task")
        or "task",
        input=_text(
            task_attrs.get(sc.TASK_INPUT)
            or root_attrs.get(sc.OPENINFERENCE_INPUT_VALUE)
            or root_attrs.get(sc.TRACELOOP_ENTITY_INPUT)
        )
        or (
            messages_text(root_attrs[sc.GEN_AI_INPUT_MESSAGES])[0]
            if sc.GEN_AI_INPUT_MESSAGES in root_attrs
            else ""
        )
        or None,
        expected_output=_text(task_attrs.get(sc.TASK_EXPECTED_OUTPUT)) or None,
        final_output=_text(
            task_attrs.get(sc.TASK_FINAL_OUTPUT)
            or root_attrs.get(sc.OPENINFERENCE_OUTPUT_VALUE)
            or root_attrs.get(sc.TRACELOOP_ENTITY_OUTPUT)
        )
        or None,
        conversation_id=conversation,
    )
    outcome, reason = _outcome(task_view, root)
    return Trajectory(
        task=task,
        steps=steps,
        outcome=outcome,
        outcome_reason=reason,
        trace_id=trace_id.hex(),
        root_span_id=root.span_id.hex() if root is not None else None,
        source="otlp",
    )


def sdk_spans_to_proto(spans: Sequence[Any]) -> list[ResourceSpans]:
    """OpenTelemetry SDK ``ReadableSpan``s as OTLP ResourceSpans (the SDK's own OTLP encoder), so
    in-memory spans take the same path as received ones."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return list(encode_spans(spans).resource_spans)


def sdk_logs_to_proto(records: Sequence[Any]) -> list[ResourceLogs]:
    """OpenTelemetry SDK log records (what a LogExporter receives) as OTLP ResourceLogs."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs

    return list(encode_logs(records).resource_logs)
