"""Score attribution on AEGIS (:mod:`otel_blame.datasets.aegis`): labels name the faulty agents (one
to four) and each one's MAST failure mode, never a step.

Per run: whether the blamed agent is one of the faulty ones (a random speaker's chance is the share
of faulty speakers), whether the verdict was decided, and, where the blamed agent is faulty, whether
the failure mode named is its labelled mode and whether it is in the right MAST group. Each summary
is per system shape (told apart by its speakers) and over all runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from otel_blame.attribution.base import AttributionError, AttributionMethod
from otel_blame.attribution.modes import mast_group
from otel_blame.attribution.result import Attribution
from otel_blame.attribution.systemic import FAILURE_MODES
from otel_blame.datasets.aegis import AegisRun
from otel_blame.evaluation.attempt import attempt
from otel_blame.evaluation.coverage import percent


class AegisRecord(BaseModel):
    """One run's scores; a None score is not applicable (no verdict, or the blamed agent not faulty)."""

    model_config = ConfigDict(extra="forbid")

    file: str
    shape: str
    speakers: int
    faulty_agents: list[str]
    predicted_agent: str | None
    predicted_step: int | None
    agent_correct: bool
    decided: bool
    confidence: float | None
    predicted_mode: str | None  # the MAST number of the failure mode named
    labelled_modes: list[str]  # the blamed agent's labelled modes, where it is faulty
    mode_correct: bool | None
    group_correct: bool | None
    seconds: float


def mast_number(failure_mode: str | None) -> str | None:
    """``task_derailment`` -> ``FM-2.3`` (what ``blame.failure_mode`` names, as AEGIS labels it)."""
    if failure_mode is None:
        return None
    found = FAILURE_MODES.get(failure_mode)
    return found[0] if found else failure_mode if failure_mode.startswith("FM-") else None


def score_run(run: AegisRun, attribution: Attribution | None, seconds: float = 0.0) -> AegisRecord:
    agent = attribution.agent if attribution is not None else None
    labelled = list(run.faulty.get(agent, [])) if agent is not None else []
    predicted = mast_number(attribution.failure_mode) if attribution is not None else None
    scored = bool(labelled)
    return AegisRecord(
        file=f"aegis:{run.line}",
        shape=run.shape,
        speakers=len(run.speakers),
        faulty_agents=sorted(run.faulty),
        predicted_agent=agent,
        predicted_step=attribution.step if attribution is not None else None,
        agent_correct=run.is_faulty(agent),
        decided=bool(attribution and attribution.decided),
        confidence=attribution.confidence if attribution is not None else None,
        predicted_mode=predicted,
        labelled_modes=labelled,
        mode_correct=(predicted in labelled) if scored else None,
        group_correct=(predicted is not None and mast_group(predicted) in {mast_group(m) for m in labelled})
        if scored
        else None,
        seconds=round(seconds, 6),
    )


def evaluate_aegis(
    method: AttributionMethod,
    runs: Iterable[AegisRun],
    *,
    on_record: Callable[[AegisRecord, AttributionError | None], None] | None = None,
) -> list[AegisRecord]:
    """Run ``method`` on every run (each a failure); a run the method cannot answer is scored wrong."""
    records = []
    for run in runs:
        answer = attempt(method, run.trajectory)
        record = score_run(run, answer.attribution, answer.seconds)
        records.append(record)
        if on_record is not None:
            on_record(record, answer.error)
    return records


class AegisSummary(BaseModel):
    """One shape's (or every run's) scores, as fractions 0..1."""

    shape: str
    runs: int
    agent: float
    random_speaker: float
    decided_share: float
    decided_right: float | None
    mode: float | None  # over the runs whose blamed agent is faulty
    group: float | None
    modes_scored: int


def _mean(values: Sequence[bool | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def summarise_aegis(records: Sequence[AegisRecord]) -> list[AegisSummary]:
    by_shape: dict[str, list[AegisRecord]] = {}
    for record in records:
        by_shape.setdefault(record.shape, []).append(record)
    groups = sorted(by_shape.items())
    if len(groups) > 1:
        groups.append(("all", list(records)))
    summaries = []
    for shape, group in groups:
        decided = [record for record in group if record.decided]
        summaries.append(
            AegisSummary(
                shape=shape,
                runs=len(group),
                agent=sum(record.agent_correct for record in group) / len(group),
                random_speaker=sum(len(r.faulty_agents) / r.speakers for r in group) / len(group),
                decided_share=len(decided) / len(group),
                decided_right=_mean([record.agent_correct for record in decided]),
                mode=_mean([record.mode_correct for record in group]),
                group=_mean([record.group_correct for record in group]),
                modes_scored=sum(1 for record in group if record.mode_correct is not None),
            )
        )
    return summaries


def aegis_table(summaries: Sequence[AegisSummary]) -> list[str]:
    """The summaries as text lines (percentages, 80 columns)."""
    header = ("runs", 5), ("agent", 6), ("random", 6), ("decided", 7), ("right", 6), ("mode", 6), ("group", 6)
    lines = [f"{'shape':<18}" + "".join(f" {name:>{width}}" for name, width in header)]
    for row in summaries:
        lines.append(
            f"{row.shape[:18]:<18} {row.runs:>5} {percent(row.agent):>6} {percent(row.random_speaker):>6} "
            f"{percent(row.decided_share):>7} {percent(row.decided_right):>6} {percent(row.mode):>6} "
            f"{percent(row.group):>6}"
        )
    return lines
