"""Leave-one-dataset-out validation of the ranker on real failures, and the decided threshold.

A data set is a list of :class:`~otel_blame.training.ranker_fit.LabelledRun` (Who&When's two subsets,
TRAIL's two, the zoo's campaigns). Every run of a held-out data set is scored by a model fitted on the
others. Whether a verdict is *decided* is a threshold on its support (the blamed agent's share of the
ranking's probability, :func:`otel_blame.attribution.ranker.agent_support`); the threshold for a held-out
data set is chosen on the other data sets' own held-out verdicts (each scored by a model fitted
without it and without the held-out set), as the lowest at which their decided verdicts are right at
least ``TARGET_PRECISION`` of the time, so the threshold never sees the data set it is judged on.

A decided verdict must be right on the agent (the team an alert pages), on every data set: the threshold
is fitted for that. On TRAIL the decided verdicts' span hits (the blamed step is one its people
annotated) are reported beside, as issue 27's target for TRAIL names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from otel_blame.attribution.baselines import PositionalBaseline
from otel_blame.datasets.who_and_when import SUBSETS
from otel_blame.evaluation.trail import percent
from otel_blame.training import ranker_fit as rf

TARGET_PRECISION = 0.9  # above the 85 % asked for: a threshold read on other data sets is optimistic
COVERAGES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
ZOO = "zoo"

# Models fitted on the data sets less some, by the names left out. Fitting is deterministic (full-batch
# Adam from the prior), so a model asked for again, the same names left out in any order, is the one
# already fitted: leave_one_dataset_out fits each pair once, and fit_shipped, given the same dict
# (for the same data sets), fits only the model on all of them.
Fits = dict[frozenset[str], rf.RankerModel]


def dataset_name(group: str) -> str:
    """The data set a run of ``group`` belongs to: a TRAIL subset is its own (``trail-gaia``), a
    Who&When subset is ``ww-<subset>``, any other group (an app's name) is the zoo."""
    if group.startswith("trail"):
        return group
    return f"ww-{group}" if group in SUBSETS else ZOO


def right(item: rf.Scored) -> bool:
    """What a decided verdict must get right: the agent."""
    return item.agent_correct


def load_datasets(
    who_and_when: Path | None, trail: Path | None, zoo: Sequence[Path] = ()
) -> dict[str, list[rf.LabelledRun]]:
    """Each real data set under its name; the zoo's app campaigns (every directory below each ``zoo``
    path that holds labelled runs) as one data set, each run keeping its app as its group."""
    datasets: dict[str, list[rf.LabelledRun]] = {}
    if who_and_when is not None:
        for run in rf.load_group(who_and_when):
            datasets.setdefault(dataset_name(run.group), []).append(run)
    if trail is not None:
        for run in rf.load_trail(trail):
            datasets.setdefault(dataset_name(run.group), []).append(run)
    for folder in zoo:
        for app in sorted(p for p in folder.iterdir() if p.is_dir()):
            datasets.setdefault(ZOO, []).extend(rf.load_group(app, group=app.name))
    return {name: runs for name, runs in datasets.items() if runs}


def _fit(datasets: Mapping[str, list[rf.LabelledRun]], without: frozenset[str], fits: Fits) -> rf.RankerModel:
    """The model fitted on every data set but those ``without``, from ``fits`` when fitted already."""
    if without not in fits:
        training = [run for name, runs in datasets.items() if name not in without for run in runs]
        fits[without] = rf.fit(training)
    return fits[without]


def threshold_for(scored: Sequence[rf.Scored], precision: float = TARGET_PRECISION) -> float:
    """The lowest support at which the verdicts at or above it are right ``precision`` of the time, each
    data set weighing the same (1.01, nothing decided, when no threshold gets there)."""
    sizes: dict[str, int] = {}
    for item in scored:
        name = dataset_name(item.run.group)
        sizes[name] = sizes.get(name, 0) + 1
    ordered = sorted(scored, key=lambda item: -item.support)
    best = 1.01
    weight = hits = 0.0
    for count, item in enumerate(ordered, start=1):
        share = 1.0 / sizes[dataset_name(item.run.group)]
        weight += share
        hits += share * right(item)
        is_last_of_tie = count == len(ordered) or ordered[count].support < item.support
        if is_last_of_tie and hits / weight >= precision:
            best = item.support
    return best


@dataclass
class DatasetResult:
    name: str
    scored: list[rf.Scored]
    threshold: float

    @property
    def decided(self) -> list[rf.Scored]:
        return [item for item in self.scored if item.support >= self.threshold]


@dataclass
class Report:
    results: list[DatasetResult]

    def to_dict(self) -> dict:
        return {
            result.name: {
                "runs": len(result.scored),
                "threshold": result.threshold,
                **summary(result),
            }
            for result in self.results
        }


def leave_one_dataset_out(
    datasets: Mapping[str, list[rf.LabelledRun]],
    *,
    precision: float = TARGET_PRECISION,
    fits: Fits | None = None,
) -> Report:
    """Every real data set scored by a model fitted on the others, with a decided threshold read on the
    other real data sets' own held-out verdicts (each ranked by a model fitted without it and without
    the held-out set). The zoo is fitted on but not scored here: its own figure is leave-one-app-out.
    ``fits`` keeps the models fitted (see :data:`Fits`)."""
    fits = {} if fits is None else fits
    results = []
    for held in datasets:
        if held == ZOO:
            continue
        inner = [
            item
            for other in datasets
            if other not in (held, ZOO)
            for item in rf.predict(_fit(datasets, frozenset({held, other}), fits), datasets[other])
        ]
        scored = rf.predict(_fit(datasets, frozenset({held}), fits), datasets[held])
        results.append(DatasetResult(held, scored, threshold_for(inner, precision)))
    return Report(results)


def fit_shipped(
    datasets: Mapping[str, list[rf.LabelledRun]],
    *,
    precision: float = TARGET_PRECISION,
    fits: Fits | None = None,
) -> rf.RankerModel:
    """The model to ship: fitted on every data set, its decided threshold read on every real data set's
    held-out verdicts (each scored by a model fitted without it). ``fits``: the models
    :func:`leave_one_dataset_out` fitted on the same data sets, not fitted again."""
    fits = {} if fits is None else fits
    verdicts = [
        item
        for name in datasets
        if name != ZOO
        for item in rf.predict(_fit(datasets, frozenset({name}), fits), datasets[name])
    ]
    model = _fit(datasets, frozenset(), fits)
    return replace(model, decided_threshold=round(threshold_for(verdicts, precision), 4))


def _share(values: Sequence[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def summary(result: DatasetResult) -> dict[str, float | None]:
    scored = result.scored
    runs = [item.run for item in scored]
    decided = result.decided
    steps = [len(run.rows.trajectory.steps) for run in runs]
    speakers = [len(run.rows.trajectory.agents) for run in runs]
    return {
        "agent": _share([item.agent_correct for item in scored]),
        "step": _share([item.step_correct for item in scored]),
        "hit": _share([item.hit for item in scored]),
        "random_speaker": sum(1 / n for n in speakers) / len(speakers),
        "random_step": sum(1 / n for n in steps) / len(steps),
        "random_hit": sum(len(run.accepted) / len(run.rows.trajectory.steps) for run in runs) / len(runs),
        "step0_verdicts": _share([item.step == 0 for item in scored]),
        "step0_labels": _share([run.mistake_step == 0 for run in runs]),
        "decided_share": len(decided) / len(scored),
        "decided_agent": _share([item.agent_correct for item in decided]),
        "decided_hit": _share([item.hit for item in decided]),
    }


def risk_coverage(scored: Sequence[rf.Scored]) -> list[tuple[float, float]]:
    """(coverage, agent right, step hit) of the best-supported verdicts, at each of COVERAGES."""
    ordered = sorted(scored, key=lambda item: -item.support)
    out = []
    for coverage in COVERAGES:
        count = max(1, round(coverage * len(ordered)))
        top = ordered[:count]
        out.append((coverage, sum(right(i) for i in top) / count, sum(i.hit for i in top) / count))
    return out


def positional(runs: Sequence[rf.LabelledRun], baselines: Sequence[PositionalBaseline]) -> dict[str, tuple]:
    """Each positional rule's (agent, step, hit) accuracy on the runs."""
    out = {}
    for baseline in baselines:
        agent = step = hit = 0
        for run in runs:
            answer = baseline.attribute(run.rows.trajectory)
            agent += answer.agent == run.mistake_agent
            step += answer.step == run.mistake_step
            hit += answer.step in run.accepted
        n = len(runs)
        out[baseline.rule] = (agent / n, step / n, hit / n)
    return out


def report_lines(report: Report, baselines: Sequence[PositionalBaseline]) -> list[str]:
    lines = [
        "| data set | runs | agent % | step % | hit % | best positional agent / step / hit % | random "
        "speaker / step / hit % | step 0: verdicts / labels % | decided: share / agent / hit % (threshold) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for result in report.results:
        figures = summary(result)
        runs = [item.run for item in result.scored]
        rules = positional(runs, baselines)
        best_agent = max(rules.items(), key=lambda item: item[1][0])
        best_step = max(rules.items(), key=lambda item: item[1][1])
        best_hit = max(rules.items(), key=lambda item: item[1][2])
        lines.append(
            f"| {result.name} | {len(runs)} | {percent(figures['agent'])} | {percent(figures['step'])} | "
            f"{percent(figures['hit'])} | {percent(best_agent[1][0])} ({best_agent[0]}) / "
            f"{percent(best_step[1][1])} ({best_step[0]}) / {percent(best_hit[1][2])} ({best_hit[0]}) | "
            f"{percent(figures['random_speaker'])} / {percent(figures['random_step'])} / "
            f"{percent(figures['random_hit'])} | {percent(figures['step0_verdicts'])} / "
            f"{percent(figures['step0_labels'])} | {percent(figures['decided_share'])} / "
            f"{percent(figures['decided_agent'])} / {percent(figures['decided_hit'])} "
            f"({result.threshold:.3f}) |"
        )
    lines += [
        "",
        "Risk-coverage: agent right / step hit %, among the best-supported verdicts, by coverage %:",
        "",
    ]
    lines.append("| data set | " + " | ".join(f"{round(100 * c)}" for c in COVERAGES) + " |")
    lines.append("|---|" + "---|" * len(COVERAGES))
    for result in report.results:
        curve = risk_coverage(result.scored)
        cells = [f"{percent(agent)} / {percent(hit)}" for _, agent, hit in curve]
        lines.append(f"| {result.name} | " + " | ".join(cells) + " |")
    return lines
