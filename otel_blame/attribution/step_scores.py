"""Each step's share of blame in one attribution: what ``blame.score`` on a step's span and the
blame store's per-step scores both show."""

from __future__ import annotations

from otel_blame.attribution.result import Attribution
from otel_blame.trajectory import Trajectory


def step_scores(trajectory: Trajectory, attribution: Attribution) -> dict[int, float]:
    """The method's candidate scores per step; the culprit at least its confidence."""
    scores = {step.index: 0.0 for step in trajectory.steps}
    for candidate in attribution.candidates:
        if candidate.step in scores:
            scores[candidate.step] = max(scores[candidate.step], float(candidate.score))
    if attribution.step in scores and not any(c.step == attribution.step for c in attribution.candidates):
        scores[attribution.step] = float(attribution.confidence)
    return scores
