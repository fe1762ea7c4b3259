"""Positional baselines: answers that read nothing but the order of the steps and who spoke.

They exist to be printed beside every accuracy figure. A benchmark with strong positional priors
(Who&When: the decisive error is often step 1, or the first report of the first worker) rewards a
rule that knows nothing about the run, so a method's figure only means something as a margin over
the best of these rules. None of them knows agent names; they look only at positions and at which
steps share a speaker.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from otel_blame.attribution.base import AttributionError
from otel_blame.attribution.result import Attribution, Candidate
from otel_blame.trajectory import Trajectory


def _first_step(trajectory: Trajectory) -> int:
    """The first step: the opening message (a task restatement, a plan)."""
    return 0


def _first_failed_step(trajectory: Trajectory) -> int:
    """The first step that reported an error (an error status, a failed tool), else the last step."""
    return next((step.index for step in trajectory.steps if step.is_error), len(trajectory.steps) - 1)


def _step_one(trajectory: Trajectory) -> int:
    """Step 1 (the second step): the first reply to the opening message."""
    return min(1, len(trajectory.steps) - 1)


def _second_speaker_first_step(trajectory: Trajectory) -> int:
    """The first step of the second distinct speaker after the opening message: in a coordinated run
    the first worker report (the request, the coordinator's plan, then the first worker)."""
    seen: list[str] = []
    for step in trajectory.steps[1:]:
        if step.agent not in seen:
            seen.append(step.agent)
            if len(seen) == 2:
                return step.index
    return _step_one(trajectory)


def _last_step(trajectory: Trajectory) -> int:
    """The last step: the final answer, where a failure becomes visible."""
    return len(trajectory.steps) - 1


def _most_frequent_speaker_first_step(trajectory: Trajectory) -> int:
    """The first step of the agent that wrote the most steps (ties: the earlier speaker)."""
    counts = Counter(step.agent for step in trajectory.steps)
    order = {agent: position for position, agent in enumerate(trajectory.agents)}
    busiest = max(counts, key=lambda agent: (counts[agent], -order[agent]))
    return next(step.index for step in trajectory.steps if step.agent == busiest)


POSITIONAL_RULES: dict[str, tuple[Callable[[Trajectory], int], str]] = {
    "first_step": (_first_step, "the first step and its speaker"),
    "step_one": (_step_one, "step 1 and its speaker"),
    "second_speaker": (_second_speaker_first_step, "the first step of the second distinct speaker"),
    "last_step": (_last_step, "the last step and its speaker"),
    "frequent_speaker": (_most_frequent_speaker_first_step, "the most frequent speaker at its first step"),
    "first_failed": (_first_failed_step, "the first step that reported an error, else the last step"),
}


class PositionalBaseline:
    """One positional rule as an attribution method: the chosen step and the agent who wrote it."""

    def __init__(self, rule: str) -> None:
        if rule not in POSITIONAL_RULES:
            raise ValueError(
                f"unknown positional rule {rule!r}; choose one of: {', '.join(POSITIONAL_RULES)}"
            )
        self.rule = rule
        self.name = f"baseline:{rule}"
        self._pick, self.description = POSITIONAL_RULES[rule]

    def attribute(self, trajectory: Trajectory) -> Attribution:
        if not trajectory.steps:
            raise AttributionError("the trajectory has no steps")
        index = self._pick(trajectory)
        agent = trajectory.steps[index].agent
        return Attribution(
            agent=agent,
            step=index,
            confidence=round(1.0 / len(trajectory.steps), 4),
            reason=f"Positional baseline: {self.description}.",
            method=self.name,
            candidates=[Candidate(step=index, agent=agent, score=1.0)],
        )


def positional_baselines() -> list[PositionalBaseline]:
    """Every positional rule, in a fixed order (the order reports print them)."""
    return [PositionalBaseline(rule) for rule in POSITIONAL_RULES]
