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

import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from otel_blame import semconv as sc
from otel_blame.trajectory import (
    Outcome,
    Step,
    StepKind,
    Task,
    Trajectory,
    name_from_input,
    stated_final_answer,
)

from .ag2 import AG2
from .agents import AgentResolver, first
from .dependencies import find_dependency_failures
from .genai import GenAI, GenAIEvents, client_exception_text
from .logfire import Logfire
from .model import Convention, Kind, SpanView, TraceGraph
from .openinference import OpenInference
from .otlp import attributes_to_dict
from .ours import Ours, is_declared_step
from .text import text
from .traceloop import Traceloop

# Asked in this order; the first answer wins (GenAI's log records come after every attribute).
CONVENTIONS: tuple[Convention, ...] = (
    Ours(),
    GenAI(),
    AG2(),
    OpenInference(),
    Traceloop(),
    Logfire(),
    GenAIEvents(),
)
_STEP_KINDS = (Kind.AGENT, Kind.TOOL, Kind.CODE, Kind.LLM)
FRAMING_WORDS = 8  # a grouping span's result around a step's own output, with no more than this of its own
FRAMED_MIN_CHARS = 4  # a step's output this short is not looked for inside a result (a "0" is everywhere)
_TOOL_CALL = re.compile(r"^tool_call ([^(\s]+)\(", re.MULTILINE)
UNKNOWN_SERVICE = "unknown_service"
UNNAMED_AGENT = "unnamed agent"  # a step's agent when no telemetry names one (never the service or host)


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
    # steps no telemetry named an agent for: named after the app's span they ran in, or UNNAMED_AGENT
    agent_unnamed: int = 0

    @property
    def guessed(self) -> bool:
        return self.agent_unnamed > 0


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


def _content(view: SpanView, *, arguments: bool = True) -> tuple[str, str | None]:
    """Content and role the span itself carries, best source first; a tool span that recorded no
    result reads as its arguments unless ``arguments`` is off (they are then the step's own field)."""
    if view.kind in (Kind.TOOL, Kind.CODE):
        for convention in CONVENTIONS:
            found = convention.tool_output(view)
            if found is not None:
                return found
    for convention in CONVENTIONS:
        answer = convention.output(view)
        if answer is not None:
            return answer
    found = first(CONVENTIONS, "tool_arguments", view) if arguments and view.kind == Kind.TOOL else None
    return (found, "tool") if found else ("", None)


def _task_view(graph: TraceGraph, root: SpanView | None) -> SpanView | None:
    if root is not None and root.has_task:
        return root
    with_task = [view for view in graph.views if view.has_task]
    if with_task:
        return min(with_task, key=lambda view: view.span.start_time_unix_nano)
    return root


def _outcome(
    task_view: SpanView | None, root: SpanView | None, resolver: AgentResolver, step_failed: bool
) -> tuple[Outcome, str | None]:
    """Declared by the task attributes; else the root span's status or exception; else a failure when
    the outermost agent run ended in an error (its status or an exception event). A root whose status
    is OK is a success only when no step below it failed: OpenInference and OpenLLMetry set OK on
    every span that returned, so over a failed tool call it says only that the run went on."""
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
        if status.code == Status.STATUS_CODE_OK and not step_failed:
            return Outcome.SUCCESS, reason
    top_agent = resolver.top_agent
    if top_agent is not None and top_agent is not root:
        if top_agent.span.status.code == Status.STATUS_CODE_ERROR:
            said = top_agent.span.status.message or _exception_text(top_agent.span)
            return Outcome.FAILURE, reason or f"the agent run {top_agent.span.name!r} ended in an error" + (
                f": {said}" if said else ""
            )
        exception = _exception_text(top_agent.span)
        if exception:
            return Outcome.FAILURE, reason or f"the agent run {top_agent.span.name!r} raised {exception}"
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


@dataclass
class _Found:
    """A span that speaks as a step, before the steps are numbered."""

    view: SpanView
    kind: StepKind
    content: str
    role: str | None = None
    tool_name: str | None = None
    arguments: str | None = None
    is_error: bool = False
    at_end: bool = False  # it speaks when it ends (it encloses other steps, or reports their outcome)


def _build(views: list[SpanView], logs: dict[tuple[bytes, bytes], list[LogRecord]]) -> Built:
    trace_id = views[0].span.trace_id
    for view in views:
        view.kind = _classify(view)
        view.logs = logs.get((trace_id, view.span_id), [])
    graph = TraceGraph(views)
    root = graph.root()
    service = _service(graph.views, root)
    resolver = AgentResolver(CONVENTIONS, graph)

    # When an instrumentation numbered its steps (otel_blame.step.index), those spans alone are the
    # steps: other instrumentations' spans in the same trace (AG2's own tracing, OpenInference on the
    # same LangGraph app, LLM client spans) describe the same messages again.
    if any(is_declared_step(view) for view in graph.views):
        found = _declared_steps(graph)
    else:
        found = _nested_steps(graph, root, resolver)
    if not found:
        raise NoTrajectory(_no_steps_reason(graph, root), trace_id=trace_id.hex(), service=service)

    unnamed = 0
    steps: list[Step] = []
    for position, item in enumerate(found):
        view = item.view
        agent = resolver.resolve(view) or item.tool_name
        if not agent:
            agent = resolver.caller(view) or UNNAMED_AGENT
            unnamed += 1
        content = item.content
        if not content and item.is_error:
            content = _exception_text(view.span) or client_exception_text(view) or view.span.status.message
        raw_role = text(view.attributes.get(sc.STEP_ROLE)) or item.role or _default_role(item.kind)
        steps.append(
            Step(
                index=position,
                agent=agent,
                role=raw_role,
                content=content,
                kind=item.kind,
                tool_name=item.tool_name,
                arguments=item.arguments,
                span_id=view.span_id.hex(),
                start_time_unix_nano=view.span.start_time_unix_nano or None,
                is_error=item.is_error,
            )
        )

    step_of = {item.view.span_id: position for position, item in enumerate(found)}
    task_view = _task_view(graph, root)
    outcome, reason = _outcome(task_view, root, resolver, any(step.is_error for step in steps))
    trajectory = Trajectory(
        task=_task(graph, root, task_view, resolver, steps),
        steps=steps,
        outcome=outcome,
        outcome_reason=reason,
        trace_id=trace_id.hex(),
        root_span_id=root.span_id.hex() if root is not None else None,
        source="otlp",
        dependency_failures=find_dependency_failures(graph, step_of, CONVENTIONS),
    )
    notes = BuildNotes(service=service, agent_unnamed=unnamed)
    return Built(trajectory, notes)


def _step_kind(view: SpanView) -> StepKind:
    return {Kind.TOOL: StepKind.TOOL, Kind.CODE: StepKind.CODE_EXECUTION}.get(view.kind, StepKind.MESSAGE)  # type: ignore[arg-type]


def _declared_steps(graph: TraceGraph) -> list[_Found]:
    """Our own instrumentation's numbered steps, in the order it numbered them."""
    found = []
    for view in graph.views:
        if view.kind not in _STEP_KINDS or not is_declared_step(view):
            continue
        kind = _step_kind(view)
        content, role = _content(view)
        tool_name = first(CONVENTIONS, "tool_name", view) if kind == StepKind.TOOL else None
        found.append(_Found(view, kind, content, role, tool_name, is_error=_is_error(view)))
    if all(isinstance(item.view.attributes.get(sc.STEP_INDEX), int) for item in found):
        found.sort(
            key=lambda item: (int(item.view.attributes[sc.STEP_INDEX]), item.view.span.start_time_unix_nano)
        )
    else:
        found.sort(key=lambda item: _order_by_time(item.view))
    return found


def _below_agent(graph: TraceGraph, view: SpanView, resolver: AgentResolver) -> Iterator[SpanView]:
    """The span's ancestors up to (not including) the nearest agent span, or tool span that runs
    another agent (a delegation: what runs inside it is that agent's, not the tool's own work)."""
    for ancestor in graph.ancestors(view):
        if ancestor.kind == Kind.AGENT or resolver.delegated_to(ancestor):
            return
        yield ancestor


def _nested_steps(graph: TraceGraph, root: SpanView | None, resolver: AgentResolver) -> list[_Found]:
    """Steps from the real nesting of third-party telemetry.

    Every model call is a step of the agent it ran in (its output message, with the tool calls it asks
    for); every tool or code span is a tool step, with its status, exception and arguments, even when it
    returns nothing; an agent span is a step of its own only when nothing below it speaks for it. A
    grouping span (smolagents' "Step N") adds what its action returned when no step below it carries
    that (a CodeAgent's execution logs), or its error when no step below failed. The same call recorded
    by two instrumentations is one step: the outer span."""
    found: list[_Found] = []
    for view in graph.views:
        if view.kind not in _STEP_KINDS or (view is root and view.kind != Kind.AGENT):
            continue
        enclosing = list(_below_agent(graph, view, resolver))
        if view.kind == Kind.LLM:
            if any(a.kind in (Kind.LLM, Kind.TOOL, Kind.CODE) for a in enclosing):
                continue  # the outer LLM span's call seen again, or a tool's own model call
            content, role = _content(view)
            found.append(_Found(view, StepKind.MESSAGE, content, role, is_error=_is_error(view)))
        elif view.kind in (Kind.TOOL, Kind.CODE):
            tool_name = first(CONVENTIONS, "tool_name", view) if view.kind == Kind.TOOL else None
            if any(
                a.kind == view.kind and first(CONVENTIONS, "tool_name", a) == tool_name for a in enclosing
            ):
                continue  # one call seen by two instrumentations
            content, role = _content(view, arguments=False)
            arguments = first(CONVENTIONS, "tool_arguments", view)
            found.append(_Found(view, _step_kind(view), content, role, tool_name, arguments, _is_error(view)))
    owned: dict[bytes, list[_Found]] = defaultdict(list)
    for item in found:
        owner = resolver.owner(item.view)
        if owner is not None:
            owned[owner.span_id].append(item)
    for view in graph.views:
        if view.kind != Kind.AGENT:
            continue
        own = owned.get(view.span_id, [])
        if any(item.view.kind == Kind.LLM for item in own):
            continue  # its model calls speak for it
        content, role = _content(view)
        if own and not content:
            continue  # its tools speak for it
        if not own and _container_repeating(graph, view, content, found):
            continue  # a container of other agents (a crew's task), not a message of its own
        # an agent's message that carries its tools' output (AG2 replies with the execution result)
        # is the step; the tool steps it carries say nothing new, but their errors mark it
        carried = [item for item in own if item.content.strip() and item.content.strip() in content]
        if carried:
            carried_ids = {id(item) for item in carried}
            found[:] = [item for item in found if id(item) not in carried_ids]
        is_error = _is_error(view) or any(item.is_error for item in carried)
        found.append(_Found(view, StepKind.MESSAGE, content, role, is_error=is_error))
    found.extend(_group_results(graph, found))
    enclosing_ids = _enclosing(graph, found)
    for item in found:
        item.at_end = item.at_end or item.view.span_id in enclosing_ids
    found.sort(key=lambda item: _order_by_time(item.view, item.at_end))
    return found


def _container_repeating(graph: TraceGraph, view: SpanView, content: str, found: list[_Found]) -> bool:
    """An agent span around other agent spans that says nothing, or only what a step below it said
    (OpenLLMetry's CrewAI task span, an ``invoke_agent`` reporting its agent's last answer)."""
    below = {d.span_id for d in graph.descendants(view) if d.kind == Kind.AGENT}
    if not below:
        return False
    said = content.strip()
    if not said:
        return True
    inside = {d.span_id for d in graph.descendants(view)}
    return any(said in item.content for item in found if item.view.span_id in inside)


def _group_results(graph: TraceGraph, found: list[_Found]) -> list[_Found]:
    """What grouping spans add: their action's result or error, where no step below them has it."""
    by_span = {item.view.span_id: item for item in found}
    out = []
    for view in graph.views:
        if view.kind != Kind.GROUP or graph.parent(view) is None:
            continue
        children = graph.children.get(view.span_id, [])
        calls = [by_span[c.span_id] for c in children if c.kind == Kind.LLM and c.span_id in by_span]
        if not calls:
            continue  # a chain around other spans (a graph, a node's sub-steps, a tool's own model call)
        below = [by_span[d.span_id] for d in graph.descendants(view) if d.span_id in by_span]
        called = _TOOL_CALL.search(calls[0].content)
        kind, tool_name = (StepKind.TOOL, called.group(1)) if called else (StepKind.CODE_EXECUTION, None)
        result = first(CONVENTIONS, "observation", view)
        stated = result.strip() if result else ""
        if stated and not _repeats(stated, [item.content for item in below if item is not calls[0]]):
            out.append(
                _Found(view, kind, result or "", None, tool_name, is_error=_is_error(view), at_end=True)
            )
        elif _is_error(view) and not any(item.is_error for item in below):
            out.append(_Found(view, kind, "", None, tool_name, is_error=True, at_end=True))
    return out


def _repeats(result: str, below: list[str]) -> bool:
    """Whether a grouping span's result says nothing a step below it did not: it is one of theirs, or
    what is left of it once theirs are taken out is a short framing without a value ("Execution logs:
    Last output from code snippet:" around the final answer a tool step already gave)."""
    if any(result in content for content in below):
        return True
    left = result
    for content in below:
        content = content.strip()
        if len(content) >= FRAMED_MIN_CHARS and content in left:
            left = left.replace(content, " ")
    if left == result:
        return False
    return len(left.split()) <= FRAMING_WORDS and not any(character.isdigit() for character in left)


def _enclosing(graph: TraceGraph, found: list[_Found]) -> set[bytes]:
    """Steps that speak when they end: a tool or code step, whose content is what it returned (a tool
    that hands the task to another agent returns that agent's answer, or its error, after the agent's
    own steps, enclosed by its span or not), and an agent span around other steps (its sub-agents)."""
    step_ids = {item.view.span_id for item in found}
    return {
        item.view.span_id
        for item in found
        if item.view.kind in (Kind.TOOL, Kind.CODE)
        or (item.view.kind == Kind.AGENT and any(d.span_id in step_ids for d in graph.descendants(item.view)))
    }


def _default_role(kind: StepKind) -> str:
    return {StepKind.TOOL: "tool", StepKind.CODE_EXECUTION: "code_execution"}.get(kind, "assistant")


def _order_by_time(view: SpanView, at_end: bool = False) -> tuple:
    index = view.attributes.get(sc.STEP_INDEX)
    time = view.span.end_time_unix_nano if at_end else view.span.start_time_unix_nano
    return (time, int(index) if isinstance(index, int) else 0)


def _task_fields(
    view: SpanView | None, name: str, task_input: str, final_output: str
) -> tuple[str, str, str]:
    """The task's name, input and final output, each kept when known, else read from ``view``."""
    if view is None:
        return name, task_input, final_output
    return (
        name or first(CONVENTIONS, "task_name", view) or "",
        task_input or first(CONVENTIONS, "task_input", view) or "",
        final_output or first(CONVENTIONS, "task_output", view) or "",
    )


def _task(
    graph: TraceGraph,
    root: SpanView | None,
    task_view: SpanView | None,
    resolver: AgentResolver,
    steps: list[Step],
) -> Task:
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
    # a task declared on the trace (ours) is not the top agent's: its turn's input and output are a step's
    declared = task_view is not None and task_view.has_task
    name, task_input, final_output = _task_fields(root, name, task_input, final_output)
    if not declared and not (name and task_input and final_output):
        name, task_input, final_output = _task_fields(resolver.top_agent, name, task_input, final_output)
    final_output = final_output or stated_final_answer(step.content for step in reversed(steps)) or ""
    workflow = name or (root.span.name if root is not None else "")
    name = name or name_from_input(task_input) or workflow
    return Task(
        name=name or "task",
        workflow=workflow or None,
        input=task_input or None,
        expected_output=text(task_attrs.get(sc.TASK_EXPECTED_OUTPUT)) or None,
        final_output=final_output or None,
        conversation_id=conversation,
    )
