"""The analysis workers: jobs that wait go to a worker together, each analysed on its own; and the
workers give the CPU to receiving and exporting first (a lower priority)."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame.conventions import sdk_spans_to_proto
from otel_blame.processor import analysis
from otel_blame.processor.analyser import Analysed, AnalysisStage, Handling
from otel_blame.processor.assembler import BufferedTrace
from otel_blame.processor.config import AttributionConfig, DetectionConfig, load_config
from otel_blame.processor.counters import Counters
from otel_blame.processor.decision import TraceDecision
from otel_blame.processor.wal import WriteAheadLog
from otel_blame.redaction import Redactor

from .spans import record_agent_run


class _Collected:
    def __init__(self) -> None:
        self.items: list[Analysed] = []
        self._lock = threading.Lock()

    def consume(self, item: Analysed) -> None:
        with self._lock:
            self.items.append(item)


def _failed_trace(n: int, payload: bytes | None = None) -> BufferedTrace:
    spans = record_agent_run([("planner", f"plan {n}"), ("solver", "41")], failed=True)
    body = payload or ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans)).SerializeToString()
    trace = BufferedTrace(spans[0].context.trace_id.to_bytes(16, "big"), 0.0, 0.0, [body], spans=len(spans))
    trace.has_agent = trace.has_root = True
    trace.decision = TraceDecision(True, "wrong answer")
    return trace


def test_every_job_of_a_round_trip_is_analysed_on_its_own(tmp_path) -> None:  # noqa: ANN001
    config = load_config(
        overrides={
            "attribution": {"workers": 1, "forward_first_backlog": 1000},
            "wal": {"dir": str(tmp_path)},
        },
        environ={},
    )
    out, counters = _Collected(), Counters()
    wal = WriteAheadLog(tmp_path, 1 << 30)
    stage = AnalysisStage(config, out=out, counters=counters, redactor=Redactor(), wal=wal)
    try:
        stage.wait_ready(timeout=60)
        traces = [_failed_trace(n) for n in range(30)]
        broken = _failed_trace(99, payload=b"\xff\xff not a protobuf")
        for trace in [*traces[:15], broken, *traces[15:]]:
            stage.consume(trace)
        assert stage.wait_idle(time.monotonic() + 60)
    finally:
        stage.close()
        wal.close()
    by_trace = {item.trace.trace_id: item for item in out.items}
    assert all(by_trace[t.trace_id].attribution is not None for t in traces)
    assert by_trace[broken.trace_id].handling == Handling.UNCHANGED
    assert counters.snapshot().get("analysis_errors") == 1


def test_a_worker_runs_at_the_configured_lower_priority() -> None:
    config = AttributionConfig(worker_niceness=7)
    with ProcessPoolExecutor(
        1, initializer=analysis.start_worker, initargs=(config, DetectionConfig(), None, os.getpid())
    ) as pool:
        worker_nice = pool.submit(os.nice, 0).result(timeout=60)
    assert worker_nice == min(19, os.nice(0) + 7)
