"""Contract C4: one decision, blame or not and why, from the Trajectory alone."""

from __future__ import annotations

import pytest

from otel_blame.attribution.decision import BlameDecision, blame_decision
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
