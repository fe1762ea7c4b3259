"""The ranker judged on real failures it never saw, and the model to ship.

Data sets: Who&When dev (its two subsets), TRAIL dev (its two), AEGIS dev and the zoo's campaigns
(each app a system of its own). How each figure stays out of sample:

- **A data set left out** (Who&When, TRAIL, each zoo app): scored by stages fitted without it; its
  verdicts' odds by a correctness model fitted on the held-out verdicts of the *other* data sets
  (:func:`otel_blame.training.ranker_fit.held_out_verdicts`: each made by stages fitted without its
  own data set), with the decided threshold read on those too.
- **AEGIS by question**: five folds, the runs of one question in one fold; each fold scored by stages
  fitted on everything else (AEGIS's other questions included), its odds by a correctness model that
  never saw the fold's verdicts; the failure-mode model fitted on the other folds' labelled agents.
- **AEGIS, each system shape left out**, the same way.

The held-out verdicts the correctness models learn from are made once for all data sets (one stage fit
per data set), so a figure's correctness model saw no verdict of the runs it scores, though the stages
that made those other verdicts did see them: a second-order overlap this module accepts to keep the
report to one hour of fitting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from otel_blame.attribution.modes import mast_group
from otel_blame.attribution.ranker import LinearScorer, RankerModel
from otel_blame.evaluation.coverage import COVERAGES, percent
from otel_blame.training import mode_fit as mf
from otel_blame.training import ranker_fit as rf
from otel_blame.training.runs import AEGIS, ZOO, LabelledRun

TASK_GIVER_NAMES = frozenset({"user", "system"})  # how AEGIS names its task-givers (scoring only)


@dataclass
class Result:
    """One held-out set's verdicts, scored."""

    name: str
    scored: list[rf.Scored]
    threshold: float
    modes: list[tuple[str | None, tuple[str, ...]]] = field(default_factory=list)  # (named, labelled)

    def summary(self) -> dict[str, float | int | None]:
        return summarise(self.scored, self.modes)


def _share(values: Sequence[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise(
    scored: Sequence[rf.Scored], modes: Sequence[tuple[str | None, tuple[str, ...]]] = ()
) -> dict[str, float | int | None]:
    runs = [item.run for item in scored]
    decided = [item for item in scored if item.decided]
    speakers = [len(run.trajectory.agents) for run in runs]
    labelled = [item for item in scored if item.step_correct is not None]
    hits = [item for item in scored if item.hit is not None]
    return {
        "runs": len(scored),
        "agent": _share([item.agent_correct for item in scored]),
        "step": _share([bool(item.step_correct) for item in labelled]),
        "hit": _share([bool(item.hit) for item in hits]),
        "random_speaker": sum(
            len(run.faulty & set(run.trajectory.agents)) / n for run, n in zip(runs, speakers, strict=True)
        )
        / len(runs),
        "decided_share": len(decided) / len(scored),
        "decided_agent": _share([item.agent_correct for item in decided]),
        "decided_hit": _share([bool(item.hit) for item in decided if item.hit is not None]),
        "task_givers_blamed": sum(1 for item in scored if item.agent.lower() in TASK_GIVER_NAMES),
        "task_statement_blamed": sum(
            1 for item in scored if item.step == item.run.rows.reading.graph.task_step
        ),
        "mode": _share([named in labels for named, labels in modes]) if modes else None,
        "mode_group": _share([_same_group(named, labels) for named, labels in modes]) if modes else None,
        "modes_scored": len(modes),
        "task_giver_labelled": sum(1 for run in runs if run.task_giver_labelled),
    }


def _same_group(named: str | None, labels: Sequence[str]) -> bool:
    return named is not None and mast_group(named) in {mast_group(label) for label in labels}


def risk_coverage(scored: Sequence[rf.Scored], right: Callable[[rf.Scored], bool]) -> list[float]:
    ordered = sorted(scored, key=lambda item: -item.right)
    found = []
    for coverage in COVERAGES:
        count = max(1, round(coverage * len(ordered)))
        found.append(sum(right(item) for item in ordered[:count]) / count)
    return found


def correctness_for(
    pool: Sequence[rf.Scored], left_out: set[str], precision: float
) -> tuple[LinearScorer, float]:
    """The correctness model and threshold fitted on the held-out verdicts in ``pool`` except those of
    the runs ``left_out`` (by file)."""
    kept = [item for item in pool if item.run.file not in left_out]
    scorer = rf.fit_correctness(kept)
    for item in kept:
        item.right = scorer.probability(item.support)
    return scorer, rf.threshold_for(kept, precision)


def score_held_out(
    training: Sequence[LabelledRun],
    held: Sequence[LabelledRun],
    pool: Sequence[rf.Scored],
    name: str,
    *,
    precision: float,
    with_modes: bool = False,
) -> Result:
    """``held`` scored by every stage fitted without it (see the module docstring)."""
    model = rf.fit_stages(training)
    scorer, threshold = correctness_for(pool, {run.file for run in held}, precision)
    model = replace(model, correctness=scorer, decided_threshold=threshold)
    modes: list[tuple[str | None, tuple[str, ...]]] = []
    if with_modes:
        examples = mf.examples([run for run in training if run.modes], model)
        model = replace(model, modes=mf.fit_modes(examples))
    scored = rf.predict(model, held)
    if with_modes and model.modes is not None:
        for item in scored:
            labels = item.run.modes.get(item.agent, ())
            if labels:
                modes.append((model.modes.predict(item.run.trajectory, item.agent, item.role), labels))
    return Result(name, scored, threshold, modes)


@dataclass
class Report:
    datasets: list[Result]
    aegis_by_question: Result | None = None
    aegis_shapes: list[Result] = field(default_factory=list)
    zoo_apps: list[Result] = field(default_factory=list)
    zoo_fresh: list[Result] = field(default_factory=list)


def evaluate(
    runs: Sequence[LabelledRun],
    pool: Sequence[rf.Scored],
    *,
    fresh: Sequence[LabelledRun] = (),
    precision: float = rf.TARGET_PRECISION,
    folds: int = 5,
    progress: Callable[[str], None] = lambda _: None,
) -> Report:
    """Every figure of the report (see the module docstring); ``fresh``: zoo runs never fitted on, each
    app's scored by the stages fitted without that app."""
    report = Report([])
    names = sorted({run.dataset for run in runs} - {ZOO, AEGIS})
    for name in names:
        progress(name)
        report.datasets.append(
            score_held_out(
                [run for run in runs if run.dataset != name],
                [run for run in runs if run.dataset == name],
                pool,
                name,
                precision=precision,
            )
        )
    aegis = [run for run in runs if run.dataset == AEGIS]
    others = [run for run in runs if run.dataset != AEGIS]
    if aegis:
        progress(f"{AEGIS}, {folds} folds by question")
        pooled: list[rf.Scored] = []
        modes: list[tuple[str | None, tuple[str, ...]]] = []
        thresholds = []
        for fold in rf.question_folds(aegis, folds, seed=1):
            inside = set(fold)
            held = [aegis[position] for position in fold]
            training = others + [run for position, run in enumerate(aegis) if position not in inside]
            result = score_held_out(training, held, pool, AEGIS, precision=precision, with_modes=True)
            pooled += result.scored
            modes += result.modes
            thresholds.append(result.threshold)
        mean_threshold = sum(thresholds) / len(thresholds)
        report.aegis_by_question = Result(f"{AEGIS} by question", pooled, mean_threshold, modes)
        for shape in sorted({run.group for run in aegis}):
            progress(shape)
            report.aegis_shapes.append(
                score_held_out(
                    others + [run for run in aegis if run.group != shape],
                    [run for run in aegis if run.group == shape],
                    pool,
                    shape,
                    precision=precision,
                )
            )
    zoo = [run for run in runs if run.dataset == ZOO]
    for app in sorted({run.group for run in zoo}):
        progress(app)
        training = [run for run in runs if run.group != app]
        report.zoo_apps.append(
            score_held_out(training, [run for run in zoo if run.group == app], pool, app, precision=precision)
        )
        held_fresh = [run for run in fresh if run.group == app]
        if held_fresh:
            report.zoo_fresh.append(score_held_out(training, held_fresh, pool, app, precision=precision))
    return report


def fit_shipped(
    runs: Sequence[LabelledRun], pool: Sequence[rf.Scored], *, precision: float = rf.TARGET_PRECISION
) -> RankerModel:
    """The model to ship: the stages on every run, the correctness model and threshold on every held-out
    verdict (``pool``, :func:`otel_blame.training.ranker_fit.held_out_verdicts` of the same runs), the
    failure-mode model on every labelled agent."""
    model = rf.fit(runs, precision=precision, held_out=pool)
    examples = mf.examples([run for run in runs if run.modes], model)
    return replace(model, modes=mf.fit_modes(examples) if examples else None)


# --- the report, as markdown -----------------------------------------------------------------------


def _row(result: Result) -> str:
    figures = result.summary()
    step = figures["hit"] if result.name.startswith("trail") else figures["step"]
    return (
        f"| {result.name} | {figures['runs']} | {percent(figures['agent'])} | "  # type: ignore[arg-type]
        f"{percent(figures['random_speaker'])} | {percent(step)} | "  # type: ignore[arg-type]
        f"{percent(figures['decided_share'])} / {percent(figures['decided_agent'])} | "  # type: ignore[arg-type]
        f"{percent(figures['decided_hit'])} | {figures['task_givers_blamed']} | "  # type: ignore[arg-type]
        f"{figures['task_statement_blamed']} | {percent(figures['mode_group'])} / "  # type: ignore[arg-type]
        f"{percent(figures['mode'])} |"  # type: ignore[arg-type]
    )


HEADER = (
    "| held out | runs | agent % | random speaker % | step % (TRAIL: hit@1) | decided share / agent right % "
    "| decided hit % | task-giver blamed | task statement blamed | mode group / mode % |"
)


def report_lines(report: Report) -> list[str]:
    lines = [HEADER, "|---|---|---|---|---|---|---|---|---|---|"]
    results = [*report.datasets]
    if report.aegis_by_question is not None:
        results.append(report.aegis_by_question)
    for result in report.aegis_shapes:
        results.append(replace(result, name=f"aegis: {result.name.removeprefix('aegis-')} left out"))
    results += [replace(result, name=f"zoo: {result.name} left out") for result in report.zoo_apps]
    results += [replace(result, name=f"zoo fresh seed: {result.name}") for result in report.zoo_fresh]
    lines += [_row(result) for result in results]
    zoo_sets = (("every app left out in turn", report.zoo_apps), ("fresh seed", report.zoo_fresh))
    for title, zoo_results in zoo_sets:
        scored = [item for result in zoo_results for item in result.scored]
        if not scored:
            continue
        blamable = [item for item in scored if not item.run.task_giver_labelled]
        lines += [
            "",
            f"Zoo, {title}: {_pair(scored)} (agent / step %, {len(scored)} runs); without the "
            f"{len(scored) - len(blamable)} runs whose planted fault is in the task's own message: "
            f"{_pair(blamable)}",
        ]
    lines += ["", "Risk-coverage (agent right %, among the most confident verdicts, by the share kept):", ""]
    lines.append("| held out | " + " | ".join(f"{round(100 * c)}" for c in COVERAGES) + " |")
    lines.append("|---|" + "---|" * len(COVERAGES))
    for result in results[: len(report.datasets) + (1 if report.aegis_by_question else 0)]:
        curve = risk_coverage(result.scored, lambda item: item.agent_correct)
        lines.append(f"| {result.name} | " + " | ".join(percent(value) for value in curve) + " |")
    return lines


def _pair(scored: Sequence[rf.Scored]) -> str:
    agent = _share([item.agent_correct for item in scored])
    step = _share([bool(item.step_correct) for item in scored if item.step_correct is not None])
    return f"{percent(agent)} / {percent(step)}"
