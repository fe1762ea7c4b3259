"""Whether a run is blamed at all, and why: the one decision every surface takes before attributing.

The processor (on the outcome its span-level failure detection wrote into the Trajectory), the
command line, the JSON API and the web UI all call :func:`blame_decision`, so the same run gets
the same answer everywhere: a failed run is attributed; a run that succeeded, or whose outcome is
not known, is not; a run without agent steps has nothing to blame. ``why`` is the sentence each
surface shows; :meth:`BlameDecision.blamed_anyway` is the one shown when a person asked for blame
regardless.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from otel_blame.attribution.result import Candidate
from otel_blame.trajectory import Outcome, Trajectory

UNDECIDED_SHOWN = 2  # how many candidates an undecided verdict names


class BlameDecision(BaseModel):
    """Blame this run or not, its outcome, and the sentence that says why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    blame: bool
    outcome: Outcome
    why: str

    def blamed_anyway(self) -> str:
        """The sentence for a run blamed although this decision was not to (``--assume-failed``, the
        upload page's "Blame a step even if …"): what the run said, and that a step was blamed as if
        it had failed, so no surface says "nothing blamed" above a culprit."""
        if self.outcome is Outcome.SUCCESS:
            return "The run succeeded; a step was blamed anyway, as if it had failed, as asked."
        if self.outcome is Outcome.UNKNOWN:
            return (
                "The run does not say whether it failed (outcome unknown); a step was blamed anyway, "
                "as if it had failed, as asked."
            )
        return self.why


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


def undecided_parts(candidates: Sequence[Candidate], agent: str, step: int) -> list[tuple[str | None, int]]:
    """The candidates an undecided verdict names, best first, as (agent, step); the agent is None
    where it is the same as the part before (``coder at step 3 or step 7``). ``agent``/``step`` is the
    verdict's top pick, named alone when the method ranked no candidates."""
    picked: list[tuple[str, int]] = []
    for candidate in [*candidates, Candidate(step=step, agent=agent, score=0.0)]:
        if all(candidate.step != known for _, known in picked):
            picked.append((candidate.agent, candidate.step))
    shown = picked[:UNDECIDED_SHOWN] if candidates else picked[:1]
    return [
        (None if position > 0 and name == shown[position - 1][0] else name, index)
        for position, (name, index) in enumerate(shown)
    ]


class Verdict(Protocol):
    """What a verdict's sentence reads: an Attribution, or a stored run."""

    @property
    def agent(self) -> str: ...

    @property
    def step(self) -> int: ...

    @property
    def decided(self) -> bool: ...

    @property
    def candidates(self) -> Sequence[Candidate]: ...


def verdict_sentence(verdict: Verdict) -> str:
    """The verdict's line on every surface: ``coder at step 2``, or, when the evidence did not decide
    it, ``Undecided: coder at step 2 or planner at step 1``."""
    if verdict.decided:
        return f"{verdict.agent} at step {verdict.step}"
    return undecided_sentence(verdict.candidates, verdict.agent, verdict.step)


def undecided_sentence(candidates: Sequence[Candidate], agent: str, step: int) -> str:
    """``Undecided: coder at step 3 or planner at step 7``: what every surface says instead of naming
    a culprit when the evidence does not single one out (``Attribution.decided`` false)."""
    parts = undecided_parts(candidates, agent, step)
    if len(parts) == 1:
        return f"Undecided: {parts[0][0]} at step {parts[0][1]} is the only candidate"
    return "Undecided: " + " or ".join(
        f"step {index}" if name is None else f"{name} at step {index}" for name, index in parts
    )
