"""``bench/zoo.py --fit zoo_ranker_fit:fit_ranker``: leave-one-app-out for the trained ranker.

``bench/zoo.py`` hands its fit the other apps' labelled runs; this refits the ranker
(otel_blame/training/ranker_fit.py, the same fit and weighting as the shipped model) on those runs plus
the Who&When dev split, and returns a predictor for the held-out app's runs. The Who&When split is
read once per process (``OTEL_BLAME_WHO_AND_WHEN``, default ``/work/shared/who_and_when/dev``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

from otel_blame.attribution.ranker import decide, rank
from otel_blame.attribution.step_rows import step_rows
from otel_blame.training import crossval, ranker_fit
from otel_blame.trajectory import Trajectory

WHO_AND_WHEN = Path(os.environ.get("OTEL_BLAME_WHO_AND_WHEN", "/work/shared/who_and_when/dev"))


@functools.cache
def _who_and_when() -> tuple[ranker_fit.LabelledRun, ...]:
    return tuple(ranker_fit.load_group(WHO_AND_WHEN)) if WHO_AND_WHEN.is_dir() else ()


def _as_ranker_run(run: crossval.LabelledRun) -> ranker_fit.LabelledRun:
    trajectory = run.evidence.context.trajectory
    return ranker_fit.LabelledRun(
        file=run.file,
        group=run.subset,  # bench/zoo.py sets the subset to the app's name
        kind="",
        mistake_agent=run.mistake_agent,
        mistake_step=run.mistake_step,
        rows=step_rows(trajectory),
    )


def fit_ranker(runs: Sequence[crossval.LabelledRun]):  # noqa: ANN201 (bench/zoo.py's Predictor)
    """The ranker fitted on ``runs`` and Who&When dev; a predictor (agent, step) for one trajectory."""
    model = ranker_fit.fit([*_who_and_when(), *(_as_ranker_run(run) for run in runs)])

    def predict(trajectory: Trajectory) -> tuple[str, int]:
        rows = step_rows(trajectory)
        chosen = decide(rows, rank(rows, model), model)
        return trajectory.steps[chosen].agent, chosen

    return predict
