"""The failure-mode model's choice (otel_blame.attribution.modes): the likeliest mode of the likeliest
MAST group."""

from __future__ import annotations

import math
from collections import Counter

from otel_blame.attribution.modes import ModeModel, mast_group
from otel_blame.trajectory import Trajectory


def model(probabilities: dict[str, float], min_probability: float = 0.0) -> ModeModel:
    """A model that gives every agent these mode probabilities (biases only)."""
    return ModeModel(
        modes=tuple(probabilities),
        vocabulary=(),
        idf=(),
        word_weights=(),
        structure=(),
        structure_mean=(),
        structure_scale=(),
        structure_weights=(),
        bias=tuple(math.log(p) for p in probabilities.values()),
        min_probability=min_probability,
    )


RUN = Trajectory.from_steps([{"agent": "Solver", "content": "The answer is 41."}])


def test_the_mode_named_is_the_likeliest_of_the_likeliest_group() -> None:
    split = model({"FM-1.1": 0.4, "FM-2.1": 0.35, "FM-2.2": 0.25})
    assert split.probabilities(Counter(), {})[0][1] == "FM-1.1"  # the likeliest mode alone
    assert split.predict(RUN, "Solver", {}) == "FM-2.1"  # FM-2 holds 0.6 of the probability
    assert model({"FM-1.1": 0.7, "FM-2.1": 0.2, "FM-2.2": 0.1}).predict(RUN, "Solver", {}) == "FM-1.1"


def test_a_mode_that_does_not_stand_out_is_not_named() -> None:
    assert model({"FM-1.1": 0.4, "FM-2.1": 0.35, "FM-2.2": 0.25}, 0.5).predict(RUN, "Solver", {}) is None
    assert mast_group("FM-3.2") == "FM-3"
