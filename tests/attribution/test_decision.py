"""Contract C4: one decision, blame or not and why, from the Trajectory alone; and the sentences every
surface shows for a run blamed anyway and for an undecided verdict."""

from __future__ import annotations

import pytest

from otel_blame.attribution.decision import BlameDecision, blame_decision, undecided_sentence
from otel_blame.attribution.result import Candidate
from otel_blame.trajectory import Outcome, Trajectory


def _run(outcome: Outcome, reason: str | None = None, steps: int = 2) -> Trajectory:
    built = [{"index": 0, "agent": f"a{i}", "content": f"step {i}"} for i in range(steps)]
    return Trajectory.from_steps(built, outcome=outcome).model_copy(update={"outcome_reason": reason})


def test_a_failed_run_is_blamed_with_its_reason() -> None:
    decision = blame_decision(_run(Outcome.FAILURE, "root span status ERROR"))
    assert decision == BlameDecision(
        blame=True, outcome=Outcome.FAILURE, why="The run failed: root span status ERROR."
    )
    assert blame_decision(_run(Outcome.FAILURE)).why == "The run failed."


@pytest.mark.parametrize(
    ("outcome", "why"),
    [
        (Outcome.SUCCESS, "The run succeeded: nothing to blame."),
        (Outcome.UNKNOWN, "The run does not say whether it failed (outcome unknown): nothing blamed."),
    ],
)
def test_success_and_unknown_are_not_blamed(outcome: Outcome, why: str) -> None:
    decision = blame_decision(_run(outcome))
    assert (decision.blame, decision.outcome, decision.why) == (False, outcome, why)


def test_a_failed_run_without_steps_has_nothing_to_blame() -> None:
    decision = blame_decision(_run(Outcome.FAILURE, steps=0))
    assert not decision.blame
    assert decision.outcome is Outcome.FAILURE
    assert "no agent steps" in decision.why


def test_a_successful_run_that_gives_a_reason_is_not_blamed() -> None:
    """The success branch that carries ``outcome_reason`` (an evaluator's "score 0.92 >= 0.8")."""
    decision = blame_decision(_run(Outcome.SUCCESS, "evaluation score 0.92 >= 0.8"))
    assert decision == BlameDecision(
        blame=False,
        outcome=Outcome.SUCCESS,
        why="The run succeeded (evaluation score 0.92 >= 0.8): nothing to blame.",
    )


@pytest.mark.parametrize("outcome", [Outcome.SUCCESS, Outcome.UNKNOWN])
def test_blamed_anyway_says_what_the_run_said_and_that_a_step_was_blamed(outcome: Outcome) -> None:
    decision = blame_decision(_run(outcome))
    said = decision.blamed_anyway()
    assert "nothing" not in said and "blamed anyway, as if it had failed, as asked" in said
    assert ("succeeded" in said) is (outcome is Outcome.SUCCESS)
    assert ("outcome unknown" in said) is (outcome is Outcome.UNKNOWN)


@pytest.mark.parametrize(
    ("candidates", "said"),
    [
        ([("X", 3), ("Y", 7), ("Z", 9)], "Undecided: X at step 3 or Y at step 7"),
        ([("X", 3), ("X", 7)], "Undecided: X at step 3 or step 7"),
        ([], "Undecided: X at step 3 is the only candidate"),
        ([("X", 3)], "Undecided: X at step 3 is the only candidate"),
    ],
)
def test_an_undecided_verdict_names_its_two_best_candidates(candidates: list, said: str) -> None:
    ranked = [
        Candidate(step=step, agent=agent, score=0.5 - i / 10) for i, (agent, step) in enumerate(candidates)
    ]
    assert undecided_sentence(ranked, "X", 3) == said
