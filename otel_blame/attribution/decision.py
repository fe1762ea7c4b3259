"""Whether a run is blamed at all, and why: the one decision every surface takes before attributing.

The processor (on the outcome its span-level failure detection wrote into the Trajectory), the
command line, the JSON API and the web UI all call :func:`blame_decision`, so the same run gets
the same answer everywhere: a failed run is attributed; a run that succeeded, or whose outcome is
not known, is not; a run without agent steps has nothing to blame. ``why`` is the sentence each
surface shows.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from otel_blame.trajectory import Outcome, Trajectory


class BlameDecision(BaseModel):
    """Blame this run or not, its outcome, and the sentence that says why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    blame: bool
    outcome: Outcome
    why: str


def blame_decision(trajectory: Trajectory) -> BlameDecision:
    """A failed run with agent steps is blamed; a successful, unknown or empty one is not."""
    outcome = trajectory.outcome
    if outcome is Outcome.SUCCESS:
        why = "The run succeeded: nothing to blame."
        if trajectory.outcome_reason:
            why = f"The run succeeded ({trajectory.outcome_reason}): nothing to blame."
        return BlameDecision(blame=False, outcome=outcome, why=why)
    if outcome is Outcome.UNKNOWN:
        return BlameDecision(
            blame=False,
            outcome=outcome,
            why="The run does not say whether it failed (outcome unknown): nothing blamed.",
        )
    if not trajectory.steps:
        return BlameDecision(
            blame=False, outcome=outcome, why="The run failed, but it has no agent steps to blame."
        )
    reason = (trajectory.outcome_reason or "").strip()
    why = f"The run failed: {reason}" if reason else "The run failed."
    if reason and not why.endswith((".", "!", "?")):
        why += "."
    return BlameDecision(blame=True, outcome=outcome, why=why)
