"""Regression floor of the fitting code on Who&When dev: the step and agent stages refitted under fixed
5-fold cross-validation (Who&When alone, the folds by question) keep their recorded accuracy.
tests/real_data/test_shipped_model_floors.py scores the shipped model itself."""

from __future__ import annotations

from pathlib import Path

import pytest

WHO_AND_WHEN = Path(__file__).resolve().parents[3] / "shared" / "who_and_when" / "dev"
if not WHO_AND_WHEN.is_dir():  # a worktree beside main: ../shared from the repository's parent
    WHO_AND_WHEN = Path(__file__).resolve().parents[4] / "shared" / "who_and_when" / "dev"

# (re-measured 2026-11-29 for issue 32's stages: the agent stage and the task-givers; Who&When alone is
# 106 runs, too few for the agent stage, which AEGIS's thousands teach in the shipped model. Before:
# Algorithm-Generated 0.553 / 0.329, Hand-Crafted 0.5 / 0.2)
WHO_AND_WHEN_CV = {"Algorithm-Generated": (0.5, 0.276), "Hand-Crafted": (0.533, 0.133)}
SLACK = 0.05  # "more than a few points below" fails


@pytest.mark.slow
def test_who_and_when_dev_under_fixed_folds_keeps_its_recorded_accuracy() -> None:
    if not WHO_AND_WHEN.is_dir():
        pytest.skip(f"the Who&When dev split is not beside the repository ({WHO_AND_WHEN})")
    pytest.importorskip("numpy")
    from otel_blame.training import ranker_fit
    from otel_blame.training import runs as labelled

    runs = labelled.who_and_when_runs(WHO_AND_WHEN)
    measured = ranker_fit.accuracy(ranker_fit.out_of_fold(runs, k=5, seed=0))
    for subset, (agent, step) in WHO_AND_WHEN_CV.items():
        _, got_agent, got_step = measured[subset]
        assert got_agent >= agent - SLACK and got_step >= step - SLACK, (subset, measured[subset])
