"""THE one place where OTLP spans (and their log records) become a :class:`Trajectory`.

Each instrumentation's dialect is an adapter in this package (``genai``, ``openinference``,
``traceloop``, ``ag2``, ``logfire``, ``ours``); this module asks them, in a fixed order, what each
span is, what it said and which agent said it, and builds the steps.

Broken traces still give an answer: the root is the span without a parent, or whose parent is
absent; with several candidates the one carrying task attributes wins; with none (every span in
a parent cycle) the earliest span stands in. Duplicate span ids keep their first copy. A trace
that gives no steps raises :class:`NoTrajectory`, which says why.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from otel_blame import semconv as sc
from otel_blame.trajectory import Outcome, Step, StepKind, Task, Trajectory

from .ag2 import AG2
from .agents import AgentResolver, first
from .dependencies import find_dependency_failures
from .genai import GenAI, GenAIEvents
from .logfire import Logfire
from .model import Convention, Kind, SpanView, TraceGraph
from .openinference import OpenInference
from .otlp import attributes_to_dict
from .ours import Ours, is_declared_step
from .text import text
from .traceloop import Traceloop

_GENAI = GenAI()
# Asked in this order; the first answer wins (GenAI's log records come after every attribute).
CONVENTIONS: tuple[Convention, ...] = (
    Ours(),
    _GENAI,
    AG2(),
    OpenInference(),
    Traceloop(),
    Logfire(),
    GenAIEvents(),
)
_STEP_KINDS = (Kind.AGENT, Kind.TOOL, Kind.CODE, Kind.LLM)
UNKNOWN_SERVICE = "unknown_service"


class NoTrajectory(ValueError):
    """A trace from which no trajectory can be built; ``reason`` says why, ``service`` whose."""

    def __init__(self, reason: str, trace_id: str | None = None, service: str | None = None) -> None:
        self.reason = reason
        self.trace_id = trace_id
        self.service = service
        super().__init__(f"trace {trace_id} {reason}" if trace_id else reason)


@dataclass(frozen=True)
class BuildNotes:
    """What the builder had to guess, for the caller to count and log."""

    service: str
    agent_from_service: int = 0  # steps whose agent is the service name: nothing named one

    @property
    def guessed(self) -> bool:
        return self.agent_from_service > 0


@dataclass(frozen=True)
class Built:
    trajectory: Trajectory
    notes: BuildNotes


def _exception_text(span: Span) -> str:
    for event in span.events:
        if event.name == sc.EXCEPTION_EVENT:
            attrs = attributes_to_dict(event.attributes)
            kind = text(attrs.get(sc.EXCEPTION_TYPE))
            message = text(attrs.get(sc.EXCEPTION_MESSAGE))
            return f"{kind}: {message}" if kind else message or "exception"
    return ""


def _is_error(view: SpanView) -> bool:
    if view.span.status.code == Status.STATUS_CODE_ERROR:
        return True
    if any(convention.is_error(view) for convention in CONVENTIONS):
        return True
    return any(event.name == sc.EXCEPTION_EVENT for event in view.span.events)


def _classify(view: SpanView) -> Kind | None:
    votes = [vote for vote in (c.vote(view) for c in CONVENTIONS) if vote is not None]
    return min(votes)[1] if votes else None


def _content(view: SpanView) -> tuple[str, str | None]:
    """Content and role the span itself carries, best source first."""
    if view.kind in (Kind.TOOL, Kind.CODE):
        for convention in CONVENTIONS:
            found = convention.tool_output(view)
            if found is not None:
                return found
    for convention in CONVENTIONS:
        answer = convention.output(view)
        if answer is not None:
            return answer
    found = _GENAI.tool_arguments(view)
    return found if found is not None else ("", None)


def _task_view(graph: TraceGraph, root: SpanView | None) -> SpanView | None:
    if root is not None and root.has_task:
        return root
    with_task = [view for view in graph.views if view.has_task]
    if with_task:
        return min(with_task, key=lambda view: view.span.start_time_unix_nano)
    return root


def _outcome(task_view: SpanView | None, root: SpanView | None) -> tuple[Outcome, str | None]:
    attrs = task_view.attributes if task_view is not None else {}
    declared = text(attrs.get(sc.TASK_OUTCOME)).lower()
    reason = text(attrs.get(sc.TASK_OUTCOME_REASON)) or None
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


def _views(resource_spans: Sequence[ResourceSpans]) -> list[SpanView]:
    out = []
    for resource in resource_spans:
        resource_attrs = attributes_to_dict(resource.resource.attributes)
        for scope in resource.scope_spans:
            for span in scope.spans:
                out.append(
                    SpanView(
                        span=span, attributes=attributes_to_dict(span.attributes), resource=resource_attrs
                    )
                )
    return out


def _logs_by_span(resource_logs: Sequence[ResourceLogs]) -> dict[tuple[bytes, bytes], list[LogRecord]]:
    out: dict[tuple[bytes, bytes], list[LogRecord]] = defaultdict(list)
    for resource in resource_logs:
        for scope in resource.scope_logs:
            for record in scope.log_records:
                if record.span_id:
                    out[(record.trace_id, record.span_id)].append(record)
    return out


def _service(views: Sequence[SpanView], root: SpanView | None) -> str:
    if root is not None and root.resource.get(sc.SERVICE_NAME):
        return text(root.resource[sc.SERVICE_NAME])
    names = Counter(text(v.resource.get(sc.SERVICE_NAME)) for v in views if v.resource.get(sc.SERVICE_NAME))
    return names.most_common(1)[0][0] if names else UNKNOWN_SERVICE


def build_trajectory(
    resource_spans: Sequence[ResourceSpans], resource_logs: Sequence[ResourceLogs] = ()
) -> Built:
    """The Trajectory of the ONE trace in ``resource_spans``, with notes on what was guessed.

    Raises :class:`NoTrajectory` (a ValueError) for no spans, spans of several traces (use
    :func:`trajectories_from_spans`) or a trace without agent steps.
    """
    views = _views(resource_spans)
    if not views:
        raise NoTrajectory("no spans given")
    found = {view.span.trace_id for view in views}
    if len(found) > 1:
        raise NoTrajectory(f"spans of {len(found)} traces given; use trajectories_from_spans")
    return _build(views, _logs_by_span(resource_logs))


def trajectory_from_spans(
    resource_spans: Sequence[ResourceSpans], resource_logs: Sequence[ResourceLogs] = ()
) -> Trajectory:
    """The Trajectory of the ONE trace in ``resource_spans`` (see :func:`build_trajectory`)."""
    return build_trajectory(resource_spans, resource_logs).trajectory


def trajectories_from_spans(
    resource_spans: Sequence[ResourceSpans], resource_logs: Sequence[ResourceLogs] = ()
) -> list[Trajectory]:
    """One Trajectory per trace that has agent steps, in order of first appearance."""
    by_trace: dict[bytes, list[SpanView]] = defaultdict(list)
    for view in _views(resource_spans):
        by_trace[view.span.trace_id].append(view)
    logs = _logs_by_span(resource_logs)
    out = []
    for views in by_trace.values():
        try:
            out.append(_build(views, logs).trajectory)
        except NoTrajectory:
            continue
    return out


def _no_steps_reason(graph: TraceGraph, root: SpanView | None) -> str:
    kinds = Counter(view.kind.value for view in graph.views if view.kind is not None)
    unknown = sorted({view.span.name for view in graph.views if view.kind is None})
    seen = [f"{count} {kind}" for kind, count in sorted(kinds.items())]
    if unknown:
        shown = ", ".join(unknown[:3]) + (", ..." if len(unknown) > 3 else "")
        seen.append(f"{len(unknown)} of no known convention ({shown})")
    only_root = root is not None and root.kind in (Kind.LLM, Kind.TOOL, Kind.CODE) and len(kinds) == 1
    return (
        f"has no agent steps: of its {len(graph.views)} spans ({'; '.join(seen)}) none is an agent, tool, "
        "code or LLM span below the root"
        + (" (a lone LLM call is not a multi-agent run)" if only_root else "")
        + "; conventions read: GenAI, OpenInference, OpenLLMetry, AG2, Logfire, otel-blame"
    )


def _build(views: list[SpanView], logs: dict[tuple[bytes, bytes], list[LogRecord]]) -> Built:
    trace_id = views[0].span.trace_id
    for view in views:
        view.kind = _classify(view)
        view.logs = logs.get((trace_id, view.span_id), [])
    graph = TraceGraph(views)
    root = graph.root()
    service = _service(graph.views, root)

    # When an instrumentation numbered its steps (otel_blame.step.index), those spans alone are
    # the steps: other instrumentations' spans in the same trace (AG2's own tracing, OpenInference
    # on the same LangGraph app, LLM client spans) describe the same messages again.
    declared = any(is_declared_step(view) for view in graph.views)
    resolver = AgentResolver(CONVENTIONS, graph)
    apart = {v.span_id for v in graph.views if not declared and v.kind == Kind.LLM and resolver.runs_apart(v)}
    step_views: list[tuple[SpanView, str, str | None]] = []
    for view in graph.views:
        if view.kind not in _STEP_KINDS:
            continue
        if declared and not is_declared_step(view):
            continue
        if view is root and view.kind != Kind.AGENT and not is_declared_step(view):
            continue
        content, role = _content(view)
        if not declared and view.kind == Kind.LLM and view.span_id not in apart:
            if any(a.kind in (Kind.AGENT, Kind.LLM) for a in graph.ancestors(view)):
                continue  # the agent span above is the step, or the outer LLM span of another instrumentation
        if view.kind == Kind.AGENT and not content and not declared:
            below = [d for d in graph.descendants(view) if d.kind in (Kind.AGENT, Kind.LLM)]
            if any(d.kind == Kind.AGENT or d.span_id in apart for d in below):
                continue  # a container of other agents, not a message of its own
            llm_below = sorted(
                (d for d in below if d.kind == Kind.LLM), key=lambda d: d.span.start_time_unix_nano
            )
            if llm_below:
                content, role = _content(llm_below[-1])
        step_views.append((view, content, role))

    # A tool or code span inside an agent's step whose output that agent's message already
    # carries (AG2 replies with the execution result) says nothing new: it is not a step of its
    # own, but its error marks the agent's step.
    inherited_errors: set[bytes] = set()
    if not declared:
        agent_content = {view.span_id: content for view, content, _ in step_views if view.kind == Kind.AGENT}
        kept = []
        for view, content, role in step_views:
            if view.kind in (Kind.TOOL, Kind.CODE):
                owner = next((a for a in graph.ancestors(view) if a.span_id in agent_content), None)
                if owner is not None and content.strip() in agent_content[owner.span_id]:
                    if _is_error(view):
                        inherited_errors.add(owner.span_id)
                    continue
            kept.append((view, content, role))
        step_views = kept

    if not step_views:
        raise NoTrajectory(_no_steps_reason(graph, root), trace_id=trace_id.hex(), service=service)

    if all(isinstance(v.attributes.get(sc.STEP_INDEX), int) for v, _, _ in step_views):
        step_views.sort(
            key=lambda item: (int(item[0].attributes[sc.STEP_INDEX]), item[0].span.start_time_unix_nano)
        )
    else:
        # a step that encloses other steps (an agent run around its sub-agents) speaks when it ends
        step_ids = {view.span_id for view, _, _ in step_views}
        enclosing = {
            view.span_id
            for view, _, _ in step_views
            if any(d.span_id in step_ids for d in graph.descendants(view))
        }
        step_views.sort(key=lambda item: _order_by_time(item[0], item[0].span_id in enclosing))

    from_service = 0
    steps: list[Step] = []
    for position, (view, content, role) in enumerate(step_views):
        kind = {Kind.TOOL: StepKind.TOOL, Kind.CODE: StepKind.CODE_EXECUTION}.get(view.kind, StepKind.MESSAGE)
        tool_name = first(CONVENTIONS, "tool_name", view) if kind == StepKind.TOOL else None
        agent = resolver.resolve(view) or tool_name
        if not agent:
            agent = service
            from_service += 1
        is_error = _is_error(view) or view.span_id in inherited_errors
        if not content and is_error:
            content = _exception_text(view.span) or view.span.status.message
        raw_role = text(view.attributes.get(sc.STEP_ROLE)) or role or _default_role(kind)
        steps.append(
            Step(
                index=position,
                agent=agent,
                role=raw_role,
                content=content,
                kind=kind,
                tool_name=tool_name,
                span_id=view.span_id.hex(),
                start_time_unix_nano=view.span.start_time_unix_nano or None,
                is_error=is_error,
            )
        )

    step_of = {view.span_id: position for position, (view, _, _) in enumerate(step_views)}
    task_view = _task_view(graph, root)
    outcome, reason = _outcome(task_view, root)
    trajectory = Trajectory(
        task=_task(graph, root, task_view),
        steps=steps,
        outcome=outcome,
        outcome_reason=reason,
        trace_id=trace_id.hex(),
        root_span_id=root.span_id.hex() if root is not None else None,
        source="otlp",
        dependency_failures=find_dependency_failures(graph, step_of, CONVENTIONS),
    )
    return Built(trajectory, BuildNotes(service=service, agent_from_service=from_service))


def _default_role(kind: StepKind) -> str:
    return {StepKind.TOOL: "tool", StepKind.CODE_EXECUTION: "code_execution"}.get(kind, "assistant")


def _order_by_time(view: SpanView, at_end: bool = False) -> tuple:
    index = view.attributes.get(sc.STEP_INDEX)
    time = view.span.end_time_unix_nano if at_end else view.span.start_time_unix_nano
    return (time, int(index) if isinstance(index, int) else 0)


def _task(graph: TraceGraph, root: SpanView | None, task_view: SpanView | None) -> Task:
    task_attrs = task_view.attributes if task_view is not None else {}
    conversation = next(
        (
            text(v.attributes[sc.GEN_AI_CONVERSATION_ID])
            for v in graph.views
            if sc.GEN_AI_CONVERSATION_ID in v.attributes
        ),
        None,
    )
    name = text(task_attrs.get(sc.TASK_NAME))
    task_input = text(task_attrs.get(sc.TASK_INPUT))
    final_output = text(task_attrs.get(sc.TASK_FINAL_OUTPUT))
    if root is not None:
        name = name or first(CONVENTIONS, "task_name", root) or root.span.name
        task_input = task_input or first(CONVENTIONS, "task_input", root) or ""
        final_output = final_output or first(CONVENTIONS, "task_output", root) or ""
    return Task(
        name=name or "task",
        input=task_input or None,
        expected_output=text(task_attrs.get(sc.TASK_EXPECTED_OUTPUT)) or None,
        final_output=final_output or None,
        conversation_id=conversation,
    )
