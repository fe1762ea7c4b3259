"""The analysis of one trace, pure: parse -> trajectory -> attribute -> conclude.

A function of the trace's payloads and its :class:`~otel_blame.processor.decision.TraceDecision`
(plus, to conclude, the cross-run evidence read by the caller): no I/O, no shared state, nothing
of the processor's. That is what lets it run in worker processes, on every core: the analysis
stage (:mod:`.analyser`) sends an :class:`AnalysisJob` to a worker, which runs :func:`run_job`
and sends back an :class:`Analysis`.

:func:`conclude` finishes a blame: the attribution described (weighed against the cross-run
evidence first, when there is any), written onto the trace's spans (or into one late ``blame
{agent}`` span), and the trajectory redacted for the blame listeners. Without cross-run evidence
to read, the worker concludes too (:class:`Concluding`), so the processor's own process, which
receives, logs and exports, only keeps and sends what the worker made; with it, the stage reads
the evidence and concludes.

Whether a trace is blamed at all is decided in ONE place, :func:`blame_or_not`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_blame import semconv as sc
from otel_blame.attribution.cross_run import CrossRunEvidence, combine
from otel_blame.attribution.decision import blame_decision
from otel_blame.attribution.result import Attribution
from otel_blame.attribution.systemic import describe_failure
from otel_blame.conventions import NoTrajectory, attributes_to_dict, build_trajectory
from otel_blame.patterns import Cause, Known, cause_of
from otel_blame.processor.attributor import AttributionRunner
from otel_blame.processor.config import AttributionConfig, CrossRunConfig, DetectionConfig
from otel_blame.processor.decision import NOT_FAILED, FailureDetector, TraceDecision
from otel_blame.processor.enricher import BlameEnricher, EvaluationEvent
from otel_blame.processor.jobs import StoredJobReader
from otel_blame.processor.lifeline import end_with
from otel_blame.redaction import Redactor, redact_trajectory
from otel_blame.trajectory import Outcome, Trajectory

NO_TRAJECTORY, BUILT, ATTRIBUTED, UNATTRIBUTED = "no_trajectory", "built", "attributed", "unattributed"


@dataclass(frozen=True, slots=True)
class AnalysisJob:
    """What a worker needs: the trace's payloads as they arrived, and its decision."""

    trace_id: bytes
    span_payloads: tuple[bytes, ...]
    log_payloads: tuple[bytes, ...]
    decision: TraceDecision
    submitted_at: float  # time.monotonic() when queued: the attribution timeout counts from it
    attribute: bool = True  # False: the trajectory only (a success, for the cross-run statistics)
    stored_row: int = 0  # a deferred job: the payloads are in this write-ahead log row (:mod:`.jobs`)
    late: bool = False  # the trace went out already: its blame is a late ``blame {agent}`` span

    def loaded(self, reader: StoredJobReader | None) -> AnalysisJob:
        """The job with its payloads (read from the log for a deferred job)."""
        if not self.stored_row:
            return self
        if reader is None:
            raise LookupError("an analysis job in the write-ahead log, and no log to read it from")
        stored = reader.read(self.stored_row)
        return replace(
            self,
            span_payloads=(stored.span_payload,),
            log_payloads=(stored.log_payload,) if stored.log_payload else (),
            stored_row=0,
        )


@dataclass(frozen=True, slots=True)
class Blamed:
    """A blame concluded (:func:`conclude`): what it writes and what its listeners see."""

    attribution: Attribution  # described, cross-run weighed where there was evidence
    payload: bytes  # the trace's spans with ``blame.*`` (an export request), or one late blame span
    evaluation: EvaluationEvent | None  # the ``gen_ai.evaluation.result`` written, and where
    listened: Trajectory  # the trajectory redacted: what blame listeners and the blame store see
    cause: Cause | None = None  # what the blame says about its cause (patterns on)
    # the failure pattern written as ``blame.pattern``: the id the cause would open, until the pattern
    # book answers the pattern it falls into (:mod:`.patterns`)
    pattern: Known | None = None


@dataclass(frozen=True, slots=True)
class Concluding:
    """What a worker needs to conclude a blame itself (when no cross-run evidence is read)."""

    enricher: BlameEnricher
    redactor: Redactor
    cross_run: CrossRunConfig
    patterns: bool = False  # describe each blame's cause and write its (candidate) pattern


@dataclass(frozen=True, slots=True)
class Analysis:
    """What the analysis found. ``status``: ``no_trajectory`` (``problem`` says why, for
    ``problem_service``), ``built`` (a trajectory, not attributed: the trace is not to be
    blamed, or only its trajectory was asked for), ``attributed``, ``unattributed`` (the method
    and its fallback failed: ``problem``)."""

    status: str
    decision: TraceDecision  # the job's, or for a trace without a root the one made here
    trajectory: Trajectory | None = None
    attribution: Attribution | None = None
    service: str = ""  # the root's resource ``service.name`` ("" when it has none)
    workflow_service: str = ""  # the same, else the service the trajectory builder found
    resource: bytes = b""  # the root's Resource, serialised (a late blame span carries it)
    problem: str | None = None
    problem_service: str | None = None
    fell_back: bool = False
    steps_unnamed: int = 0  # steps whose agent no telemetry named
    blamed: Blamed | None = None  # concluded where it ran (``trajectory`` is then not sent back)


def blame_or_not(
    trajectory: Trajectory | None,
    decision: TraceDecision,
    root: Span | None = None,
    detector: FailureDetector | None = None,
) -> TraceDecision:
    """THE decision whether a trace is attributed, and why: every analysis path asks it here.

    The decision made at assembly (root signals, a verdict) stands; a trace that arrived without
    a root span is decided on the ``root`` its trajectory chose. A failed trace is then put to
    ``blame_decision`` (the attribution layer's, shared by every surface) before attribution."""
    if decision.decided:
        return decision
    why = detector.failure_reason(root) if root is not None and detector is not None else None
    if why is None:
        return NOT_FAILED
    return TraceDecision(True, why, (root.span_id.hex(),) if root is not None else ())


def as_failed(trajectory: Trajectory, decision: TraceDecision) -> Trajectory:
    """The trajectory as the failed run the decision says it is."""
    task = trajectory.task
    if decision.expected_output is not None:
        task = task.model_copy(update={"expected_output": decision.expected_output})
    update: dict[str, object] = {"outcome": Outcome.FAILURE, "task": task}
    if trajectory.outcome_reason is None and decision.why:
        update["outcome_reason"] = decision.why
    return trajectory.model_copy(update=update)


def analyse(
    job: AnalysisJob,
    runner: AttributionRunner | None,
    detector: FailureDetector,
    concluding: Concluding | None = None,
) -> Analysis:
    """Parse -> trajectory -> blame or not -> attribute (``runner`` None: never attribute) -> conclude
    (with ``concluding``; else the caller concludes)."""
    request = ExportTraceServiceRequest.FromString(b"".join(job.span_payloads))
    logs = ExportLogsServiceRequest.FromString(b"".join(job.log_payloads)) if job.log_payloads else None
    try:
        built = build_trajectory(list(request.resource_spans), list(logs.resource_logs) if logs else ())
    except ValueError as error:
        decision = blame_or_not(None, job.decision)
        if isinstance(error, NoTrajectory):
            return Analysis(NO_TRAJECTORY, decision, problem=error.reason, problem_service=error.service)
        return Analysis(NO_TRAJECTORY, decision, problem=str(error))
    trajectory = built.trajectory
    root, resource = _root_of(request, trajectory.root_span_id)
    decision = blame_or_not(trajectory, job.decision, root, detector)
    service = _service(resource)
    found = {
        "trajectory": trajectory,
        "service": service,
        "workflow_service": service or built.notes.service,
        "resource": resource.SerializeToString() if resource is not None else b"",
        "steps_unnamed": built.notes.agent_unnamed,
    }
    if not (decision.failed and job.attribute and runner is not None):
        return Analysis(BUILT, decision, **found)
    trajectory = found["trajectory"] = as_failed(trajectory, decision)
    blamed = blame_decision(trajectory)  # the one decision the CLI, API and UI take too
    if not blamed.blame:
        return Analysis(UNATTRIBUTED, decision, problem=blamed.why, **found)
    outcome = runner.attribute(trajectory, submitted_at=job.submitted_at)
    if outcome.attribution is None:
        return Analysis(UNATTRIBUTED, decision, problem=outcome.problem, fell_back=outcome.fell_back, **found)
    if concluding is not None:
        found["blamed"] = conclude(
            trajectory,
            outcome.attribution,
            None,
            concluding,
            late=job.late,
            request=request,
            resource=resource,
            service=found["workflow_service"],
        )
        found["trajectory"] = None  # what the processor needs of it is in ``blamed``
    return Analysis(
        ATTRIBUTED, decision, attribution=outcome.attribution, fell_back=outcome.fell_back, **found
    )


def conclude(
    trajectory: Trajectory,
    attribution: Attribution,
    evidence: CrossRunEvidence | None,
    concluding: Concluding,
    *,
    late: bool,
    request: ExportTraceServiceRequest | None,
    resource: Resource | None,
    service: str = "",
) -> Blamed:
    """The blame finished: described (and weighed against the evidence), its cause and candidate
    pattern found (patterns on; ``service``: the workflow's), written onto the trace's spans
    (``request``, changed in place; in time) or into a late ``blame {agent}`` span (``late``), and
    the trajectory redacted for the listeners."""
    described = describe(trajectory, attribution, evidence, concluding.cross_run)
    cause, pattern = None, None
    if concluding.patterns:
        cause = cause_of(service, trajectory.task.workflow or trajectory.task.name, trajectory, described)
        pattern = Known(cause.candidate_id(), cause.gist, 0.0)
    said = pattern.id if pattern is not None else None
    if late or request is None:
        enricher = concluding.enricher
        payload, evaluation = enricher.late_blame_span(trajectory, described, resource, pattern=said)
    else:
        evaluation = concluding.enricher.enrich(request.resource_spans, trajectory, described, pattern=said)
        payload = request.SerializeToString()
    listened = redact_trajectory(trajectory, concluding.redactor)
    return Blamed(described, payload, evaluation, listened, cause, pattern)


def describe(
    trajectory: Trajectory,
    attribution: Attribution,
    evidence: CrossRunEvidence | None,
    settings: CrossRunConfig,
) -> Attribution:
    """The attribution weighed against its workflow's cross-run evidence (when there is any), then
    described: category, failing dependency, failure mode (LLM methods leave them open)."""
    if evidence is not None:
        attribution = combine(
            trajectory,
            attribution,
            evidence,
            weight=settings.weight,
            prior_runs=settings.prior_runs,
            min_failing_runs=settings.min_failing_runs,
        )
    return describe_failure(trajectory, attribution)


def _root_of(
    request: ExportTraceServiceRequest, span_id_hex: str | None
) -> tuple[Span | None, Resource | None]:
    """The trajectory's root span and its resource."""
    if not span_id_hex:
        return None, None
    wanted = bytes.fromhex(span_id_hex)
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                if span.span_id == wanted:
                    return span, resource.resource
    return None, None


def _service(resource: Resource | None) -> str:
    if resource is None:
        return ""
    return str(attributes_to_dict(resource.attributes).get(sc.SERVICE_NAME, ""))


# -- in a worker process ---------------------------------------------------------------------------
_runner: AttributionRunner | None = None
_detector: FailureDetector | None = None
_jobs: StoredJobReader | None = None
_concluding: Concluding | None = None


def start_worker(
    config: AttributionConfig,
    detection: DetectionConfig,
    redactor: Redactor | None,
    processor_pid: int,
    wal_path: Path | None = None,
    concluding: Concluding | None = None,
) -> None:
    """A worker process's initializer: a lower CPU priority (``worker_niceness``), its own attribution
    method (and LLM client), the write-ahead log's file to read deferred jobs from, what it needs
    to conclude a blame (None: the processor concludes), and a watch on the processor: a worker
    outlives it by a second at most, even after ``kill -9``."""
    global _runner, _detector, _jobs, _concluding
    if config.worker_niceness:
        os.nice(config.worker_niceness)
    _runner = AttributionRunner(config, redactor)
    _detector = FailureDetector(detection)
    _jobs = StoredJobReader(wal_path) if wal_path is not None else None
    _concluding = concluding
    end_with(processor_pid)


def run_job(job: AnalysisJob) -> Analysis:
    """A worker process's task."""
    assert _detector is not None
    return analyse_one(job, _runner, _detector, _jobs, _concluding)


def run_jobs(jobs: tuple[AnalysisJob, ...]) -> list[Analysis | Exception]:
    """A worker process's task of several jobs (one round trip)."""
    assert _detector is not None
    return analyse_each(jobs, _runner, _detector, _jobs, _concluding)


def analyse_one(
    job: AnalysisJob,
    runner: AttributionRunner | None,
    detector: FailureDetector,
    reader: StoredJobReader | None,
    concluding: Concluding | None = None,
) -> Analysis:
    """One job's analysis, in a worker process or a thread of the processor (its payloads read from
    the log if deferred)."""
    return analyse(job.loaded(reader), runner, detector, concluding)


def analyse_each(
    jobs: tuple[AnalysisJob, ...],
    runner: AttributionRunner | None,
    detector: FailureDetector,
    reader: StoredJobReader | None = None,
    concluding: Concluding | None = None,
) -> list[Analysis | Exception]:
    """Each job's analysis, or what it raised (one bad trace does not fail the others)."""
    out: list[Analysis | Exception] = []
    for job in jobs:
        try:
            out.append(analyse_one(job, runner, detector, reader, concluding))
        except Exception as error:
            out.append(error)
    return out


def warm_up() -> None:
    """Nothing: run once by each worker at start, so the workers exist before the first trace."""
