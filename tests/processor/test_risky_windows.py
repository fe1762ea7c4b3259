"""Durability where one request holds several traces that finish at different times.

A SIGKILL under load rarely lands between the delivery of one trace of a request and the next: all
traces of a batch usually complete together. Here the window is opened on purpose: one request
carries a finished trace A and the children of a trace B whose root has not come yet. A is
delivered; B waits for its root. The processor is killed in that window, and the log is read at
the SQLite level: the acknowledged request must still be there until B too is delivered.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame.conventions import sdk_spans_to_proto
from otel_blame.processor.wal import KIND_TRACES, WriteAheadLog
from tests.ports import reserve_port
from tests.support import RecordingOTLPSink

from .spans import record_agent_run
from .test_durability import _serve

TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _rows(wal_dir: Path, kind: str | None = None) -> int:
    """Rows in every log under the directory (the processor's, and its receiving processes'); only those
    of ``kind`` when given. A failed trace forwarded before its analysis also keeps a row of its own
    (``analysis``, the job) until its blame is kept: how long that takes is the machine's business, so
    the received request is counted by its kind."""
    rows = 0
    where, values = (" WHERE kind = ?", (kind,)) if kind else ("", ())
    for path in wal_dir.glob("**/otel-blame-wal.sqlite"):
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            rows += int(db.execute("SELECT COUNT(*) FROM requests" + where, values).fetchone()[0])
    return rows


def _export(endpoint: str, spans) -> None:  # noqa: ANN001
    body = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans)).SerializeToString()
    with grpc.insecure_channel(endpoint) as channel:
        channel.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)(
            body, timeout=30
        )


def _ids(spans) -> set[bytes]:  # noqa: ANN001
    return {s.context.span_id.to_bytes(8, "big") for s in spans}


def _wait(condition, seconds: float = 30) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not condition():
        time.sleep(0.05)
    return condition()


def test_a_row_outlives_the_delivery_of_its_first_trace(tmp_path: Path) -> None:
    """Unit level: two parts, one released -> the row is still on disk; both -> gone."""
    wal = WriteAheadLog(tmp_path / "wal", max_bytes=1 << 20)
    try:
        row = wal.append(KIND_TRACES, b"two traces", parts=2)
        wal.release([row])
        wal.append(KIND_TRACES, b"a later request", parts=1)  # the writer has handled the release
        assert _rows(tmp_path / "wal") == 2
        wal.release([row])
        assert _wait(lambda: _rows(tmp_path / "wal") == 1)
    finally:
        wal.close()


@pytest.mark.slow
def test_kill_between_the_traces_of_one_request_loses_nothing(tmp_path: Path) -> None:
    finished = record_agent_run([("A", "a"), ("B", "41")], failed=True)
    waiting = record_agent_run([("C", "c"), ("D", "d")], failed=False)
    waiting_root = [s for s in waiting if s.parent is None]
    waiting_children = [s for s in waiting if s.parent is not None]
    wal_dir = tmp_path / "wal"
    port = reserve_port()
    with RecordingOTLPSink() as sink:
        process, ready = _serve(port, sink.endpoint, wal_dir, "--quiet-period", "0.2")
        try:
            _export(ready["grpc"], finished + waiting_children)  # ONE request, two traces
            assert _wait(lambda: _ids(finished) <= {r.span.span_id for r in sink.spans()})
            # the window: the first trace is delivered, the second waits for its root
            assert not _ids(waiting_children) & {r.span.span_id for r in sink.spans()}
            request_rows = _rows(wal_dir, KIND_TRACES)
            assert request_rows == 1, "the request was deleted before all of its traces were delivered"
        finally:
            process.kill()
            process.wait(10)
        assert _rows(wal_dir, KIND_TRACES) == 1
        sink.clear()
        restarted, ready = _serve(port, sink.endpoint, wal_dir, "--quiet-period", "0.2")
        try:
            _export(ready["grpc"], waiting_root)  # the root arrives: the trace completes
            assert _wait(lambda: _ids(waiting) <= {r.span.span_id for r in sink.spans()})
            assert _wait(lambda: _rows(wal_dir) == 0)
        finally:
            restarted.terminate()
            restarted.wait(20)
    assert restarted.returncode == 0
