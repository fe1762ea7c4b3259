"""The offline heuristic on small hand-built runs: each failure signal, determinism, name-blindness."""

from __future__ import annotations

import pytest

from otel_blame.attribution.base import AttributionError
from otel_blame.attribution.heuristic import HeuristicAttribution
from otel_blame.trajectory import StepKind, Trajectory

from .conftest import make_trajectory

CODE = StepKind.CODE_EXECUTION


def attribute(trajectory: Trajectory, **kwargs: bool):
    return HeuristicAttribution(**kwargs).attribute(trajectory)


def test_unrecovered_code_error_blames_the_code_author():
    trajectory = make_trajectory(
        [
            ("Analyst", "We need the mean of the column. Alice will write the code."),
            ("Alice", "```python\nimport pandas as pd\nprint(pd.read_csv('x.csv')['v'].mean())\n```"),
            (
                "Runner",
                "exitcode: 1 (execution failed)\nTraceback (most recent call last):\nKeyError: 'v'",
                CODE,
            ),
            ("Analyst", "Hmm, it seems something went wrong, let's wrap up with the best guess of 12."),
            ("Bob", "I agree. TERMINATE"),
        ]
    )
    trajectory.steps[2].is_error = True
    result = attribute(trajectory)
    assert (result.agent, result.step) == ("Alice", 1)
    assert "error" in result.reason


def test_fabricated_data_is_blamed():
    trajectory = make_trajectory(
        [
            ("Lead", "Plan: 1. find the 2020 population of both towns, 2. subtract."),
            ("Finder", "I searched the census site and found the table of towns."),
            ("Calc", "Since I cannot access the data, let's assume hypothetical values: A=1000, B=400."),
            ("Finder", "The difference is 600."),
        ],
        input="Population difference between A and B?",
    )
    result = attribute(trajectory)
    assert (result.agent, result.step) == ("Calc", 2)
    assert "assumed or made-up" in result.reason


def test_final_wrong_answer_is_traced_to_where_it_entered():
    trajectory = make_trajectory(
        [
            ("Planner", "Let us look up the year the bridge opened and report it."),
            ("Searcher", "The search results list several bridges; the relevant page is the city's archive."),
            ("Reader", "According to the archive page, the bridge opened in 1874."),
            ("Checker", "Good work everyone, that matches my reading."),
            ("Planner", "Final answer: 1874"),
        ]
    )
    from otel_blame.attribution.heuristic import Weights
    from otel_blame.attribution.signals import FinalAnswerEntry, ScoringContext

    assert FinalAnswerEntry().evidence(ScoringContext.build(trajectory)) == {2: 1.0}
    result = attribute_with(trajectory, Weights(final_answer=0.6, agent_support=0.1))
    assert result.step == 2 and result.agent == "Reader"


def test_coordinator_runs_blame_the_workers_lacking_report():
    steps: list[tuple[str, str]] = [("user", "Find the opening hours of the museum.")]
    steps.append(("Boss", "Plan: Scout searches the web, Clerk reads files. Scout, go first."))
    for round_number in range(4):
        steps.append(("Boss", f"Scout, please search for the museum hours (attempt {round_number})."))
        if round_number == 0:
            steps.append(("Scout", "I typed 'museum' into the search bar. The page shows a gift shop."))
        else:
            steps.append(("Scout", f"I clicked a result {round_number}. Here is a page about parking."))
        steps.append(
            ("Boss", "We have not yet found the hours; Scout did not provide them. Clerk stands by.")
        )
    trajectory = make_trajectory(steps, input="Find the opening hours of the museum.")
    from otel_blame.attribution.heuristic import Weights
    from otel_blame.attribution.signals import LackingReport, ScoringContext

    # the first lacking report counts most (the default weight is fitted, so the signal is checked
    # directly and with a weight that lets it speak)
    evidence = LackingReport().evidence(ScoringContext.build(trajectory))
    assert max(evidence, key=evidence.get) == 3
    result = attribute_with(trajectory, Weights(lacking_report=0.3))
    assert result.agent == "Scout" and result.step == 3


def test_candidates_are_ranked_scored_and_deterministic(five_steps):
    first = attribute(five_steps)
    second = attribute(five_steps)
    assert first.model_dump(exclude={"cost"}) == second.model_dump(exclude={"cost"})
    scores = [c.score for c in first.candidates]
    assert scores[1:] == sorted(scores[1:], reverse=True) and all(0 <= s <= 1 for s in scores)
    assert first.candidates[0].step == first.step and first.method == "heuristic" and first.model is None
    assert 0 < first.confidence <= 1 and first.cost.llm_calls == 0


def test_answer_does_not_depend_on_agent_names(five_steps):
    renamed = {
        "Planner": "Zeta",
        "Researcher": "alpha_bot",
        "Coder": "Q",
        "Terminal": "shell",
        "Verifier": "V2",
    }
    other = Trajectory.from_steps(
        [s.model_copy(update={"agent": renamed[s.agent], "role": "x"}) for s in five_steps.steps],
        task=five_steps.task,
        outcome=five_steps.outcome,
    )
    original, relabelled = attribute(five_steps), attribute(other)
    assert relabelled.step == original.step
    assert relabelled.agent == renamed[original.agent]


def test_ground_truth_changes_nothing_when_it_is_absent(five_steps):
    without_truth = five_steps.model_copy(
        update={"task": five_steps.task.model_copy(update={"expected_output": None})}
    )
    assert attribute(without_truth, with_ground_truth=True).step == attribute(without_truth).step


def test_hundred_step_run_is_handled():
    steps = [
        (f"Agent{i % 4}", f"Step {i}: I looked at item {i} and found value {i * 7}.") for i in range(100)
    ]
    result = attribute(make_trajectory(steps))
    assert 0 <= result.step < 100 and len(result.candidates) == 5


def test_empty_trajectory_is_an_attribution_error():
    with pytest.raises(AttributionError, match="no steps"):
        attribute(Trajectory())


def test_an_agent_with_several_suspect_steps_is_the_likelier_culprit():
    from otel_blame.attribution.heuristic import Weights

    trajectory = make_trajectory(
        [
            ("Bea", "Let's assume hypothetical values; we assume the rate is 5 percent."),
            ("Abe", "I will fill in a placeholder for the rate."),
            ("Abe", "The table below holds dummy values."),
        ]
    )
    alone = attribute_with(trajectory, Weights(agent_support=0.0))
    together = attribute_with(trajectory, Weights(agent_support=1.0))
    assert (alone.agent, alone.step) == ("Bea", 0)
    assert (together.agent, together.step) == ("Abe", 1)
    assert together.candidates[0].step == 1


def attribute_with(trajectory: Trajectory, weights):
    return HeuristicAttribution(weights=weights).attribute(trajectory)


def test_confidence_is_low_without_any_failure_signal():
    quiet = attribute(make_trajectory([("A", "hello"), ("B", "hi there")]))
    loud = attribute(
        make_trajectory(
            [("A", "hello"), ("B", "Let's assume hypothetical placeholder values."), ("A", "Answer: 17")]
        )
    )
    assert quiet.confidence <= 0.3 < loud.confidence
    assert (loud.agent, loud.step) == ("B", 1)
