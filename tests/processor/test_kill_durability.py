"""The two corners of durability a SIGKILL used to find:

- a failed trace forwarded before its analysis (forward first) kept its blame only in memory: the
  spans were delivered, their log rows deleted, and a kill before the analysis finished lost the
  blame for good. Its analysis job is durable now, and analysed after the restart.
- a blame kept in the store whose trace was not delivered yet (the downstream was down) was blamed
  again when the log was replayed: written and counted twice. A replayed verdict is recognised by
  its trace id and written once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.store import StoreConfig, open_store
from tests.support import RecordingOTLPSink, Reply, ScriptedLLM

from .spans import record_agent_run

WAL_FILE = "otel-blame-wal.sqlite"


def _serve(wal: Path, downstream: str, **env: str) -> subprocess.Popen:
    """``otel-blame serve`` in a child process (so it can be SIGKILLed), configured by environment."""
    environment = {
        **os.environ,
        "OTEL_BLAME_EXPORTER__MAX_BACKOFF": "0.5",
        "OTEL_BLAME_EXPORTER__INITIAL_BACKOFF": "0.05",
        "OTEL_BLAME_ASSEMBLY__QUIET_PERIOD": "0.2",
        **env,
    }
    command = [
        sys.executable, "-m", "otel_blame.cli", "serve", "--grpc-endpoint", "127.0.0.1:0",
        "--http-endpoint", "127.0.0.1:0", "--downstream", downstream, "--wal-dir", str(wal),
    ]  # fmt: skip
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=environment
    )


def _endpoint(process: subprocess.Popen) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, "serve did not start"
    return json.loads(line)["grpc"]


def _send(endpoint: str, traces: list) -> None:  # noqa: ANN001
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=10)
    try:
        for spans in traces:
            assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.05)


def _kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(10)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _log_rows(wal: Path, kind: str) -> int:
    """Rows of a kind in every log under the directory (the processor's, its receiving processes')."""
    rows = 0
    for path in wal.glob(f"**/{WAL_FILE}"):
        with contextlib.closing(sqlite3.connect(path)) as log:
            rows += int(log.execute("SELECT COUNT(*) FROM requests WHERE kind = ?", (kind,)).fetchone()[0])
    return rows


def _failed_runs(count: int) -> tuple[list[list[ReadableSpan]], set[str]]:
    """``count`` failed runs (the Solver's wrong answer) and their trace ids."""
    traces = [
        record_agent_run(
            [("Planner", f"Plan {n}: compute 6*7."), ("Solver", "The answer is 41.")], failed=True
        )
        for n in range(count)
    ]
    return traces, {f"{trace[0].context.trace_id:032x}" for trace in traces}


def _late_blames(sink: RecordingOTLPSink) -> set[str]:
    return {
        recorded.trace_id
        for recorded in sink.spans()
        if recorded.span.name.startswith(sc.late_blame_span_name(""))
    }


def _blamed_roots(sink: RecordingOTLPSink) -> set[str]:
    return {
        recorded.trace_id
        for recorded in sink.spans()
        if not recorded.span.parent_span_id
        and any(attribute.key == sc.BLAME_AGENT for attribute in recorded.span.attributes)
    }


def test_a_trace_forwarded_before_its_analysis_is_blamed_after_a_sigkill(tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    traces, trace_ids = _failed_runs(3)
    stalled = ScriptedLLM(lambda request: Reply(content="", delay_seconds=120))  # the analysis never ends
    with RecordingOTLPSink() as sink, stalled:
        process = _serve(
            wal,
            sink.endpoint,
            OTEL_BLAME_ATTRIBUTION__METHOD="all_at_once",
            OTEL_BLAME_ATTRIBUTION__LLM__BASE_URL=stalled.base_url,
            OTEL_BLAME_ATTRIBUTION__LLM__API_KEY="scripted",
            OTEL_BLAME_ATTRIBUTION__FORWARD_FIRST_BACKLOG="0",  # every failed trace goes on first
        )
        try:
            _send(_endpoint(process), traces)
            _until(lambda: {r.trace_id for r in sink.spans()} >= trace_ids, 30, "the traces forwarded")
            # delivered: the log lets go of the received requests; what is left must bring the blame back
            _until(lambda: _log_rows(wal, "traces") == 0, 10, "the delivered requests leave the log")
            _until(lambda: stalled.calls >= 1, 30, "the analysis under way")  # and never done
            assert not _late_blames(sink)
        finally:
            _kill(process)
        restarted = _serve(wal, sink.endpoint)  # the default method, heuristic, answers at once
        try:
            _endpoint(restarted)
            _until(lambda: _late_blames(sink) >= trace_ids, 30, "a late blame span for each trace")
        finally:
            _stop(restarted)
    blame_spans = [r for r in sink.spans() if r.span.name.startswith(sc.late_blame_span_name(""))]
    assert sorted(r.span.name for r in blame_spans) == [sc.late_blame_span_name("Solver")] * len(traces)
    store = open_store(StoreConfig(), wal_dir=wal)
    try:
        assert {run.trace_id for run in store.failures(limit=100).failures} == trace_ids
    finally:
        store.close()


def test_a_blame_replayed_after_a_sigkill_is_written_once(tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    traces, trace_ids = _failed_runs(4)
    counting = {"OTEL_BLAME_ALERTING__COUNT_UNDECIDED": "true"}  # every blame on the culprit counters
    with RecordingOTLPSink() as sink:
        sink.set_available(False)  # the downstream is down: the blamed traces wait in the log
        process = _serve(wal, sink.endpoint, **counting)
        try:
            _send(_endpoint(process), traces)
            store = open_store(StoreConfig(), wal_dir=wal)
            try:
                _until(lambda: store.count() == len(traces), 30, "the blames kept in the store")
            finally:
                store.close()
        finally:
            _kill(process)
        sink.set_available(True)
        restarted = _serve(wal, sink.endpoint, **counting)
        try:
            _endpoint(restarted)
            _until(lambda: _blamed_roots(sink) >= trace_ids, 30, "the replayed traces delivered, blamed")
        finally:
            _stop(restarted)
    assert restarted.returncode == 0
    store = open_store(StoreConfig(), wal_dir=wal)
    try:
        assert {run.trace_id for run in store.failures(limit=100).failures} == trace_ids
        counted = sum(series.blames for series in store.blame_counters(StoreConfig().replica_name()))
    finally:
        store.close()
    assert counted == len(traces)  # each blame counted once, not again for its replay
