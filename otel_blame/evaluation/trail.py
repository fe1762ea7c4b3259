"""Score attribution on span-level labels (the TRAIL layout, :mod:`otel_blame.datasets.trail`).

There is no single decisive step: a trace carries several errors. Scores:

- hit@1: the blamed step's span carries an annotated error (any impact);
- hit@1 HIGH: it carries a HIGH-impact error (over traces that have one);
- hit@3: one of the three best candidates' spans carries an annotated error;
- agent: the blamed agent owns the earliest HIGH-impact error, the closest TRAIL has to a decisive
  step (over traces that have one).

Each beside the same scores of positional rules (first step, last step, first failed step) and of a
random step, taken exactly as its expectation over every step rather than sampled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from otel_blame.attribution.base import AttributionError, AttributionMethod
from otel_blame.attribution.baselines import PositionalBaseline
from otel_blame.attribution.known_answer import agent_key, same_agent
from otel_blame.attribution.result import Attribution
from otel_blame.datasets.trail import TrailCase, load_trail_case
from otel_blame.evaluation.attempt import attempt
from otel_blame.evaluation.coverage import percent

TRAIL_BASELINES = ("first_step", "last_step", "first_failed")


class TrailRecord(BaseModel):
    """One trace's scores; a None score is not applicable (no HIGH-impact error, no answer)."""

    model_config = ConfigDict(extra="forbid")

    file: str
    subset: str
    steps: int
    predicted_agent: str | None
    predicted_step: int | None
    predicted_span: str | None
    hit1: bool
    hit1_high: bool | None
    hit3: bool
    decisive_step: int | None
    decisive_agent: str | None
    agent_correct: bool | None
    step_correct: bool | None
    decided: bool
    seconds: float
    confidence: float | None = None


def score_trail_case(case: TrailCase, attribution: Attribution | None, seconds: float = 0.0) -> TrailRecord:
    steps = case.trajectory.steps
    decisive = case.decisive_step()
    decisive_agent = steps[decisive].agent if decisive is not None else None
    has_high = bool(case.high_spans)
    if attribution is None:
        return TrailRecord(
            file=case.file,
            subset=case.subset,
            steps=len(steps),
            predicted_agent=None,
            predicted_step=None,
            predicted_span=None,
            hit1=False,
            hit1_high=False if has_high else None,
            hit3=False,
            decisive_step=decisive,
            decisive_agent=decisive_agent,
            agent_correct=False if decisive is not None else None,
            step_correct=False if decisive is not None else None,
            decided=False,
            seconds=seconds,
            confidence=None,
        )
    span = steps[attribution.step].span_id
    top3 = [steps[c.step].span_id for c in attribution.candidates[:3] if c.step < len(steps)] or [span]
    return TrailRecord(
        file=case.file,
        subset=case.subset,
        steps=len(steps),
        predicted_agent=attribution.agent,
        predicted_step=attribution.step,
        predicted_span=span,
        hit1=span in case.labelled_spans,
        hit1_high=(span in case.high_spans) if has_high else None,
        hit3=any(found in case.labelled_spans for found in top3),
        decisive_step=decisive,
        decisive_agent=decisive_agent,
        agent_correct=same_agent(attribution.agent, decisive_agent) if decisive_agent else None,
        step_correct=(attribution.step == decisive) if decisive is not None else None,
        decided=attribution.decided,
        seconds=round(seconds, 6),
        confidence=attribution.confidence,
    )


def evaluate_trail(
    method: AttributionMethod,
    dataset_dir: Path,
    files: Iterable[Path],
    *,
    on_record: Callable[[TrailRecord, AttributionError | None], None] | None = None,
) -> list[TrailRecord]:
    """Run ``method`` on every trace (its outcome is unknown: it is blamed as a failure, which TRAIL's
    labels say each annotated trace is); a trace the method cannot answer is scored as wrong."""
    records = []
    for path in files:
        case = load_trail_case(path, dataset_dir)
        if not case.errors:
            continue  # nothing went wrong in it: nothing to score
        answer = attempt(method, case.trajectory)
        record = score_trail_case(case, answer.attribution, answer.seconds)
        records.append(record)
        if on_record is not None:
            on_record(record, answer.error)
    return records


class TrailSummary(BaseModel):
    """One method's (or baseline's) scores on one subset, as fractions 0..1."""

    name: str
    subset: str
    traces: int
    hit1: float
    hit1_high: float | None
    hit3: float
    agent: float | None
    step: float | None


def _mean(values: Sequence[float | bool | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def summarise_trail(records: Sequence[TrailRecord], name: str = "method") -> list[TrailSummary]:
    by_subset: dict[str, list[TrailRecord]] = {}
    for record in records:
        by_subset.setdefault(record.subset, []).append(record)
    if len(by_subset) > 1:
        by_subset["all"] = list(records)
    return [
        TrailSummary(
            name=name,
            subset=subset,
            traces=len(group),
            hit1=_mean([r.hit1 for r in group]) or 0.0,
            hit1_high=_mean([r.hit1_high for r in group]),
            hit3=_mean([r.hit3 for r in group]) or 0.0,
            agent=_mean([r.agent_correct for r in group]),
            step=_mean([r.step_correct for r in group]),
        )
        for subset, group in by_subset.items()
    ]


def trail_baselines(dataset_dir: Path, files: Iterable[Path]) -> list[TrailSummary]:
    """Positional rules and a random step on the same traces. Random is exact: a step's chance is
    1/n, so hit@1 is the share of steps on labelled spans and hit@3 the chance that three distinct
    random steps include one."""
    rows: dict[str, list[TrailRecord]] = {name: [] for name in (*TRAIL_BASELINES, "random")}
    baselines = [PositionalBaseline(name) for name in TRAIL_BASELINES]
    for path in files:
        case = load_trail_case(path, dataset_dir)
        steps = case.trajectory.steps
        if not case.errors or not steps:
            continue
        for baseline in baselines:
            rows[baseline.rule].append(score_trail_case(case, baseline.attribute(case.trajectory)))
        rows["random"].append(_random_expectation(case))
    out = []
    for name, records in rows.items():
        out.extend(summarise_trail(records, name=name))
    return out


def _random_expectation(case: TrailCase) -> TrailRecord:
    """A record whose booleans are replaced by the random pick's probabilities (summed like booleans)."""
    steps = case.trajectory.steps
    n = len(steps)
    labelled = sum(1 for step in steps if step.span_id in case.labelled_spans)
    high = sum(1 for step in steps if step.span_id in case.high_spans)
    misses3 = 1.0
    for k in range(min(3, n)):
        misses3 *= max(0.0, (n - labelled - k) / (n - k))
    decisive = case.decisive_step()
    decisive_agent = steps[decisive].agent if decisive is not None else None
    speakers = {agent_key(step.agent) for step in steps}
    agent_share = 1 / len(speakers) if decisive_agent else None  # a random pick of a speaker
    return TrailRecord.model_construct(
        file=case.file,
        subset=case.subset,
        steps=n,
        predicted_agent=None,
        predicted_step=None,
        predicted_span=None,
        hit1=labelled / n,
        hit1_high=(high / n) if case.high_spans else None,
        hit3=1.0 - misses3,
        decisive_step=decisive,
        decisive_agent=decisive_agent,
        agent_correct=agent_share,
        step_correct=(1 / n) if decisive is not None else None,
        decided=False,
        seconds=0.0,
    )


TABLE_COLUMNS = ("hit@1", "HIGH", "hit@3", "agent", "step")


def trail_table(rows: Sequence[TrailSummary], method: str) -> list[str]:
    """The summaries as text lines (percentages), each subset's method row first; fits 80 columns."""
    header = f"{'method':<14} {'subset':<10} {'traces':>6} " + " ".join(
        f"{name:>6}" for name in TABLE_COLUMNS
    )
    lines = [header]
    for row in sorted(rows, key=lambda r: (r.subset, r.name != method)):
        cells = [percent(value) for value in (row.hit1, row.hit1_high, row.hit3, row.agent, row.step)]
        lines.append(f"{row.name:<14} {row.subset:<10} {row.traces:>6} " + " ".join(f"{c:>6}" for c in cells))
    return lines
