"""What the blame store keeps and answers: pydantic models shared by the store, the API and the pages."""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field, model_validator

from otel_blame.alerting.metrics import method_label
from otel_blame.attribution.result import Attribution, Candidate, Cost
from otel_blame.loaders import Annotation
from otel_blame.patterns import PatternDefinition
from otel_blame.redaction import Redactor
from otel_blame.trajectory import Trajectory


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FailureSummary(_Model):
    """One row of the failures list: who, where, when, how sure."""

    trace_id: str
    service: str
    task: str
    outcome: str
    agent: str
    step: int
    confidence: float
    decided: bool = Field(
        default=True,
        description="the evidence supports the verdict (blame.decided); false: a ranked guess, shown as "
        "'Undecided: …' and not counted among culprits by default. True in records kept before it existed",
    )
    reason: str
    method: str
    model: str | None = None
    attributed_at: float = Field(description="unix seconds")
    steps: int = Field(description="how many steps the run had")
    source: str = Field(
        default="",
        description="empty for a processor's blame; 'upload: <name>' for a file attributed in the UI",
    )
    pattern: str | None = Field(default=None, description="blame.pattern: its failure pattern's id")


class StoredRun(FailureSummary):
    """A whole attributed failure: the summary, every step's score, the ranked candidates, the cost
    and the (redacted) Trajectory that was attributed."""

    scores: list[float] = Field(description="each step's share of blame, 0..1, by step index")
    candidates: list[Candidate] = Field(default_factory=list)
    cost: Cost = Field(default_factory=Cost)
    # what kind of failure (blame.category, blame.dependency, blame.failure_mode) and the cross-run
    # evidence; None in records kept before these existed
    category: str | None = None
    dependency: str | None = None
    failure_mode: str | None = None
    cross_run_suspiciousness: float | None = None
    pattern_definition: PatternDefinition | None = Field(
        default=None, description="what its failure pattern is (the pattern's signature and gist)"
    )
    annotation: Annotation | None = Field(
        default=None, description="the known answer an uploaded file carried (Who&When mistake_agent/step)"
    )
    trajectory: Trajectory

    @model_validator(mode="after")
    def _pattern_named(self) -> StoredRun:
        """``pattern`` is the id of ``pattern_definition``."""
        if self.pattern_definition is not None:
            self.pattern = self.pattern_definition.id
        return self

    def summary(self) -> FailureSummary:
        return FailureSummary.model_validate(self.model_dump(include=set(FailureSummary.model_fields)))


class FailurePage(_Model):
    total: int
    limit: int
    offset: int
    failures: list[FailureSummary]


class CulpritCount(_Model):
    """How often one agent of one service was blamed in the window (all methods, then per method);
    decided verdicts only unless the report says ``undecided_counted``."""

    service: str
    agent: str
    count: int
    methods: dict[str, int]
    last_seen: float
    last_trace_id: str


class CulpritSeries(_Model):
    service: str
    agent: str
    counts: list[int] = Field(description="blames per bucket, oldest first")


class CulpritReport(_Model):
    window_seconds: float
    since: float
    until: float
    total: int
    undecided_counted: bool = Field(
        default=False, description="undecided verdicts are counted too (else decided verdicts only)"
    )
    undecided: int = Field(
        default=0, description="undecided verdicts in the window that are not counted in ``total``"
    )
    culprits: list[CulpritCount] = Field(description="most blamed first")
    bucket_seconds: float
    bucket_starts: list[float]
    series: list[CulpritSeries]


def base_method(method: str) -> str:
    """``heuristic(fallback:all_at_once)`` -> ``heuristic``: the label the Prometheus metrics use."""
    return method_label(method)


def redact_trajectory(trajectory: Trajectory, redactor: Redactor) -> Trajectory:
    """The processor's own redaction (the one applied before content goes to an external LLM)."""
    from otel_blame.redaction import redact_trajectory as processor_redaction

    return processor_redaction(trajectory, redactor)


def _task_label(trajectory: Trajectory) -> str:
    """What the run was asked (the first 200 characters of its input), else the task's name."""
    text = " ".join((trajectory.task.input or "").split())
    if not text:
        return trajectory.task.name
    return text if len(text) <= 200 else text[:199] + "…"


def build_run(
    trajectory: Trajectory,
    attribution: Attribution,
    *,
    trace_id: str,
    service: str = "",
    attributed_at: float | None = None,
    redactor: Redactor | None = None,
    redacted: bool = False,
    source: str = "",
    annotation: Annotation | None = None,
    pattern: PatternDefinition | None = None,
) -> StoredRun:
    """The record of one attributed failure; its Trajectory redacted as it is for an external LLM.
    ``redacted=True``: the trajectory already was (the processor's listeners get it so), and is kept
    as it is rather than masked a second time."""
    from otel_blame.attribution.step_scores import step_scores

    scores = step_scores(trajectory, attribution)
    kept = trajectory if redacted else redact_trajectory(trajectory, redactor or Redactor())
    return StoredRun(
        trace_id=trace_id,
        service=service,
        task=_task_label(trajectory),
        outcome=str(trajectory.outcome),
        agent=attribution.agent,
        step=attribution.step,
        confidence=attribution.confidence,
        decided=attribution.decided,
        reason=attribution.reason,
        method=attribution.method,
        model=attribution.model,
        attributed_at=time.time() if attributed_at is None else attributed_at,
        steps=len(trajectory.steps),
        scores=[round(scores.get(step.index, 0.0), 6) for step in trajectory.steps],
        candidates=attribution.candidates,
        cost=attribution.cost,
        category=attribution.category,
        dependency=attribution.dependency,
        failure_mode=attribution.failure_mode,
        cross_run_suspiciousness=attribution.cross_run_suspiciousness,
        source=source,
        annotation=annotation,
        pattern_definition=pattern,
        trajectory=kept,
    )
