"""The zoo's ``debate`` app for real: AgentChat's round-robin team (three solvers, a critic with a
calculator tool, a judge) on the scripted LLM, run through the campaign worker's own run path (the
injector on the message path, the spans turned into a trajectory). A clean debate passes; each fault
kind the app declares fails a run, with the planted agent and step as the truth; the critic catches
a wrong answer that comes with the right method (``masked``); a short campaign's JSON and dataset
hold the documented fields."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider

from otel_blame.cli import main
from otel_blame.inject.faults import FaultKind
from otel_blame.inject.worker import RunSpans, run_one
from tests.support.blame import check_default_blame

pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext.models.openai")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from otel_blame.inject.zoo import debate  # noqa: E402 - after AgentChat is known to be there

Run = Callable[..., dict[str, Any]]


@pytest.fixture(autouse=True)
def _autogen_only() -> None:
    """This app needs the AgentChat instrumentation (the package's conftest turns it off)."""


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    """One run of the app as a campaign's worker makes it: ``run(seed, fault=None)`` -> its answer."""
    from otel_blame.instrumentation import OtelBlameInstrumentor, configure, reset_configuration

    provider = TracerProvider()
    spans = RunSpans()
    provider.add_span_processor(spans)
    reset_configuration()
    configure(tracer_provider=provider)
    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument(tracer_provider=provider)

    def one(seed: int, fault: dict[str, Any] | None = None) -> dict[str, Any]:
        spec = {"app_seed": seed, "pass_seed": True, "fault": fault}
        return run_one(debate.run_task, spec, provider, spans)

    yield one
    instrumentor.uninstrument()
    reset_configuration()
    provider.shutdown()


def _steps(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return answer["trajectory"]["steps"]


def test_the_problems_have_a_trap_the_hasty_solvers_fall_into():
    for seed in range(20):
        problem = debate.problem_for(seed)
        numbers = [f"{n:g}" for n in problem.numbers]
        hasty = round(debate.evaluate(problem.template.hasty(numbers)), problem.template.decimals)
        assert hasty != problem.expected, problem.question
        assert problem.hasty and problem.hasty <= set(problem.solvers) - {"solver_a"}
        assert len(problem.solvers) in (3, 4) and problem.solvers[0] in debate.SOLVERS


@pytest.mark.parametrize("seed", [0, 3])  # four solvers, two hasty; three, two hasty (outvoted at first)
def test_a_clean_debate_settles_on_the_right_answer(run, seed):
    solvers = list(debate.problem_for(seed).solvers)
    answer = run(seed)
    assert answer["error"] is None and answer["planted"] is None
    assert answer["outcome"] == "success"
    steps = _steps(answer)
    assert 10 <= len(steps) <= 40
    speakers = [s["agent"] for s in steps if s["kind"] == "message"]
    assert speakers[: 1 + len(solvers)] == ["user", *solvers]
    assert speakers.count("judge") == debate.ROUNDS
    assert [s["tool_name"] for s in steps if s["kind"] == "tool"] == ["calculate"]
    final = steps[-1]
    assert final["agent"] == "judge" and "Final answer:" in final["content"]


# kind -> (app seed, agent, step, fault seed): a message, call or tool result the kind changes so
# that the team settles on a wrong answer or none
FAILING = {
    "number": (3, "solver_a", 2, 0),  # the critic recomputes the expression with a wrong number
    "drop_instruction": (3, "solver_a", 2, 0),
    "contradict_instruction": (3, "solver_a", 2, 0),
    "tool_error": (3, "critic", 5, 0),
    "wrong_tool_result": (3, "critic", 5, 0),
    "wrong_tool_argument": (3, "critic", 4, 0),
    "terminate": (3, "solver_b", 1, 0),
    "premature_handoff": (3, "solver_a", 2, 0),
    "lost_context": (3, "critic", 6, 0),
}


# fault kinds of FAILING the offline default does not blame at the planted step: kept visible, each
# fails the test as soon as the default finds it (tests/support/blame.py)
# (drop_instruction was one from 2026-11-29, when the model learned from AEGIS, to 2026-12-02, when the
# refit with the new task-givers found it again)
KNOWN_MISSES: set[str] = {"lost_context", "number", "premature_handoff"}


def test_every_declared_fault_kind_has_a_failing_case():
    assert set(debate.FAULTS) == set(FAILING)
    assert all(FaultKind(kind) for kind in debate.FAULTS)


@pytest.mark.parametrize("kind", sorted(FAILING))
def test_a_planted_fault_fails_the_debate_with_its_agent_and_step_as_the_truth(run, kind):
    seed, agent, step, fault_seed = FAILING[kind]
    clean = run(seed)
    tools = sorted({tool for _, _, what, _, tool in clean["seen"] if what == "tool_call" and tool})
    fault = {"kind": kind, "agent": agent, "step": step, "seed": fault_seed, "exact": True, "tools": tools}
    answer = run(seed, fault)
    assert answer["error"] is None
    planted = answer["planted"]
    assert planted is not None and (planted["kind"], planted["agent"], planted["step"]) == (kind, agent, step)
    assert answer["outcome"] == "failure"
    faulted, clean_steps = _steps(answer), _steps(clean)
    assert faulted[step]["agent"] == agent
    assert faulted[step]["content"] != clean_steps[step]["content"]
    assert [s["content"] for s in faulted[:step]] == [s["content"] for s in clean_steps[:step]]
    assert answer["trajectory"]["outcome_reason"]
    check_default_blame(answer["trajectory"], agent, step, known_miss=kind in KNOWN_MISSES)


def test_the_critic_catches_a_wrong_answer_given_with_the_right_method(run):
    fault = {"kind": "number", "agent": "solver_a", "step": 2, "seed": 17, "exact": True}
    answer = run(3, fault)
    assert answer["planted"]["after"].endswith("Answer: 114.75")
    assert answer["outcome"] == "success"  # masked: marked incorrect, solver_a revised
    critique = next(s["content"] for s in _steps(answer) if "verified answer" in s["content"])
    assert "solver_a: 114.75, incorrect" in critique


@pytest.mark.slow
def test_a_short_campaign_reports_and_labels_its_runs(tmp_path: Path):
    out = tmp_path / "dataset"
    result = CliRunner().invoke(
        main,
        ["inject", "--app", "zoo:debate", "--runs", "4", "--seed", "3", "--json", "--dataset-out", str(out)]
        + [arg for kind in ("terminate", "wrong_tool_argument") for arg in ("--fault", kind)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["runs"] == 4 and report["baseline"]["status"] == "clean_passed"
    assert set(report["statuses"]) <= {"attributed", "masked", "not_injected", "no_blame"}
    failed = [r for r in report["results"] if r["status"] == "attributed"]
    assert failed, report["statuses"]
    for record in failed:
        assert record["fault"]["kind"] in ("terminate", "wrong_tool_argument")
        assert record["agent_correct"] == (record["prediction"]["agent"] == record["fault"]["agent"])
    written = sorted(out.rglob("*.json"))
    assert len(written) == len(failed)
