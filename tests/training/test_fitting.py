"""The fitting code (otel_blame.training): the grouped logit learns what makes a target, also from
"any of these" labels; the logistic model its odds; folds keep a question's runs together; held-out
verdicts never come from a model that saw their data set."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest

from otel_blame.training import ranker_fit as rf


def test_the_grouped_logit_learns_which_feature_marks_the_target() -> None:
    rng = np.random.default_rng(0)
    blocks, targets = [], []
    for _ in range(300):
        block = rng.normal(size=(6, 3))
        target = int(rng.integers(6))
        block[target, 1] += 2.0  # the second feature marks the target; the others are noise
        blocks.append(block)
        targets.append([target])
    scorer = rf.fit_grouped_logit(
        blocks, targets, np.full(300, 1 / 300), ("a", "b", "c"), prior={}, l2=0.01, prior_l2=0.01
    )
    a, b, c = scorer.weights
    assert b > 1.0 and abs(a) < 0.3 and abs(c) < 0.3


def test_any_of_several_targets_teaches_what_they_share() -> None:
    """Multiple-instance labels ("some step of these agents"): the feature that one of the accepted
    items carries is learned, though no single item is named."""
    rng = np.random.default_rng(1)
    blocks, targets = [], []
    for _ in range(400):
        block = rng.normal(size=(8, 2))
        accepted = sorted(rng.choice(8, size=3, replace=False).tolist())
        block[accepted[int(rng.integers(3))], 0] += 3.0  # one of them is the real one, and shows it
        blocks.append(block)
        targets.append(accepted)
    scorer = rf.fit_grouped_logit(
        blocks, targets, np.full(400, 1 / 400), ("x", "y"), prior={}, l2=0.01, prior_l2=0.01
    )
    assert scorer.weights[0] > 0.8 and abs(scorer.weights[1]) < 0.3


def test_the_logistic_model_recovers_the_odds() -> None:
    rng = random.Random(2)
    rows, outcomes = [], []
    for _ in range(3000):
        value = rng.uniform(-3, 3)
        rows.append({"value": value, "noise": rng.uniform(-1, 1)})
        outcomes.append(rng.random() < 1 / (1 + np.exp(-(2 * value - 1))))
    scorer = rf.fit_logistic(rows, outcomes, np.ones(len(rows)), ("value", "noise"), l2=0.01)
    for value in (-2.0, 0.0, 1.5):
        assert scorer.probability({"value": value, "noise": 0.0}) == pytest.approx(
            1 / (1 + np.exp(-(2 * value - 1))), abs=0.05
        )


@dataclass
class _Run:
    file: str
    question: str
    dataset: str
    group: str = ""


def test_folds_keep_a_questions_runs_together_and_spread_each_data_set() -> None:
    runs = [_Run(f"r{n}", f"q{n % 40}", "aegis" if n < 300 else "ww-Hand-Crafted") for n in range(360)]
    folds = rf.question_folds(runs, 5)  # type: ignore[arg-type]
    assert sorted(position for fold in folds for position in fold) == list(range(360))
    fold_of = {position: number for number, fold in enumerate(folds) for position in fold}
    for question in {run.question for run in runs}:
        assert len({fold_of[p] for p, run in enumerate(runs) if run.question == question}) == 1
    for fold in folds:
        assert 40 <= sum(1 for position in fold if runs[position].dataset == "aegis") <= 80


def test_held_out_verdicts_come_from_stages_that_never_saw_their_data_set(monkeypatch) -> None:  # noqa: ANN001
    @dataclass
    class Run:
        file: str
        dataset: str
        group: str

    runs = [
        Run(f"{name}{n}", name, name) for name in ("aegis", "ww-Hand-Crafted", "trail-gaia") for n in range(3)
    ]
    runs += [Run(f"{app}{n}", "zoo", app) for app in ("demo", "crew") for n in range(2)]
    fitted_without: list[set[str]] = []

    def fit_stages(training):  # noqa: ANN001, ANN202
        fitted_without.append({rf.unit_of(run) for run in runs} - {rf.unit_of(run) for run in training})
        return len(fitted_without)

    predicted: dict[str, int] = {}

    def predict(model, held):  # noqa: ANN001, ANN202
        for run in held:
            predicted[run.file] = model
        return list(held)

    monkeypatch.setattr(rf, "fit_stages", fit_stages)
    monkeypatch.setattr(rf, "predict", predict)
    rf.held_out_verdicts(runs)  # type: ignore[arg-type]
    assert sorted(predicted) == sorted(run.file for run in runs)
    for run in runs:
        assert fitted_without[predicted[run.file] - 1] == {rf.unit_of(run)}  # type: ignore[arg-type]
