"""Category, dependency and MAST failure mode of an attribution (otel_blame.attribution.systemic),
and the failing dependencies the span builder finds (otel_blame.conventions.dependencies)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from otel_blame import semconv as sc
from otel_blame.attribution.heuristic import HeuristicAttribution
from otel_blame.attribution.result import Attribution
from otel_blame.attribution.systemic import FAILURE_MODES, describe_failure, specification_evidence
from otel_blame.conventions import build_trajectory
from otel_blame.conventions.otlp import sdk_spans_to_proto
from otel_blame.trajectory import DependencyFailure, Outcome, StepKind, Task, Trajectory


def _trajectory(steps: list[tuple[str, str]], **fields: object) -> Trajectory:
    return Trajectory.from_steps(
        [{"agent": agent, "content": content} for agent, content in steps],
        task=Task(input="What is six times seven?"),
        outcome=Outcome.FAILURE,
        **fields,
    )


def _attribution(step: int, agent: str) -> Attribution:
    return Attribution(agent=agent, step=step, confidence=0.5, reason="r.", method="test")


def test_mast_has_fourteen_modes_in_three_groups() -> None:
    assert len(FAILURE_MODES) == 14
    groups = {group for _, _, group in FAILURE_MODES.values()}
    assert groups == {"specification issues", "inter-agent misalignment", "task verification"}


def test_repeating_the_same_message_is_step_repetition() -> None:
    loop = "Let me search the archive again."
    run = _trajectory(
        [("Planner", "Plan: search."), ("Searcher", loop), ("Searcher", loop), ("Searcher", loop)]
    )
    described = describe_failure(run, _attribution(1, "Searcher"))
    assert described.category == "agent"
    assert described.failure_mode == "step_repetition"


def test_an_approval_without_evidence_is_incorrect_verification() -> None:
    run = _trajectory(
        [
            ("Solver", "6 times 7 is 41."),
            ("Verifier", "I agree, 41 is correct. Verified."),
            ("Solver", "Final answer: 41"),
        ]
    )
    answer = HeuristicAttribution().attribute(run)
    if answer.step == 1:
        assert answer.failure_mode == "incorrect_verification"
    # forced onto the verifier's step, the approval signal names the mode
    from otel_blame.attribution.heuristic import Weights, gather_evidence

    described = describe_failure(
        run, _attribution(1, "Verifier"), gather_evidence(run).by_signal, Weights().as_dict()
    )
    assert described.failure_mode == "incorrect_verification"


def test_no_evidence_no_mode() -> None:
    run = _trajectory([("Planner", "Plan: multiply."), ("Solver", "The answer is 41.")])
    described = describe_failure(run, _attribution(1, "Solver"))
    assert described.category == "agent"
    assert described.failure_mode is None
    assert described.reason == "r."


def test_a_failure_in_the_result_of_its_own_call_is_a_dependency() -> None:
    run = Trajectory.from_steps(
        [
            {"agent": "Planner", "content": "Plan: look it up."},
            {"agent": "Researcher", "content": "Calling lookup."},
            {"agent": "lookup", "content": "Error: timed out", "kind": StepKind.TOOL, "tool_name": "lookup"},
            {"agent": "Writer", "content": "Final answer: 41"},
        ],
        outcome=Outcome.FAILURE,
        dependency_failures=[DependencyFailure(name="lookup", kind="timeout", detail="TimeoutError", step=2)],
    )
    described = describe_failure(run, _attribution(1, "Researcher"))
    assert (described.category, described.dependency) == ("dependency", "lookup")
    # a later agent message in between: not this step's dependency any more
    assert describe_failure(run, _attribution(0, "Planner")).category == "agent"


def test_a_method_that_already_set_the_category_is_left_alone() -> None:
    run = _trajectory([("Solver", "The instructions are contradictory, so: 41.")])
    given = _attribution(0, "Solver").model_copy(update={"category": "agent"})
    assert describe_failure(run, given).category == "agent"
    assert describe_failure(run, _attribution(0, "Solver")).category == "specification"


def _spans(build) -> list:  # noqa: ANN001
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span(sc.workflow_span_name("t")) as root:
        root.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_WORKFLOW)
        root.set_attribute(sc.TASK_INPUT, "task")
        build(tracer)
    return sdk_spans_to_proto(memory.get_finished_spans())


def _agent(tracer, name: str, text: str, inner=None) -> None:  # noqa: ANN001
    with tracer.start_as_current_span(sc.agent_span_name(name)) as span:
        span.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT)
        span.set_attribute(sc.GEN_AI_AGENT_NAME, name)
        span.set_attribute(
            sc.GEN_AI_OUTPUT_MESSAGES,
            f'[{{"role": "assistant", "parts": [{{"type": "text", "content": "{text}"}}]}}]',
        )
        if inner is not None:
            inner(tracer)


def test_a_rate_limited_model_call_is_a_provider_failure() -> None:
    def llm(tracer) -> None:  # noqa: ANN001
        with tracer.start_as_current_span("chat gpt-4o") as span:
            span.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_CHAT)
            span.set_attribute(sc.GEN_AI_PROVIDER_NAME, "openai")
            span.set_attribute(sc.HTTP_RESPONSE_STATUS_CODE, 429)
            span.set_status(Status(StatusCode.ERROR, "RateLimitError"))

    trajectory = build_trajectory(
        _spans(lambda t: (_agent(t, "Planner", "Plan."), _agent(t, "Solver", "No answer.", llm)))
    ).trajectory
    assert [(f.name, f.kind, f.detail, f.step) for f in trajectory.dependency_failures] == [
        ("openai", "http_status", "HTTP 429", 1)
    ]


def test_a_timeout_exception_is_a_timeout_and_failing_code_is_not_a_dependency() -> None:
    def timed_out(tracer) -> None:  # noqa: ANN001
        with tracer.start_as_current_span(sc.tool_span_name("weather")) as tool:
            tool.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_EXECUTE_TOOL)
            tool.set_attribute(sc.GEN_AI_TOOL_NAME, "weather")
            tool.record_exception(TimeoutError("read timed out after 30 s"))
            tool.set_status(Status(StatusCode.ERROR))

    def bad_code(tracer) -> None:  # noqa: ANN001
        with tracer.start_as_current_span("execute_code") as code:
            code.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_EXECUTE_CODE)
            code.set_attribute(sc.AG2_SPAN_TYPE, sc.AG2_TYPE_CODE_EXECUTION)
            code.set_attribute(sc.AG2_CODE_EXECUTION_EXIT_CODE, 1)
            code.set_status(Status(StatusCode.ERROR, "NameError"))

    trajectory = build_trajectory(
        _spans(lambda t: (_agent(t, "Coder", "code", bad_code), _agent(t, "Reporter", "x", timed_out)))
    ).trajectory
    assert [(f.name, f.kind) for f in trajectory.dependency_failures] == [("weather", "timeout")]


def test_a_result_that_says_the_service_failed_is_a_dependency_but_prose_is_not() -> None:
    failed_call = (
        "exitcode: 1 (execution failed)\nCode output: \nError: ConnectionError: "
        "the service did not answer (HTTP 503 Service Unavailable) at api.rates.example.com"
    )
    run = Trajectory.from_steps(
        [
            {"agent": "planner", "content": "Plan: fetch the rate."},
            {"agent": "coder", "content": "```python\nprint(get_rate())\n```"},
            {"agent": "executor", "content": failed_call, "kind": StepKind.CODE_EXECUTION},
            {"agent": "reviewer", "content": "The code did not run. TERMINATE"},
        ],
        outcome=Outcome.FAILURE,
    )
    described = describe_failure(run, _attribution(1, "coder"))
    assert (described.category, described.dependency) == ("dependency", "api.rates.example.com")
    assert "HTTP 503" in described.reason
    prose = _trajectory([("Solver", "Maybe the server answered HTTP 503, so I guess 41.")])
    assert describe_failure(prose, _attribution(0, "Solver")).category == "agent"
    plain_bug = run.model_copy(
        update={
            "steps": [
                *run.steps[:2],
                run.steps[2].model_copy(update={"content": "NameError: x"}),
                run.steps[3],
            ]
        }
    )
    assert describe_failure(plain_bug, _attribution(1, "coder")).category == "agent"


def test_the_signals_named_as_mast_evidence_exist() -> None:
    """A renamed heuristic signal must not silently stop naming its failure mode."""
    from otel_blame.attribution.signals import SIGNALS
    from otel_blame.attribution.systemic import AGENT_SIGNAL_MODES, SIGNAL_MODES

    names = {signal.name for signal in SIGNALS}
    assert set(SIGNAL_MODES) | set(AGENT_SIGNAL_MODES) <= names
    assert set(SIGNAL_MODES.values()) | set(AGENT_SIGNAL_MODES.values()) <= set(FAILURE_MODES)


@pytest.mark.parametrize(
    "text",
    [
        "Hmm, the task is ambiguous about which year is meant.",
        "These conflicting instructions cannot both hold.",
        "The question doesn't specify the currency.",
        "The request did not include the file.",
        "There is not enough information in the task to answer.",
        "The requirements seem to be self-contradictory.",
        "The prompt looks under-specified.",
        "THE TASK IS IMPOSSIBLE AS STATED.",
    ],
)
def test_every_way_of_saying_the_task_is_wrong_is_read(text: str) -> None:
    """Each form the specification pattern knows (the substring gate in front of it must let it through)."""
    run = _trajectory([("Planner", "Plan: look it up."), ("Solver", text)])
    assert specification_evidence(run) == 1


def test_a_task_that_is_merely_mentioned_is_not_a_specification_fault() -> None:
    run = _trajectory([("Solver", "The task is done; I did not need the file. Answer: 41.")])
    assert specification_evidence(run) is None
