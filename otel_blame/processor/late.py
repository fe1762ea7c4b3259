"""Late verdicts: a failure that becomes known after its trace was exported.

Two ways in: ``POST /v1/verdicts`` (:meth:`LateVerdicts.submit_verdict`, answered with what was
done, see docs/processor.md) and a failed root span that arrives after its trace was released
(:meth:`LateVerdicts.consume`, the assembly stage's consumer of late groups). Either way the
retained copy of the trace is analysed as failed and its blame goes downstream as one
``blame {agent}`` span (:meth:`~otel_blame.processor.enrich_export.EnrichExportStage.blame_late`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from otel_blame.processor.analyser import AnalysisStage
from otel_blame.processor.assembler import BufferedTrace, LateGroup, TraceAssembler
from otel_blame.processor.counters import Counters
from otel_blame.processor.decision import TraceDecision
from otel_blame.processor.enrich_export import EnrichExportStage
from otel_blame.processor.errors import NotAccepting, VerdictNotFound
from otel_blame.processor.retention import RetainedTrace, RetainedTraces
from otel_blame.processor.wal import WALClosed, WALFull, WALStorageError

log = logging.getLogger(__name__)


class BlameRecord(Protocol):
    """A blame as an answer shows it: an Attribution, or a stored record of one."""

    agent: str
    step: int
    confidence: float
    reason: str
    method: str
    model: str | None


StoredBlameLookup = Callable[[str], BlameRecord | None]


class LateVerdicts:
    """The late-verdict policy: which answer a verdict gets, and blaming late failed roots."""

    def __init__(
        self,
        *,
        assembler: TraceAssembler,
        retained: RetainedTraces,
        analysis: AnalysisStage,
        export: EnrichExportStage,
        counters: Counters,
        stored_blame: StoredBlameLookup | None = None,
    ) -> None:
        self._assembler = assembler
        self._retained = retained
        self._analysis = analysis
        self._export = export
        self._counters = counters
        self._stored_blame = stored_blame

    def consume(self, item: LateGroup) -> None:
        """Spans or log records of a released trace: kept with its retained copy; a failed root among
        them has the trace blamed as a late verdict would."""
        group = item.group
        self._retained.add_late(group.trace_id, group.payload, logs=item.logs)
        if item.logs or not group.root_failure:
            return
        self._counters.add("late_root_failures")
        kept = self._retained.get(group.trace_id, time.monotonic())
        if kept is None:
            log.info("trace %s: failed root arrived late; trace no longer retained", group.trace_id.hex())
            return
        decision = TraceDecision(True, group.root_failure, (group.failed_root.hex(),))
        self._analysis.consume_late(retained_trace(kept), decision)

    def submit_verdict(
        self, trace_id: str, outcome: str, expected_output: str | None = None
    ) -> dict[str, Any]:
        try:
            raw_id = bytes.fromhex(trace_id)
        except ValueError:
            raw_id = b""
        if len(raw_id) != 16 or not any(raw_id):
            raise ValueError(f"trace_id must be 32 hex digits, not all zero, got {trace_id!r}")
        self._counters.add("verdicts")
        if outcome == "failure" and self._assembler.mark_failed(raw_id, expected_output):
            return {
                "status": "pending",
                "trace_id": trace_id,
                "detail": "attributed when the trace completes",
            }
        if outcome != "failure" and self._assembler.is_buffered(raw_id):
            return {"status": "recorded", "trace_id": trace_id}
        stored = self._stored_blame(trace_id) if self._stored_blame is not None else None
        if stored is not None:  # attributed already, here or by another replica sharing the store
            if outcome != "failure":
                return {"status": "recorded", "trace_id": trace_id}
            return _answer(trace_id, "already_attributed", stored, None)
        kept = self._retained.get(raw_id, time.monotonic())
        if kept is None:
            raise VerdictNotFound(f"trace {trace_id} is not among the recently completed traces")
        if outcome != "failure":
            return {"status": "recorded", "trace_id": trace_id}
        with kept.lock:
            if kept.attribution is not None:  # no store, or its write is still in flight
                return _answer(trace_id, "already_attributed", kept.attribution, None)
            analysed = self._analysis.analyse_now(
                retained_trace(kept), TraceDecision.verdict(expected_output)
            )
            if analysed.attribution is None:
                analysis = analysed.analysis
                problem = analysis.problem if analysis is not None else "not analysed"
                raise ValueError(f"trace {trace_id} cannot be attributed: {problem}")
            try:
                span_id = self._export.blame_late(analysed, remember=False)
            except (WALFull, WALStorageError, WALClosed) as error:
                raise NotAccepting(str(error)) from None
            kept.attribution = analysed.attribution
        return _answer(trace_id, "attributed", analysed.attribution, span_id)


def retained_trace(retained: RetainedTrace) -> BufferedTrace:
    """A retained (already exported) trace, in the shape the analysis stage takes."""
    now = time.monotonic()
    return BufferedTrace(
        trace_id=retained.trace_id,
        first_seen=now,
        last_seen=now,
        span_payloads=list(retained.span_payloads),
        log_payloads=list(retained.log_payloads),
        has_root=True,
        has_agent=True,
    )


def _answer(trace_id: str, status: str, blame: BlameRecord, span_id: str | None) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "status": status,
        "trace_id": trace_id,
        "agent": blame.agent,
        "step": blame.step,
        "confidence": blame.confidence,
        "reason": blame.reason,
        "method": blame.method,
    }
    if blame.model:
        answer["model"] = blame.model
    if span_id:
        answer["blame_span_id"] = span_id
    return answer
