"""The offline default (otel_blame.attribution.ranker over the causal reading): the planted step of
each fault kind on small runs made by the demo app's own agents, failing dependencies decided with
the step (also from spans), and the shipped model loading with the standard library only."""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from otel_blame import semconv as sc
from otel_blame.attribution.agents import agent_rows
from otel_blame.attribution.causal import read_causally
from otel_blame.attribution.causal.arithmetic import printed_numbers
from otel_blame.attribution.ranker import RankerAttribution, RankerModel, rank
from otel_blame.attribution.registry import DEFAULT_METHOD, create_method
from otel_blame.attribution.step_rows import FEATURES, step_rows
from otel_blame.conventions import build_trajectory
from otel_blame.conventions.otlp import sdk_spans_to_proto
from otel_blame.inject.demo_app import code_reply, plan_reply, problem_for, review_reply
from otel_blame.inject.faults import FaultKind, applies, apply_fault
from otel_blame.trajectory import Outcome, StepKind, Task, Trajectory

# --- runs made by the demo app's agents, with one planted fault ------------------------------------

AGENTS = ("user", "planner", "coder", "executor", "reviewer")


def _execute(message: str) -> str:
    """The executor of these tests: runs the coder's plain arithmetic (the demo's code has nothing
    else), printing what Python would."""
    if "```" not in message:
        return "exitcode: 1 (execution failed)\nCode output: \nno code block found"
    body = message.split("```python\n", 1)[1].split("```", 1)[0]
    printed: list[str] = []
    names: dict[str, object] = {"round": round}
    try:
        for statement in ast.parse(body).body:
            code = compile(ast.Module([statement], []), "<run>", "exec")
            if isinstance(statement, ast.Expr):
                call = statement.value
                assert isinstance(call, ast.Call)
                value = eval(compile(ast.Expression(call.args[0]), "<run>", "eval"), names)  # noqa: S307
                printed.append(str(value))
            else:
                exec(code, names)  # noqa: S102 - the coder's arithmetic, written by the tests' script
    except NameError as error:
        return f"exitcode: 1 (execution failed)\nCode output: \nNameError: {error}"
    return "exitcode: 0 (execution succeeded)\nCode output: \n" + "\n".join(printed)


def demo_run(seed: int, kind: FaultKind, agent: str) -> tuple[Trajectory, int] | None:
    """The demo app's group chat (its scripted agents, computed from the conversation) with ``kind``
    planted into ``agent``'s message; None when that message cannot take the fault."""
    problem = problem_for(seed)
    rng = random.Random(seed)
    steps: list[dict] = []
    planted: int | None = None

    def say(who: str, text: str, step_kind: StepKind = StepKind.MESSAGE) -> str:
        nonlocal planted
        kind_name = "code_execution" if step_kind != StepKind.MESSAGE else "message"
        if planted is None and who == agent and applies(kind, text, kind_name):
            text = apply_fault(kind, text, rng).text
            planted = len(steps)
        steps.append({"agent": who, "content": text, "kind": step_kind})
        return text

    question = say("user", problem.question)
    if "TERMINATE" not in question:
        plan = say("planner", plan_reply(question))
        if "TERMINATE" not in plan:
            code = say("coder", code_reply(plan))
            if "TERMINATE" not in code:
                result = say("executor", _execute(code), StepKind.CODE_EXECUTION)
                say("reviewer", review_reply(result))
    if planted is None:
        return None
    final = steps[-1]["content"]
    if problem.is_right(final.split("Final answer:")[-1] if "Final answer:" in final else ""):
        return None  # the fault did not matter: a passing run is not attributed
    trajectory = Trajectory.from_steps(
        steps,
        task=Task(input=problem.question, expected_output=str(problem.expected)),
        outcome=Outcome.FAILURE,
    )
    return trajectory, planted


# fault kind -> the agents it is planted into in these runs (where the demo's campaign plants it)
PLANTED = {
    FaultKind.NUMBER: ("user", "planner", "coder"),
    FaultKind.DROP_INSTRUCTION: ("planner", "coder"),
    FaultKind.CONTRADICT_INSTRUCTION: ("user", "planner", "coder"),
    FaultKind.TOOL_ERROR: ("executor",),
    FaultKind.WRONG_TOOL_RESULT: ("executor",),
    FaultKind.TERMINATE: ("user", "planner", "coder"),
}
SEEDS = range(12)
# the share of these runs whose planted step must be found, per kind (measured 2026-11-29 with the
# model fitted on AEGIS beside Who&When, TRAIL and the zoo, issue 32: number 0.44, drop_instruction
# 0.75, contradict_instruction 0.66, terminate 0.78, the tool faults 1.0; before it, on 2026-11-28:
# 0.47, 0.54, 0.94, 0.9 and 1.0. Real failures decide the fit, and the zoo's own figures are
# docs/benchmarks.md's leave-one-app-out ones; these floors guard the shipped model in sample)
FLOORS = {
    FaultKind.NUMBER: 0.4,
    FaultKind.DROP_INSTRUCTION: 0.7,
    FaultKind.CONTRADICT_INSTRUCTION: 0.6,
    FaultKind.TOOL_ERROR: 1.0,
    FaultKind.WRONG_TOOL_RESULT: 1.0,
    FaultKind.TERMINATE: 0.72,
}


@pytest.mark.parametrize("kind", list(PLANTED), ids=str)
def test_the_planted_step_is_found_for_each_fault_kind(kind: FaultKind) -> None:
    method = RankerAttribution()
    found = total = 0
    for agent in PLANTED[kind]:
        for seed in SEEDS:
            made = demo_run(seed, kind, agent)
            if made is None:
                continue
            trajectory, planted = made
            answer = method.attribute(trajectory)
            total += 1
            found += answer.step == planted and answer.agent == trajectory.steps[planted].agent
    assert total >= 8, f"only {total} failed runs with {kind} planted"
    assert found / total >= FLOORS[kind], f"{kind}: {found} of {total} planted steps found"


def test_a_wrong_result_is_the_tool_not_the_code_author() -> None:
    made = demo_run(3, FaultKind.WRONG_TOOL_RESULT, "executor")
    assert made is not None
    trajectory, planted = made
    answer = RankerAttribution().attribute(trajectory)
    assert (answer.step, answer.agent) == (planted, "executor")
    assert answer.category == "dependency"
    assert read_causally(trajectory).features["result_contradicts_call"] == {planted: 1.0}


def test_arithmetic_code_is_worked_out_and_anything_else_is_not_judged() -> None:
    assert printed_numbers('```python\nx = 3 * 2.5\nprint(f"Result: {round(x, 1)}")\n```') == {"7.5"}
    assert printed_numbers("```python\nimport os\nprint(os.getcwd())\n```") is None
    assert printed_numbers("```python\nx = 2 ** 10000\nprint(x)\n```") is None
    assert printed_numbers("no code here") is None


# --- failing dependencies: candidates in the same ranking, one coherent verdict ---------------------


def _spans(build) -> list:  # noqa: ANN001
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "research-desk"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span(sc.workflow_span_name("brief")) as root:
        root.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_WORKFLOW)
        root.set_attribute(sc.TASK_INPUT, "Write a two-line brief on the 2024 harvest in Ontario.")
        build(tracer)
        root.set_status(Status(StatusCode.ERROR, "the brief says unknown"))
    return sdk_spans_to_proto(memory.get_finished_spans())


def _agent(tracer, name: str, text: str, inner=None) -> None:  # noqa: ANN001
    with tracer.start_as_current_span(sc.agent_span_name(name)) as span:
        span.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT)
        span.set_attribute(sc.GEN_AI_AGENT_NAME, name)
        span.set_attribute(
            sc.GEN_AI_OUTPUT_MESSAGES,
            json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}]),
        )
        if inner is not None:
            inner(tracer)


def _failing_search(tracer) -> None:  # noqa: ANN001
    with tracer.start_as_current_span(sc.tool_span_name("web_search")) as tool:
        tool.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_EXECUTE_TOOL)
        tool.set_attribute(sc.GEN_AI_TOOL_NAME, "web_search")
        tool.set_attribute(sc.HTTP_RESPONSE_STATUS_CODE, 503)
        tool.set_status(Status(StatusCode.ERROR, "503 Service Unavailable"))


@pytest.mark.parametrize("extra_planning", [0, 3], ids=["early", "late"])
def test_a_run_whose_only_cause_is_a_failing_search_blames_the_search(extra_planning: int) -> None:
    def build(tracer) -> None:  # noqa: ANN001
        _agent(tracer, "planner", "Plan: 1. search the 2024 harvest figures. 2. write the brief.")
        for round_ in range(extra_planning):
            _agent(tracer, "planner", f"Refining the plan, round {round_ + 1}: search first, then write.")
        _agent(tracer, "researcher", "Searching the web for the 2024 Ontario harvest.", _failing_search)
        _agent(tracer, "writer", "The 2024 harvest in Ontario: unknown.")

    trajectory = build_trajectory(_spans(build)).trajectory
    answer = create_method(DEFAULT_METHOD).attribute(trajectory)
    assert (answer.category, answer.dependency) == ("dependency", "web_search")
    failed = next(f.step for f in trajectory.dependency_failures if f.name == "web_search")
    assert answer.step == failed
    assert answer.agent == trajectory.steps[failed].agent
    assert "planner" not in answer.reason and answer.reason.count("Step ") == 1


@pytest.mark.parametrize("said", ["upstream answered HTTP 503", "upstream answered HTTP 429"])
def test_a_result_that_says_the_service_failed_is_the_dependency_wherever_it_sits(said: str) -> None:
    steps = [
        ("planner", "Plan: 1. look up the exchange rate. 2. convert 120 EUR. 3. report."),
        ("researcher", "Calling the rates API for EUR/USD."),
        ("rates_api", f"Error: the request failed ({said})", StepKind.TOOL),
        ("writer", "I could not get a rate, so the converted amount is unknown."),
    ]
    for padding in (0, 4):
        padded = steps[:1] + [("planner", f"Note {n}: keep it short.") for n in range(padding)] + steps[1:]
        trajectory = Trajectory.from_steps(
            [{"agent": a, "content": c, "kind": k[0] if k else StepKind.MESSAGE} for a, c, *k in padded],
            task=Task(input="Convert 120 EUR to USD at today's rate."),
            outcome=Outcome.FAILURE,
        )
        answer = RankerAttribution().attribute(trajectory)
        tool_step = 2 + padding
        assert (answer.category, answer.step, answer.agent) == ("dependency", tool_step, "rates_api"), said


# --- the shipped model -----------------------------------------------------------------------------


def test_the_shipped_model_covers_every_feature_and_loads_with_the_standard_library() -> None:
    model = RankerModel.load()
    assert model.features == FEATURES
    assert len(model.weights) == len(model.mean) == len(model.scale) == len(FEATURES)
    # the app-side install has no numpy or pydantic extras: the model file is plain JSON
    code = (
        "import json, importlib.resources as r, sys;"
        "d = json.loads(r.files('otel_blame.attribution').joinpath('ranker_model.json').read_text());"
        "assert 'numpy' not in sys.modules; print(len(d['weights']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == len(FEATURES)


def test_the_verdict_is_deterministic_and_gives_reasons() -> None:
    made = demo_run(5, FaultKind.NUMBER, "planner")
    assert made is not None
    first = RankerAttribution().attribute(made[0])
    second = RankerAttribution().attribute(made[0])
    assert first.model_dump(exclude={"cost"}) == second.model_dump(exclude={"cost"})
    assert first.reason.startswith(f"Step {first.step} by {first.agent}: ")
    assert first.candidates[0].step == first.step


def test_the_heuristic_name_is_the_offline_default_and_signals_is_the_old_method() -> None:
    assert DEFAULT_METHOD == "ranker"
    assert isinstance(create_method("heuristic"), RankerAttribution)
    assert create_method("heuristic").name == "heuristic"  # labels and calibration files keep matching
    assert not isinstance(create_method("signals"), RankerAttribution)


def test_a_researcher_who_makes_a_number_up_is_blamed_by_the_default() -> None:
    steps = [
        {
            "agent": "planner",
            "content": "Plan: the researcher finds how many people live in Paris, the writer answers.",
        },
        {
            "agent": "researcher",
            "content": "I cannot look it up, so let's assume Paris has 1 million inhabitants.",
        },
        {"agent": "writer", "content": "Answer: about 1 million people."},
    ]
    trajectory = Trajectory.from_steps(
        steps, task=Task(input="How many people live in Paris?"), outcome=Outcome.FAILURE
    )
    assert create_method("signals").attribute(trajectory).agent == "researcher"  # the story is clear
    attribution = create_method(DEFAULT_METHOD).attribute(trajectory)
    assert (attribution.agent, attribution.step) == ("researcher", 1)


def test_a_wrong_product_is_blamed_on_the_solver_by_the_default() -> None:
    story = [("Planner", "Plan: compute 6*7."), ("Solver", "The answer is 41."), ("Critic", "Looks right.")]
    trajectory = Trajectory.from_steps(
        [{"agent": agent, "content": content} for agent, content in story], outcome=Outcome.FAILURE
    )
    assert create_method("signals").attribute(trajectory).agent == "Solver"  # the story is clear
    attribution = create_method(DEFAULT_METHOD).attribute(trajectory)
    assert (attribution.agent, attribution.step) == ("Solver", 1)


# the planted faults that are decided, right, in every run above: a mechanical fault (an outage in a
# tool's result) is shown by the run itself, whatever the data sets the model learned from
DECIDED_KINDS = (FaultKind.TOOL_ERROR, FaultKind.WRONG_TOOL_RESULT)


@pytest.mark.parametrize("kind", DECIDED_KINDS, ids=str)
def test_a_mechanical_fault_is_decided_and_right(kind: FaultKind) -> None:
    method = RankerAttribution()
    verdicts = []
    for agent in PLANTED[kind]:
        for seed in SEEDS:
            made = demo_run(seed, kind, agent)
            if made is not None:
                trajectory, planted = made
                answer = method.attribute(trajectory)
                verdicts.append((answer.decided, answer.agent == trajectory.steps[planted].agent))
    assert len(verdicts) >= 8
    assert all(decided and right for decided, right in verdicts), verdicts


def test_an_agent_whose_only_step_is_the_task_as_given_is_no_candidate() -> None:
    task = "def add(a, b):\n    '''Return the sum of a and b, both integers: add(2, 3) == 5.'''\n"
    steps = [
        {"agent": "Node-1", "content": task + "    return a + b\n"},
        {"agent": "Node0", "content": "```python\ndef add(a, b):\n    return a - b\n```"},
        {"agent": "Node1", "content": "The answer is correct: add(2, 3) gives -1 as asked."},
    ]
    trajectory = Trajectory.from_steps(steps, task=Task(input=task), outcome=Outcome.FAILURE)
    rows = step_rows(trajectory)
    assert rows.reading.graph.task_step == 0  # (Node-1's only step restates the task)
    table = agent_rows(rows, rank(rows, RankerModel.load()))
    assert "Node-1" not in rows.roles.task_givers and "Node-1" not in table.agents
    assert RankerAttribution().attribute(trajectory).step != 0
