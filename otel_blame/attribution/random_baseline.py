"""The random baseline: a uniformly random agent and a uniformly random step, seeded.

It is what every accuracy figure is compared with. The draw depends only on the seed and the
trajectory's content, so a run is reproducible and averaging over seeds gives the expectation.
"""

from __future__ import annotations

import hashlib
import random

from otel_blame.attribution.base import AttributionError
from otel_blame.attribution.result import Attribution, Candidate
from otel_blame.trajectory import Trajectory

METHOD_NAME = "random"


class RandomAttribution:
    name = METHOD_NAME

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def attribute(self, trajectory: Trajectory) -> Attribution:
        if not trajectory.steps:
            raise AttributionError("the trajectory has no steps")
        digest = hashlib.sha256(str(self.seed).encode())
        for step in trajectory.steps:
            digest.update(step.agent.encode() + b"\x00" + step.content.encode() + b"\x01")
        rng = random.Random(digest.hexdigest())
        agent = rng.choice(trajectory.agents)
        step = rng.randrange(len(trajectory.steps))
        return Attribution(
            agent=agent,
            step=step,
            confidence=round(1.0 / max(len(trajectory.steps), 1), 4),
            reason=f"Random baseline (seed {self.seed}).",
            method=METHOD_NAME,
            candidates=[Candidate(step=step, agent=trajectory.steps[step].agent, score=1.0)],
        )
