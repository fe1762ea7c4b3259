"""Choosing the heuristic's weights without fooling ourselves: k-fold cross-validation.

Weights are chosen by coordinate search over a fixed grid (``fit_weights``) on labelled runs. The
accuracy we report for a set of weights is never measured on the runs it was chosen on:
``cross_validate`` splits the runs into k folds (stratified by subset, shuffled with a fixed seed),
refits the weights on the other k-1 folds and scores the held-out fold with the real
``HeuristicAttribution``; every run is scored exactly once, by weights that never saw it.

The objective is the mean over subsets of (agent accuracy + step accuracy) / 2, so the larger subset
does not drown the smaller one. Only weights are fitted: which steps are suspects, the earliness
prior's shape and every signal's reading are fixed in code and know no agent names, role strings
or step positions.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

from otel_blame.attribution.heuristic import (
    AGENT_SCOPE,
    HeuristicAttribution,
    RunEvidence,
    Weights,
    gather_evidence,
)
from otel_blame.attribution.signals import SIGNAL_NAMES
from otel_blame.datasets.who_and_when import SUBSETS, iter_cases

GRID: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.45, 0.6, 0.9, 1.2, 1.6)
SUPPORT_GRID: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5)
# early_decision is the scale every other weight is relative to. final_answer is held at 0.3: where
# the wrong answer entered is the one signal the project's own planted-fault runs (the demo's wrong
# tax rate in code) depend on, and a fit on Who&When alone set it to 0 (see docs/methods.md).
FIXED: frozenset[str] = frozenset({"early_decision", "final_answer"})
FITTED: tuple[str, ...] = tuple(f.name for f in fields(Weights) if f.name not in FIXED)
PASSES = 1
_STEP_SCOPE: tuple[bool, ...] = tuple(name not in AGENT_SCOPE for name in SIGNAL_NAMES)


def neutral_start() -> Weights:
    """Where every search starts: each signal at the same middling weight, so the start itself was
    not chosen by looking at any data."""
    fitted = {name: 0.3 for name in FITTED if name != "agent_support"}
    return replace(Weights(), **fitted, agent_support=0.1, early_decision=1.0, final_answer=0.3)


@dataclass
class LabelledRun:
    """One annotated run with its evidence gathered once, ready to be re-scored under any weights."""

    file: str
    subset: str
    mistake_agent: str
    mistake_step: int
    evidence: RunEvidence
    # the fast path: per suspect step (index, agent, evidence per signal in SIGNAL_NAMES order)
    rows: list[tuple[int, str, tuple[float, ...]]]


def load_runs(dataset: Path, subsets: Sequence[str] = SUBSETS) -> list[LabelledRun]:
    runs = []
    for case in iter_cases(dataset, subsets):
        evidence = gather_evidence(case.trajectory)
        context = evidence.context
        rows = [
            (
                index,
                context.steps[index].agent,
                tuple(evidence.by_signal.get(name, {}).get(index, 0.0) for name in SIGNAL_NAMES),
            )
            for index in context.actors
        ]
        runs.append(
            LabelledRun(case.file, case.subset, case.mistake_agent, case.mistake_step, evidence, rows)
        )
    return runs


def _predict(run: LabelledRun, vector: tuple[float, ...], agent_support: float) -> tuple[str, int]:
    """The heuristic's answer under weights, from the gathered evidence (same rule as ``choose``)."""
    scored = sorted(
        (
            (sum(w * e for w, e in zip(vector, row, strict=True)), index, agent)
            for index, agent, row in run.rows
        ),
        key=lambda item: (-item[0], item[1]),
    )
    support: dict[str, float] = {}
    best: dict[str, tuple[float, int]] = {}
    for score, index, agent in scored:
        support[agent] = support.get(agent, 0.0) + (score if agent not in best else agent_support * score)
        best.setdefault(agent, (score, index))
    for _index, agent, row in run.rows:
        extra = sum(w * e for w, e, step in zip(vector, row, _STEP_SCOPE, strict=True) if not step and e)
        if extra:
            support[agent] += extra
    chosen = max(support, key=lambda agent: (support[agent], -best[agent][1]))
    return chosen, best[chosen][1]


def _vector(weights: Weights) -> tuple[float, ...]:
    return tuple(weights.of(name) for name in SIGNAL_NAMES)


def objective(runs: Sequence[LabelledRun], weights: Weights) -> float:
    """Mean over subsets of (agent accuracy + step accuracy) / 2."""
    vector = _vector(weights)
    hits: dict[str, list[float]] = {}
    for run in runs:
        agent, step = _predict(run, vector, weights.agent_support)
        hits.setdefault(run.subset, []).append(
            ((agent == run.mistake_agent) + (step == run.mistake_step)) / 2
        )
    return statistics.fmean(statistics.fmean(values) for values in hits.values())


def fit_weights(
    runs: Sequence[LabelledRun],
    *,
    start: Weights | None = None,
    fitted: Sequence[str] = FITTED,
    passes: int = PASSES,
) -> Weights:
    """Coordinate search: each fitted weight in turn takes the grid value with the best objective on
    ``runs`` (ties keep the current value, then the smaller one); ``passes`` sweeps."""
    weights = start or neutral_start()
    best = objective(runs, weights)
    for _ in range(passes):
        changed = False
        for name in fitted:
            grid = SUPPORT_GRID if name == "agent_support" else GRID
            current = weights.of(name)
            for value in sorted(grid):
                if value == current:
                    continue
                trial = replace(weights, **{name: value})
                score = objective(runs, trial)
                if score > best + 1e-12:
                    weights, best, changed = trial, score, True
        if not changed:
            break
    return weights


def make_folds(runs: Sequence[LabelledRun], k: int = 5, seed: int = 0) -> list[list[int]]:
    """k folds of run positions, stratified by subset, shuffled with ``seed``."""
    return stratified_folds([run.subset for run in runs], k, seed)


def stratified_folds(groups: Sequence[str], k: int = 5, seed: int = 0) -> list[list[int]]:
    """k folds of positions, each group spread evenly over them, shuffled with ``seed`` (the same
    folds for the same groups, whichever method is validated on them)."""
    rng = random.Random(seed)
    folds: list[list[int]] = [[] for _ in range(k)]
    by_subset: dict[str, list[int]] = {}
    for position, group in enumerate(groups):
        by_subset.setdefault(group, []).append(position)
    offset = 0
    for subset in sorted(by_subset):
        members = by_subset[subset]
        rng.shuffle(members)
        for rank, position in enumerate(members):
            folds[(rank + offset) % k].append(position)
        offset += len(members)
    return [sorted(fold) for fold in folds]


@dataclass
class FoldResult:
    fold: int
    weights: Weights
    # subset -> (runs, agent hits, step hits) on the held-out fold
    held_out: dict[str, tuple[int, int, int]]


@dataclass
class CrossValidation:
    folds: list[FoldResult]

    def accuracy(self, subset: str) -> tuple[float, float]:
        """Pooled held-out (agent, step) accuracy: every run scored once by weights that never saw it."""
        runs = sum(f.held_out.get(subset, (0, 0, 0))[0] for f in self.folds)
        agent = sum(f.held_out.get(subset, (0, 0, 0))[1] for f in self.folds)
        step = sum(f.held_out.get(subset, (0, 0, 0))[2] for f in self.folds)
        return (agent / runs, step / runs) if runs else (0.0, 0.0)

    def per_fold(self, subset: str) -> list[tuple[float, float]]:
        out = []
        for fold in self.folds:
            runs, agent, step = fold.held_out.get(subset, (0, 0, 0))
            if runs:
                out.append((agent / runs, step / runs))
        return out

    def spread(self, subset: str) -> tuple[float, float]:
        """Standard deviation over folds of the per-fold (agent, step) accuracy."""
        values = self.per_fold(subset)
        if len(values) < 2:
            return (0.0, 0.0)
        return (statistics.stdev(v[0] for v in values), statistics.stdev(v[1] for v in values))


def cross_validate(
    runs: Sequence[LabelledRun],
    *,
    k: int = 5,
    seed: int = 0,
    start: Weights | None = None,
    fitted: Sequence[str] = FITTED,
) -> CrossValidation:
    """Refit on k-1 folds, score the held-out fold with the real method; every run scored once."""
    results = []
    for number, fold in enumerate(make_folds(runs, k, seed)):
        held = set(fold)
        training = [run for position, run in enumerate(runs) if position not in held]
        weights = fit_weights(training, start=start, fitted=fitted)
        method = HeuristicAttribution(weights=weights)
        held_out: dict[str, list[int]] = {}
        for position in fold:
            run = runs[position]
            answer = method.attribute(run.evidence.context.trajectory)
            tally = held_out.setdefault(run.subset, [0, 0, 0])
            tally[0] += 1
            tally[1] += answer.agent == run.mistake_agent
            tally[2] += answer.step == run.mistake_step
        results.append(FoldResult(number, weights, {s: (t[0], t[1], t[2]) for s, t in held_out.items()}))
    return CrossValidation(results)


def ablate(runs: Sequence[LabelledRun], signal: str, *, k: int = 5, seed: int = 0) -> CrossValidation:
    """Cross-validation with one signal switched off (weight 0, not fitted)."""
    start = replace(neutral_start(), **{signal: 0.0})
    return cross_validate(
        runs, k=k, seed=seed, start=start, fitted=[name for name in FITTED if name != signal]
    )
