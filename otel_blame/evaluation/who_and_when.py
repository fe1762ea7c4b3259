"""Score an attribution method on Who&When: one prediction record per log, a summary per subset.

Scoring is by exact match: the agent name must equal the annotation (the loader already maps
annotation typos that differ only in case) and the step index must be equal. The reference
evaluator's substring test would count a predicted step 12 as correct for 1; this one does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from otel_blame.attribution.base import AttributionError, AttributionMethod
from otel_blame.attribution.baselines import positional_baselines
from otel_blame.attribution.known_answer import same_agent
from otel_blame.attribution.random_baseline import RandomAttribution
from otel_blame.attribution.result import Attribution, Cost
from otel_blame.datasets.who_and_when import SUBSETS, WhoAndWhenCase, case_files, load_case
from otel_blame.evaluation.attempt import attempt


class PredictionRecord(BaseModel):
    """One line of the predictions JSONL: exactly these fields, in this order."""

    model_config = ConfigDict(extra="forbid")

    file: str
    predicted_agent: str | None
    predicted_step: int | None
    mistake_agent: str
    mistake_step: int
    agent_correct: bool
    step_correct: bool
    llm_calls: int
    input_tokens: int
    output_tokens: int
    seconds: float
    decided: bool = False
    confidence: float | None = None


class SubsetSummary(BaseModel):
    subset: str
    traces: int
    failed: int  # logs where the method raised instead of answering (scored as wrong)
    agent_accuracy: float
    step_accuracy: float
    step_within_1: float
    step_within_3: float
    mean_llm_calls: float
    mean_input_tokens: float
    mean_output_tokens: float
    mean_seconds: float


def score_case(
    case: WhoAndWhenCase, attribution: Attribution | None, spent: Cost | None = None
) -> PredictionRecord:
    """Exact-match scoring of one answer (None = the method failed on this log, having ``spent``)."""
    if attribution is None:
        spent = spent or Cost()
        return PredictionRecord(
            file=case.file,
            predicted_agent=None,
            predicted_step=None,
            mistake_agent=case.mistake_agent,
            mistake_step=case.mistake_step,
            agent_correct=False,
            step_correct=False,
            llm_calls=spent.llm_calls,
            input_tokens=spent.input_tokens,
            output_tokens=spent.output_tokens,
            seconds=spent.seconds,
        )
    cost = attribution.cost
    return PredictionRecord(
        file=case.file,
        predicted_agent=attribution.agent,
        predicted_step=attribution.step,
        mistake_agent=case.mistake_agent,
        mistake_step=case.mistake_step,
        agent_correct=same_agent(attribution.agent, case.mistake_agent),
        step_correct=attribution.step == case.mistake_step,
        llm_calls=cost.llm_calls,
        input_tokens=cost.input_tokens,
        output_tokens=cost.output_tokens,
        seconds=round(cost.seconds, 4),
        decided=attribution.decided,
        confidence=attribution.confidence,
    )


def subset_of(record: PredictionRecord) -> str:
    return record.file.split("/", 1)[0]


def summarise(records: Sequence[PredictionRecord]) -> list[SubsetSummary]:
    """Per-subset accuracies (fractions 0..1) and mean cost per trace, in dataset order."""
    by_subset: dict[str, list[PredictionRecord]] = {}
    for record in records:
        by_subset.setdefault(subset_of(record), []).append(record)
    summaries = []
    for subset, group in by_subset.items():
        count = len(group)

        def within(distance: int, group: list[PredictionRecord] = group, count: int = count) -> float:
            hits = sum(
                1
                for r in group
                if r.predicted_step is not None and abs(r.predicted_step - r.mistake_step) <= distance
            )
            return hits / count

        summaries.append(
            SubsetSummary(
                subset=subset,
                traces=count,
                failed=sum(1 for r in group if r.predicted_agent is None),
                agent_accuracy=sum(r.agent_correct for r in group) / count,
                step_accuracy=sum(r.step_correct for r in group) / count,
                step_within_1=within(1),
                step_within_3=within(3),
                mean_llm_calls=sum(r.llm_calls for r in group) / count,
                mean_input_tokens=sum(r.input_tokens for r in group) / count,
                mean_output_tokens=sum(r.output_tokens for r in group) / count,
                mean_seconds=sum(r.seconds for r in group) / count,
            )
        )
    return summaries


def select_files(dataset_dir: Path, subsets: Sequence[str] = SUBSETS, limit: int | None = None) -> list[Path]:
    """The logs to evaluate: every subset asked for, at most ``limit`` logs from each."""
    files: list[Path] = []
    for subset in subsets:
        try:
            found = case_files(dataset_dir, [subset])
        except FileNotFoundError:
            continue
        files.extend(found[:limit] if limit is not None else found)
    if not files:
        raise FileNotFoundError(f"no {'/'.join(subsets)}/*.json logs under {dataset_dir}")
    return files


def evaluate(
    method: AttributionMethod,
    dataset_dir: Path,
    files: Iterable[Path],
    *,
    on_record: Callable[[PredictionRecord, AttributionError | None], None] | None = None,
) -> list[PredictionRecord]:
    """Run ``method`` on each log; a log the method cannot answer is recorded as wrong, not fatal."""
    records = []
    for path in files:
        case = load_case(path, dataset_dir)
        answer = attempt(method, case.trajectory)
        error = answer.error
        record = score_case(case, answer.attribution, error.cost if error is not None else None)
        record.seconds = round(answer.seconds, 6)  # wall time, the same for every method
        records.append(record)
        if on_record is not None:
            on_record(record, error)
    return records


RANDOM_SEEDS = 10


class BaselineSummary(BaseModel):
    """A baseline's accuracy on one subset (the random one averaged over its seeds)."""

    name: str
    description: str
    subset: str
    traces: int
    agent_accuracy: float
    step_accuracy: float


def evaluate_baselines(
    dataset_dir: Path, files: Iterable[Path], *, random_seeds: int = RANDOM_SEEDS
) -> list[BaselineSummary]:
    """Every positional baseline and the random one (mean of ``random_seeds`` seeds) on the same logs,
    each log loaded once."""
    baselines = positional_baselines()
    randoms = [RandomAttribution(seed) for seed in range(random_seeds)]
    hits: dict[tuple[str, str], list[float]] = {}  # (name, subset) -> [logs, agent hits, step hits]
    for path in files:
        case = load_case(path, dataset_dir)
        if not case.trajectory.steps:
            continue
        for method in [*baselines, *randoms]:
            name = "random" if isinstance(method, RandomAttribution) else method.name
            answer = method.attribute(case.trajectory)
            tally = hits.setdefault((name, case.subset), [0.0, 0.0, 0.0])
            weight = 1.0 / random_seeds if name == "random" else 1.0
            tally[0] += weight
            tally[1] += weight * same_agent(answer.agent, case.mistake_agent)
            tally[2] += weight * (answer.step == case.mistake_step)
    descriptions = {baseline.name: baseline.description for baseline in baselines}
    descriptions["random"] = f"a uniformly random agent and step (mean of {random_seeds} seeds)"
    return [
        BaselineSummary(
            name=name,
            description=descriptions[name],
            subset=subset,
            traces=round(tally[0]),
            agent_accuracy=tally[1] / tally[0],
            step_accuracy=tally[2] / tally[0],
        )
        for (name, subset), tally in hits.items()
    ]


def best_baseline(
    baselines: Sequence[BaselineSummary], subset: str
) -> tuple[BaselineSummary, BaselineSummary]:
    """The best baseline of a subset for the agent and for the step (they may differ)."""
    of_subset = [b for b in baselines if b.subset == subset]
    if not of_subset:
        raise ValueError(f"no baselines for subset {subset!r}")
    return max(of_subset, key=lambda b: b.agent_accuracy), max(of_subset, key=lambda b: b.step_accuracy)
