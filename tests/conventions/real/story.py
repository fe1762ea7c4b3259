"""The story every real-framework test runs, and what the trajectory built from its spans must say.

A manager asks a researcher (a managed agent, a member, a sub-agent or a handoff, as the framework
has it) how many people live in Paris. The researcher calls ``web_search``, which raises; it then
makes a number up, and the manager answers with it. A person reading the trace points at the failed
search, at the model call that asked for it, or at the researcher's call that made the number up:
that is where the verdict must land.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from opentelemetry.sdk.trace import ReadableSpan

from otel_blame import semconv as sc
from otel_blame.attribution.registry import create_method
from otel_blame.attribution.result import Attribution
from otel_blame.conventions import Built
from otel_blame.trajectory import Outcome, StepKind, Trajectory

QUESTION = "How many people live in Paris?"
TASK = "Find how many people live in Paris."
QUERY = "Paris population"
TOOL_ERROR = "search backend unreachable"
FABRICATED = "Paris has about 1 million inhabitants."
ANSWER = "About 1 million people."


def web_search(query: str) -> str:
    """Search the web for the query.

    Args:
        query: what to search for.
    """
    raise ConnectionError(TOOL_ERROR)


@dataclass(frozen=True)
class Expected:
    """One step as a person reading the trace would list it: who, what, from which span, saying what."""

    agent: str
    kind: StepKind
    span: str  # the name of the span the step comes from
    says: tuple[str, ...] = ()  # texts its content contains
    error: bool = False
    arguments: str | None = None  # text its recorded arguments contain (a tool step)


def model(agent: str, span: str, *says: str) -> Expected:
    return Expected(agent, StepKind.MESSAGE, span, says)


def tool(agent: str, span: str, *says: str, error: bool = False, arguments: str | None = None) -> Expected:
    return Expected(agent, StepKind.TOOL, span, says, error, arguments)


def code(agent: str, span: str, *says: str) -> Expected:
    """What a grouping span adds: its action's result that no step below it carries."""
    return Expected(agent, StepKind.CODE_EXECUTION, span, says)


def failed_search(agent: str, span: str) -> Expected:
    """The failed ``web_search``: its exception, and the arguments it was called with."""
    return tool(agent, span, TOOL_ERROR, error=True, arguments=QUERY)


_MODEL_OPERATIONS = {sc.OP_CHAT, sc.OP_TEXT_COMPLETION, sc.OP_GENERATE_CONTENT}


def is_model_call(span: ReadableSpan) -> bool:
    attributes = span.attributes or {}
    return (
        attributes.get(sc.OPENINFERENCE_SPAN_KIND) == sc.OPENINFERENCE_KIND_LLM
        or attributes.get(sc.GEN_AI_OPERATION_NAME) in _MODEL_OPERATIONS
    )


def is_tool_call(span: ReadableSpan) -> bool:
    attributes = span.attributes or {}
    return (
        attributes.get(sc.OPENINFERENCE_SPAN_KIND) == sc.OPENINFERENCE_KIND_TOOL
        or attributes.get(sc.GEN_AI_OPERATION_NAME) == sc.OP_EXECUTE_TOOL
        or attributes.get(sc.TRACELOOP_SPAN_KIND) == sc.TRACELOOP_KIND_TOOL
        # OpenLLMetry's LlamaIndex workflow step that called a tool
        or (attributes.get(sc.TRACELOOP_SPAN_KIND) == sc.TRACELOOP_KIND_TASK and "tool.name" in attributes)
    )


def span_id(span: ReadableSpan) -> str:
    return format(span.context.span_id, "016x")


def by_id(spans: Iterable[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span_id(span): span for span in spans}


def the_span(spans: Iterable[ReadableSpan], name: str, **attributes: object) -> ReadableSpan:
    """The one span of that name (and those attribute values)."""
    found = [
        s
        for s in spans
        if s.name == name and all((s.attributes or {}).get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, f"{len(found)} spans named {name!r} with {attributes}"
    return found[0]


def model_call_asking_for(spans: Iterable[ReadableSpan], tool_name: str) -> ReadableSpan:
    """The model call whose answer asks for ``tool_name`` (the call a failed tool came from)."""
    found = [s for s in spans if is_model_call(s) and _asks_for(s, tool_name)]
    assert len(found) == 1, [s.name for s in found]
    return found[0]


def model_call_saying(spans: Iterable[ReadableSpan], said: str) -> ReadableSpan:
    """The one model call whose output (not its input) says ``said``."""
    found = [s for s in spans if is_model_call(s) and said in _output_text(s)]
    assert len(found) == 1, [s.name for s in found]
    return found[0]


def _output_text(span: ReadableSpan) -> str:
    """A model call's output as each instrumentation records it: OpenInference's
    ``llm.output_messages.*``, GenAI's ``gen_ai.output.messages`` attribute or ``gen_ai.choice`` event."""
    attributes = dict(span.attributes or {})
    parts = [str(v) for k, v in attributes.items() if k.startswith("llm.output_messages.")]
    parts.append(str(attributes.get(sc.GEN_AI_OUTPUT_MESSAGES, "")))
    parts += [
        str(dict(e.attributes or {}).get("message", "")) for e in span.events if e.name == sc.EVENT_CHOICE
    ]
    return "\n".join(parts)


def _asks_for(span: ReadableSpan, tool_name: str) -> bool:
    openinference = any(
        key.startswith("llm.output_messages.") and key.endswith(".function.name") and value == tool_name
        for key, value in (span.attributes or {}).items()
    )
    return openinference or f'"name":"{tool_name}"' in _output_text(span).replace(" ", "")


def assert_steps(trajectory: Trajectory, spans: Sequence[ReadableSpan], expected: list[Expected]) -> None:
    """The steps, in order: agent, kind, the span each comes from (a span of this trace, never two
    steps from one span), error flag, what each says and, for a tool, what it was called with."""
    named = by_id(spans)
    ids = [step.span_id for step in trajectory.steps]
    assert len(ids) == len(set(ids)), f"a span gives two steps: {ids}"
    assert all(i in named for i in ids), "a step's span_id is not a span of the trace"
    got = [
        (step.agent, step.kind, named[step.span_id].name if step.span_id in named else None, step.is_error)
        for step in trajectory.steps
    ]
    want = [(e.agent, e.kind, e.span, e.error) for e in expected]
    assert got == want, "\n".join(["steps differ; built:", *map(repr, got), "expected:", *map(repr, want)])
    for step, wanted in zip(trajectory.steps, expected, strict=True):
        for text in wanted.says:
            assert text in step.content, f"step {step.index} ({step.agent}) lacks {text!r}: {step.content!r}"
        if wanted.arguments is not None:
            assert wanted.arguments in (step.arguments or ""), (
                f"step {step.index} arguments: {step.arguments!r}"
            )
        if step.kind == StepKind.TOOL:
            assert step.tool_name, step


def assert_failed_search(
    trajectory: Trajectory, span: ReadableSpan, agent: str, tool_name: str = "web_search"
) -> None:
    """The failed ``web_search`` span is one step: a failed tool step of the agent that called it,
    with the exception and the arguments (the tool by the name the trace gives it: Semantic Kernel's
    is ``{plugin}-web_search``)."""
    steps = [step for step in trajectory.steps if step.span_id == span_id(span)]
    assert len(steps) == 1, f"{len(steps)} steps from the failed search span"
    step = steps[0]
    assert (step.agent, step.kind, step.tool_name, step.is_error) == (
        agent,
        StepKind.TOOL,
        tool_name,
        True,
    )
    assert TOOL_ERROR in step.content and QUERY in (step.arguments or ""), step


def assert_agents(built: Built, manager: str, researcher: str, service: str) -> None:
    """The two agents by names of their own: told apart, never the service's, none left unnamed."""
    trajectory = built.trajectory
    assert sorted(trajectory.agents) == sorted([manager, researcher]), trajectory.agents
    assert manager != researcher and service not in trajectory.agents
    assert built.notes.agent_unnamed == 0


def failed_run(trajectory: Trajectory) -> Trajectory:
    """The run as attribution sees it once it is known to have failed: the trace's own outcome, or
    the late verdict ``otel-blame verdict --failed`` sends when the answer turns out wrong."""
    if trajectory.outcome == Outcome.FAILURE:
        return trajectory
    return trajectory.model_copy(update={"outcome": Outcome.FAILURE})


def blame(trajectory: Trajectory) -> Attribution:
    """The default method's verdict on the failed run."""
    return create_method("ranker").attribute(failed_run(trajectory))


def assert_blamed_on(trajectory: Trajectory, agent: str, allowed: Sequence[ReadableSpan]) -> None:
    """The default method blames ``agent``, at a step from one of the ``allowed`` spans."""
    verdict = blame(trajectory)
    assert_blamed(trajectory, verdict.step, allowed)
    assert verdict.agent == agent


def assert_late_verdict(
    answer: dict, trajectory: Trajectory, agent: str, allowed: Sequence[ReadableSpan]
) -> None:
    """The processor's answer to the late verdict: attributed to ``agent``, at an allowed span's step."""
    assert answer["status"] == "attributed"
    assert answer["agent"] == agent
    assert_blamed(trajectory, answer["step"], allowed)


def assert_culprit_span(culprit: dict, agent: str, allowed: Sequence[ReadableSpan]) -> None:
    """The span the processor marked as the culprit: one of the allowed, blaming ``agent``."""
    assert culprit["span_id"] in {span_id(s) for s in allowed}
    assert culprit["attributes"]["blame.agent"] == agent


def assert_blamed(trajectory: Trajectory, step: int, allowed: Iterable[ReadableSpan]) -> None:
    """The verdict's step comes from one of the spans a person would point at (a model call or a tool
    call of the trace)."""
    allowed = list(allowed)
    assert all(is_model_call(s) or is_tool_call(s) for s in allowed)
    names = {span_id(s): s.name for s in allowed}
    blamed = trajectory.steps[step]
    assert blamed.span_id in names, (
        f"blamed step {step} ({blamed.agent}, {blamed.kind}, span {blamed.span_id}: {blamed.content[:80]!r}),"
        f" not one of {names}"
    )
