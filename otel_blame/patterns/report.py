"""The patterns of a window of failures, counted: what the web UI, the API, ``otel-blame top --by
pattern`` and ``otel-blame patterns`` show. Pure: a list of runs (each with its pattern) and the
patterns' definitions in, a :class:`PatternReport` out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from otel_blame.patterns.cause import KIND_CAUSE, KIND_UNDECIDED, OTHER_REASONS, Cause, Signature
from otel_blame.patterns.index import Known

EXAMPLES = 3  # example runs a pattern shows, newest first


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PatternDefinition(_Model):
    """What a pattern is: its signature and the gist of the run that opened it."""

    id: str
    kind: str = Field(default=KIND_CAUSE, description="cause, or undecided (a workflow's undecided runs)")
    service: str = ""
    workflow: str = ""
    category: str | None = None
    dependency: str | None = None
    role: str | None = Field(default=None, description="the blamed agent's role (its name, run ids out)")
    failure_mode: str | None = None
    action: str | None = Field(default=None, description="tool:NAME, code, handoff, answer or stop")
    decided: bool = Field(default=True, description="false: the decided facts of undecided verdicts")
    gist: str = Field(default="", description="the reason of the run that opened it, names and values out")
    first_seen: float | None = Field(default=None, description="unix seconds, when it was first seen")

    @classmethod
    def of(cls, known: Known, cause: Cause) -> PatternDefinition:
        """The definition of the pattern ``known`` that ``cause`` fell into (same signature)."""
        return cls.from_signature(known.id, cause.signature, cause.kind, known.gist, known.first_seen)

    @classmethod
    def from_signature(
        cls, pattern_id: str, signature: Signature, kind: str, gist: str, first_seen: float | None
    ) -> PatternDefinition:
        return cls(
            id=pattern_id,
            kind=kind,
            service=signature.service,
            workflow=signature.workflow,
            category=signature.category,
            dependency=signature.dependency,
            role=signature.role,
            failure_mode=signature.failure_mode,
            action=signature.action,
            decided=signature.decided,
            gist=gist,
            first_seen=first_seen,
        )

    def signature(self) -> Signature:
        return Signature(
            self.service,
            self.workflow,
            self.category,
            self.dependency,
            self.role,
            self.failure_mode,
            self.action,
            self.decided,
        )

    @property
    def title(self) -> str:
        """One line: ``coder · agent · step_repetition · answer``, or what an undecided group is."""
        if self.kind == KIND_UNDECIDED:
            return "undecided: nothing decided about the cause"
        parts = [self.role, self.category, self.dependency, self.failure_mode, self.action]
        said = " · ".join(part for part in parts if part)
        return said if self.decided else f"{said} (undecided runs)"

    @property
    def reason(self) -> str:
        """The gist as shown: what the runs' reasons say, or that they are the overflow's."""
        if self.gist == OTHER_REASONS:
            return "other reasons (past the bound on this signature's patterns)"
        return self.gist


class PatternExample(_Model):
    trace_id: str
    agent: str
    at: float = Field(description="unix seconds")
    decided: bool = True
    candidates: list[str] = Field(default_factory=list, description="undecided: the suspects, best first")


class PatternSummary(PatternDefinition):
    """One pattern in the window: its definition, how often, when, whom it spans, examples."""

    count: int
    last_seen: float
    agents: dict[str, int] = Field(description="blamed agents (an undecided run's likeliest candidate)")
    dependencies: list[str] = Field(default_factory=list)
    series: list[int] = Field(description="runs per bucket, oldest first")
    examples: list[PatternExample]


class PatternReport(_Model):
    window_seconds: float
    since: float
    until: float
    bucket_seconds: float
    bucket_starts: list[float]
    total: int = Field(description="runs in a pattern (undecided groups not counted)")
    undecided_runs: int = Field(description="runs in the workflows' undecided groups")
    patterns: list[PatternSummary] = Field(description="most runs first")
    undecided: list[PatternSummary] = Field(description="the undecided group of each workflow")


@dataclass(frozen=True, slots=True)
class PatternRun:
    """One failure as the report counts it."""

    trace_id: str
    pattern: str
    agent: str
    at: float
    decided: bool = True
    dependency: str | None = None
    candidates: tuple[str, ...] = ()


@dataclass
class _Tally:
    runs: list[PatternRun] = field(default_factory=list)


def build_report(
    runs: Iterable[PatternRun],
    definitions: Mapping[str, PatternDefinition],
    *,
    since: float,
    until: float,
    buckets: int = 24,
    limit: int | None = None,
) -> PatternReport:
    """Count the runs of the window per pattern (runs outside it, or of a pattern with no definition,
    are left out), most first; ``limit``: at most that many patterns (undecided groups apart)."""
    buckets = max(1, min(buckets, 240))
    width = max(until - since, 1e-9) / buckets
    tallies: dict[str, _Tally] = {}
    for run in runs:
        if since <= run.at <= until and run.pattern in definitions:
            tallies.setdefault(run.pattern, _Tally()).runs.append(run)
    summaries = []
    for pattern_id, tally in tallies.items():
        definition = definitions[pattern_id]
        ordered = sorted(tally.runs, key=lambda run: (-run.at, run.trace_id))
        series = [0] * buckets
        for run in ordered:
            series[min(buckets - 1, max(0, int((run.at - since) / width)))] += 1
        agents = Counter(run.agent for run in ordered)
        dependencies = sorted({run.dependency for run in ordered if run.dependency} | _own(definition))
        first = min(run.at for run in ordered)
        summaries.append(
            PatternSummary(
                **definition.model_dump(exclude={"first_seen"}),
                first_seen=min(first, definition.first_seen) if definition.first_seen else first,
                count=len(ordered),
                last_seen=ordered[0].at,
                agents=dict(sorted(agents.items(), key=lambda item: (-item[1], item[0]))),
                dependencies=dependencies,
                series=series,
                examples=[
                    PatternExample(
                        trace_id=run.trace_id,
                        agent=run.agent,
                        at=run.at,
                        decided=run.decided,
                        candidates=list(run.candidates),
                    )
                    for run in ordered[:EXAMPLES]
                ],
            )
        )
    summaries.sort(key=lambda s: (-s.count, -s.last_seen, s.id))
    causes = [s for s in summaries if s.kind != KIND_UNDECIDED]
    undecided = [s for s in summaries if s.kind == KIND_UNDECIDED]
    return PatternReport(
        window_seconds=until - since,
        since=since,
        until=until,
        bucket_seconds=width,
        bucket_starts=[since + i * width for i in range(buckets)],
        total=sum(s.count for s in causes),
        undecided_runs=sum(s.count for s in undecided),
        patterns=causes[:limit] if limit is not None else causes,
        undecided=undecided,
    )


def _own(definition: PatternDefinition) -> set[str]:
    return {definition.dependency} if definition.dependency else set()
