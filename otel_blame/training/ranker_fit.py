"""Fitting and validating the ranker (offline only: needs numpy, which the app-side install lacks).

The ranker is a conditional logit: per run, a softmax over its candidate steps of a linear score;
fitted by maximising the weighted log-likelihood of the labelled decisive step, with an L2 penalty
towards a stated prior (``PRIOR``), by full-batch Adam from the prior (deterministic). Each data set
(a Who&When subset, one app's injected campaign) weighs the same in the objective, so the larger
one does not drown the others.

Validation never scores a run with a model that saw it: ``cross_validate`` (k folds stratified by
group, fixed seed, the same folds as :func:`otel_blame.training.crossval.make_folds`) and
``leave_one_group_out`` (one app's whole campaign held out at a time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from otel_blame.attribution.ranker import (
    FEATURES,
    RankerModel,
    StepRows,
    decide,
    rank,
    step_rows,
    support_of,
)
from otel_blame.datasets.who_and_when import SUBSETS, case_files, load_case
from otel_blame.training.crossval import stratified_folds

L2 = 0.02
ITERATIONS = 400
LEARNING_RATE = 0.05
# the agent: the one with the most probability over all its steps (measured better than the best
# step's agent on Who&When's Algorithm-Generated subset under CV, equal elsewhere)
AGENT_RULE = "sum"
# how much each data set counts (1 unless named): every data set (a Who&When subset, one app's
# campaign) the same. Counting Who&When's two subsets three times (the earlier choice) won 2-4 points
# on them under CV and lost 1-3 points of step accuracy left out app by app: it taught the ranker
# Who&When's own position prior, the thing a method must not learn from one benchmark
GROUP_WEIGHT: dict[str, float] = {}
# The prior the L2 penalty pulls each weight towards (per unit of the feature; 0 for the rest): the
# causal reading's evidence that a step is where the failure started, stated before looking at any
# data. A data set that never shows a kind of evidence (an app without arithmetic code, without a
# premature stop) then leaves its weight at the prior instead of at 0, so a model validated
# leave-one-app-out keeps reading causes the other apps did not happen to exhibit.
PRIOR_L2 = 0.05  # how firmly: the data may move a prior weight, a little less readily than the others
PRIOR: dict[str, float] = {
    "dependency": 3.0,
    "result_contradicts_call": 3.0,
    "override": 2.0,
    "unanswered_stop": 2.0,
    "stop_mid_run": 2.0,
    "dropped_task": 1.0,
    "dropped_input": 1.0,
    "caused_failing_result": 1.0,
    "first_unsupported": 1.0,
    "novel_value": 0.5,
    "novel_call_value": 1.0,
    "answer_unsupported": 1.0,
    "input_found_lacking": 1.0,
    "novel_identifier": 0.5,
    "stop_in_result": 2.0,
}


@dataclass
class LabelledRun:
    """One annotated run, read once. ``accepted`` are the steps a verdict may name to be right (the
    decisive step alone, unless the labels mark several: TRAIL's annotated spans)."""

    file: str
    group: str  # a Who&When subset, a TRAIL subset, or an app's name
    kind: str  # the planted fault kind (injected runs), else ""
    mistake_agent: str
    mistake_step: int
    rows: StepRows
    accepted: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.accepted:
            self.accepted = (self.mistake_step,)

    @property
    def targets(self) -> list[int]:
        """The candidate positions of the accepted steps."""
        position = {index: at for at, index in enumerate(self.rows.candidates)}
        return [position[step] for step in self.accepted if step in position]


def load_group(
    dataset: Path, group: str | None = None, subsets: Sequence[str] = SUBSETS
) -> list[LabelledRun]:
    """The labelled runs of a Who&When-layout directory (``group`` overrides the subset name: an
    injected campaign's app)."""
    import json

    runs = []
    for path in case_files(dataset, [s for s in subsets if (Path(dataset) / s).is_dir()]):
        case = load_case(path, Path(dataset))
        if not case.trajectory.steps:
            continue
        kind = ""
        if group is not None:
            kind = str(json.loads(path.read_text(encoding="utf-8")).get("fault_kind") or "")
        runs.append(
            LabelledRun(
                file=case.file,
                group=group or case.subset,
                kind=kind,
                mistake_agent=case.mistake_agent,
                mistake_step=case.mistake_step,
                rows=step_rows(case.trajectory),
            )
        )
    return runs


def load_trail(dataset: Path, subsets: Sequence[str] | None = None) -> list[LabelledRun]:
    """TRAIL-layout traces as labelled runs (group ``trail-<subset>``): the decisive step is the earliest
    HIGH-impact error's (else the earliest error's), every annotated step is accepted."""
    from otel_blame.datasets.trail import load_trail_case, trail_files

    runs = []
    for path in trail_files(Path(dataset)):
        case = load_trail_case(path, Path(dataset))
        if subsets is not None and case.subset not in subsets:
            continue
        spans = case.step_spans()
        labelled = sorted({spans[location] for location in case.labelled_spans if location in spans})
        if not labelled or not case.trajectory.steps:
            continue
        decisive = case.decisive_step()
        decisive = labelled[0] if decisive is None else decisive
        runs.append(
            LabelledRun(
                file=case.file,
                group=f"trail-{case.subset}",
                kind="",
                mistake_agent=case.trajectory.steps[decisive].agent,
                mistake_step=decisive,
                rows=step_rows(case.trajectory),
                accepted=tuple(labelled),
            )
        )
    return runs


def _matrix(run: LabelledRun, features: Sequence[str]) -> np.ndarray:
    return np.array([[row.get(name, 0.0) for name in features] for row in run.rows.rows], dtype=float)


def fit(
    runs: Sequence[LabelledRun],
    *,
    l2: float = L2,
    iterations: int = ITERATIONS,
    features: Sequence[str] = FEATURES,
    group_weight: dict[str, float] | None = None,
) -> RankerModel:
    """The conditional logit fitted on ``runs`` (those whose decisive step is a candidate), over
    ``features`` (all of them unless an ablation leaves some out)."""
    group_weight = GROUP_WEIGHT if group_weight is None else group_weight
    usable = [run for run in runs if run.targets]
    if not usable:
        raise ValueError("no labelled run has its decisive step among the candidates")
    matrices = [_matrix(run, features) for run in usable]
    stacked = np.vstack(matrices)
    mean = stacked.mean(axis=0)
    scale = stacked.std(axis=0)
    scale[scale < 1e-6] = 1.0
    groups: dict[str, int] = {}
    for run in usable:
        groups[run.group] = groups.get(run.group, 0) + 1
    width = max(len(m) for m in matrices)
    x = np.zeros((len(usable), width, len(features)))
    mask = np.full((len(usable), width), -np.inf)
    for position, matrix in enumerate(matrices):
        x[position, : len(matrix)] = (matrix - mean) / scale
        mask[position, : len(matrix)] = 0.0
    # the accepted steps of each run (one for most data sets; several where labels mark several)
    accepted = np.zeros((len(usable), width))
    for position, run in enumerate(usable):
        accepted[position, run.targets] = 1.0
    weights = np.array(
        [group_weight.get(run.group, 1.0) / (groups[run.group] * len(groups)) for run in usable]
    )
    prior = np.array([PRIOR.get(name, 0.0) for name in features]) * scale  # in standardised units
    penalty = np.array([PRIOR_L2 if name in PRIOR else l2 for name in features])
    beta = prior.copy()
    first, second = np.zeros(len(features)), np.zeros(len(features))
    for step in range(1, iterations + 1):
        scores = x @ beta + mask
        scores -= scores.max(axis=1, keepdims=True)
        probabilities = np.exp(scores)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        expected = np.einsum("rn,rnf->rf", probabilities, x)
        # the log of the probability of any accepted step: its gradient is the accepted steps'
        # features weighted by their share of that probability, less the expected features
        within = probabilities * accepted
        within /= within.sum(axis=1, keepdims=True)
        observed = np.einsum("rn,rnf->rf", within, x)
        gradient = -((observed - expected) * weights[:, None]).sum(axis=0) + 2 * penalty * (beta - prior)
        first = 0.9 * first + 0.1 * gradient
        second = 0.999 * second + 0.001 * gradient**2
        beta -= LEARNING_RATE * (first / (1 - 0.9**step)) / (np.sqrt(second / (1 - 0.999**step)) + 1e-8)
    return RankerModel(
        features=tuple(features),
        weights=tuple(float(v) for v in beta),
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        agent_rule=AGENT_RULE,
        trained_on=", ".join(f"{name} ({count} runs)" for name, count in sorted(groups.items())),
    )


@dataclass
class Scored:
    run: LabelledRun
    agent: str
    step: int
    support: float  # the blamed agent's share of the ranking (what decided is read from)

    @property
    def agent_correct(self) -> bool:
        return self.agent == self.run.mistake_agent

    @property
    def step_correct(self) -> bool:
        return self.step == self.run.mistake_step

    @property
    def hit(self) -> bool:
        """The step is one the labels accept (the decisive step, or any annotated one)."""
        return self.step in self.run.accepted


def predict(model: RankerModel, runs: Iterable[LabelledRun]) -> list[Scored]:
    found = []
    for run in runs:
        ranked = rank(run.rows, model)
        chosen = decide(run.rows, ranked, model)
        agent = run.rows.trajectory.steps[chosen].agent
        support = support_of(run.rows, ranked, agent)
        found.append(Scored(run, agent, chosen, support))
    return found


def make_folds(runs: Sequence[LabelledRun], k: int = 5, seed: int = 0) -> list[list[int]]:
    """k folds of run positions, stratified by group, shuffled with ``seed`` (the heuristic's folds)."""
    return stratified_folds([run.group for run in runs], k, seed)


def cross_validate(
    runs: Sequence[LabelledRun],
    *,
    k: int = 5,
    seed: int = 0,
    extra: Sequence[LabelledRun] = (),
    agent_rule: str = AGENT_RULE,
    **options: object,
) -> list[Scored]:
    """Every run of ``runs`` scored once by a model fitted on the other folds (plus ``extra`` runs,
    which are never scored); ``options`` go to :func:`fit`."""
    scored: list[Scored] = []
    for fold in make_folds(runs, k, seed):
        held = set(fold)
        training = [run for position, run in enumerate(runs) if position not in held] + list(extra)
        model = replace(fit(training, **options), agent_rule=agent_rule)  # type: ignore[arg-type]
        scored += predict(model, [runs[position] for position in fold])
    return scored


def leave_one_group_out(
    runs: Sequence[LabelledRun],
    *,
    extra: Sequence[LabelledRun] = (),
    held: Sequence[LabelledRun] | None = None,
    agent_rule: str = AGENT_RULE,
    **options: object,
) -> list[Scored]:
    """Each group's runs scored by a model fitted on every other group (plus ``extra``). With ``held``,
    its runs are the ones scored (runs never fitted on: a fresh campaign), each group's by a model
    fitted on the other groups of ``runs``."""
    scoring = runs if held is None else held
    found: list[Scored] = []
    for group in sorted({run.group for run in scoring}):
        training = [run for run in runs if run.group != group] + list(extra)
        model = replace(fit(training, **options), agent_rule=agent_rule)  # type: ignore[arg-type]
        found += predict(model, [run for run in scoring if run.group == group])
    return found


def accuracy(scored: Sequence[Scored], key=lambda s: s.run.group) -> dict[str, tuple[int, float, float]]:  # noqa: ANN001
    """key -> (runs, agent accuracy, step accuracy)."""
    tally: dict[str, list[int]] = {}
    for item in scored:
        entry = tally.setdefault(key(item), [0, 0, 0])
        entry[0] += 1
        entry[1] += item.agent_correct
        entry[2] += item.step_correct
    return {name: (n, a / n, s / n) for name, (n, a, s) in sorted(tally.items())}
