"""What a campaign found: per-run records, and the scores computed from them.

A run counts toward accuracy when a fault was planted, the run failed and the processor blamed it
(status ``attributed``). Every other outcome is counted by status and explained in ``problems``,
so a campaign whose app raises, hangs or never fails says so instead of reporting a number.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

CALIBRATION_BINS = 10


class RunStatus(StrEnum):
    ATTRIBUTED = "attributed"  # fault planted, run failed, processor blamed it: scored
    FAILED = "failed"  # (transient) failed, verdict not yet collected
    MASKED = "masked"  # fault planted, the run still passed
    NOT_INJECTED = "not_injected"  # the planned agent never sent a message the fault could change
    NO_TARGET = "no_target"  # the baseline offers no message for the chosen faults / agent / step
    NO_BLAME = "no_blame"  # failed, but no verdict arrived in time
    NO_TRACE = "no_trace"  # the app recorded no task (no otel_blame.instrumentation.task)
    APP_ERROR = "app_error"  # the app raised
    TIMEOUT = "timeout"  # the run hung and was ended
    CLEAN_PASSED = "clean_passed"  # a run without a fault that passed
    CLEAN_FAILED = "clean_failed"  # a run without a fault that failed
    CONFOUNDED = (
        "confounded"  # a planted fault and a failure the app declared (a flaky dependency): not scored
    )


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Fault(_Model):
    kind: str  # a fault kind, or "dependency" for a failure the app declared (inject.truth)
    agent: str
    step: int
    description: str = ""
    dependency: str | None = None  # the failing dependency, for kind "dependency"


class Prediction(_Model):
    agent: str
    step: int
    confidence: float
    method: str
    reason: str = ""
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0


class RunRecord(_Model):
    index: int
    app_seed: int
    status: RunStatus
    planned: Fault | None = None
    fault: Fault | None = Field(default=None, description="the planted fault: the ground truth")
    trace_id: str | None = None
    outcome: str | None = None
    prediction: Prediction | None = None
    agent_correct: bool | None = None
    step_correct: bool | None = None
    error: str | None = None


class Baseline(_Model):
    status: RunStatus
    outcome: str | None = None
    error: str | None = None
    steps: list[list[object]] = Field(
        default_factory=list, description="[agent, step, kind] of the clean run"
    )
    eligible: dict[str, int] = Field(
        default_factory=dict, description="fault kind -> targets in the clean run"
    )


class Score(_Model):
    runs: int
    agent_accuracy: float | None
    step_accuracy: float | None


class CalibrationBin(_Model):
    lower: float
    upper: float
    runs: int
    mean_confidence: float | None
    agent_accuracy: float | None
    step_accuracy: float | None


class Cost(_Model):
    llm_calls_per_run: float
    input_tokens_per_run: float
    output_tokens_per_run: float
    seconds_per_run: float


class CampaignReport(_Model):
    app: str
    method: str
    seed: int
    runs: int = Field(description="runs asked for (the clean baseline not included)")
    scored: int = Field(description="runs that failed with a planted fault and were attributed")
    agent_accuracy: float | None
    step_accuracy: float | None
    by_agent: dict[str, Score]
    by_fault_kind: dict[str, Score]
    confusion: dict[str, dict[str, int]] = Field(description="planted agent -> blamed agent -> runs")
    calibration: list[CalibrationBin]
    expected_calibration_error: float | None
    cost: Cost | None
    statuses: dict[str, int]
    baseline: Baseline
    problems: list[str]
    results: list[RunRecord]


def _rate(values: Iterable[bool | None]) -> float | None:
    known = [bool(v) for v in values if v is not None]
    return round(sum(known) / len(known), 4) if known else None


def _score(records: Sequence[RunRecord]) -> Score:
    return Score(
        runs=len(records),
        agent_accuracy=_rate(r.agent_correct for r in records),
        step_accuracy=_rate(r.step_correct for r in records),
    )


def calibration_bins(records: Sequence[RunRecord], bins: int = CALIBRATION_BINS) -> list[CalibrationBin]:
    out = []
    for number in range(bins):
        lower, upper = number / bins, (number + 1) / bins
        inside = [
            r
            for r in records
            if r.prediction is not None
            and (
                lower <= r.prediction.confidence < upper
                or (number == bins - 1 and r.prediction.confidence == 1.0)
            )
        ]
        confidences = [r.prediction.confidence for r in inside if r.prediction is not None]
        out.append(
            CalibrationBin(
                lower=round(lower, 3),
                upper=round(upper, 3),
                runs=len(inside),
                mean_confidence=round(sum(confidences) / len(confidences), 4) if confidences else None,
                agent_accuracy=_rate(r.agent_correct for r in inside),
                step_accuracy=_rate(r.step_correct for r in inside),
            )
        )
    return out


def _ece(table: Sequence[CalibrationBin], total: int) -> float | None:
    if not total:
        return None
    error = sum(
        b.runs / total * abs((b.mean_confidence or 0.0) - (b.agent_accuracy or 0.0)) for b in table if b.runs
    )
    return round(error, 4)


def _problems(records: Sequence[RunRecord], baseline: Baseline, scored: int) -> list[str]:
    counts = Counter(r.status for r in records)
    problems = []
    if baseline.status is RunStatus.APP_ERROR:
        problems.append(f"the app raised on its clean run, so no fault was planned: {baseline.error}")
    elif baseline.status is RunStatus.TIMEOUT:
        problems.append("the app's clean run hung past the per-run timeout, so no fault was planned")
    elif baseline.status is RunStatus.NO_TRACE:
        problems.append(
            "the app's clean run recorded no task: run it inside otel_blame.instrumentation.task() "
            "(see docs/inject.md)"
        )
    elif baseline.status is RunStatus.CLEAN_FAILED:
        problems.append(
            "the app fails even without a fault: a planted fault is then not the only cause, so the "
            "ground truth is unreliable"
        )
    if not baseline.eligible and baseline.status in (RunStatus.CLEAN_PASSED, RunStatus.CLEAN_FAILED):
        problems.append(
            "no message of the clean run can take the chosen faults (is the app's framework one whose "
            "messages otel-blame intercepts, e.g. AG2/autogen? are --agent / --step right?)"
        )
    if counts[RunStatus.APP_ERROR]:
        first = next(r.error for r in records if r.status is RunStatus.APP_ERROR)
        problems.append(f"{counts[RunStatus.APP_ERROR]} run(s) raised in the app (first: {first})")
    if counts[RunStatus.TIMEOUT]:
        problems.append(f"{counts[RunStatus.TIMEOUT]} run(s) hung and were ended at the per-run timeout")
    if counts[RunStatus.NOT_INJECTED]:
        problems.append(
            f"{counts[RunStatus.NOT_INJECTED]} run(s) never sent a message the planned fault could change"
        )
    if counts[RunStatus.NO_BLAME]:
        problems.append(
            f"{counts[RunStatus.NO_BLAME]} failed run(s) got no verdict from the processor in time"
        )
    if counts[RunStatus.CONFOUNDED]:
        problems.append(
            f"{counts[RunStatus.CONFOUNDED]} run(s) with a planted fault also hit a failure the app declared "
            "(a flaky dependency): two causes, so not scored"
        )
    if counts[RunStatus.NO_TRACE]:
        problems.append(f"{counts[RunStatus.NO_TRACE]} run(s) recorded no task")
    injected = sum(1 for r in records if r.fault is not None)
    if injected and not scored and not counts[RunStatus.NO_BLAME]:
        problems.append(
            f"none of the {injected} run(s) with a planted fault failed: the app never fails from these "
            "faults (does it call set_outcome(False) when its answer is wrong?), so there is nothing to blame"
        )
    elif not records and baseline.status not in (RunStatus.APP_ERROR, RunStatus.TIMEOUT):
        problems.append("no runs were made")
    return problems


def build_report(
    *, app: str, method: str, seed: int, runs: int, baseline: Baseline, records: Sequence[RunRecord]
) -> CampaignReport:
    scored = [r for r in records if r.status is RunStatus.ATTRIBUTED and r.fault is not None]
    by_agent: dict[str, list[RunRecord]] = defaultdict(list)
    by_kind: dict[str, list[RunRecord]] = defaultdict(list)
    confusion: dict[str, dict[str, int]] = defaultdict(dict)
    for record in scored:
        assert record.fault is not None and record.prediction is not None
        by_agent[record.fault.agent].append(record)
        by_kind[record.fault.kind].append(record)
        row = confusion[record.fault.agent]
        row[record.prediction.agent] = row.get(record.prediction.agent, 0) + 1
    total = _score(scored)
    table = calibration_bins(scored)
    predictions = [r.prediction for r in scored if r.prediction is not None]
    cost = None
    if predictions:
        n = len(predictions)
        cost = Cost(
            llm_calls_per_run=round(sum(p.llm_calls for p in predictions) / n, 3),
            input_tokens_per_run=round(sum(p.input_tokens for p in predictions) / n, 1),
            output_tokens_per_run=round(sum(p.output_tokens for p in predictions) / n, 1),
            seconds_per_run=round(sum(p.seconds for p in predictions) / n, 6),
        )
    return CampaignReport(
        app=app,
        method=method,
        seed=seed,
        runs=runs,
        scored=len(scored),
        agent_accuracy=total.agent_accuracy,
        step_accuracy=total.step_accuracy,
        by_agent={agent: _score(group) for agent, group in sorted(by_agent.items())},
        by_fault_kind={kind: _score(group) for kind, group in sorted(by_kind.items())},
        confusion={agent: dict(sorted(row.items())) for agent, row in sorted(confusion.items())},
        calibration=table,
        expected_calibration_error=_ece(table, len(scored)),
        cost=cost,
        statuses={status.value: n for status, n in sorted(Counter(r.status for r in records).items())},
        baseline=baseline,
        problems=_problems(records, baseline, len(scored)),
        results=list(records),
    )
