"""Nothing acknowledged is lost: SIGKILL under load and restart, a 30 s downstream outage, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.ports import reserve_port
from tests.support import RecordingOTLPSink

from .spans import record_agent_run


def _serve(grpc_port: int, downstream: str, wal: Path, *extra: str) -> tuple[subprocess.Popen, dict]:
    command = [
        sys.executable, "-m", "otel_blame.cli", "serve",
        "--grpc-endpoint", f"127.0.0.1:{grpc_port}", "--http-endpoint", "127.0.0.1:0",
        "--downstream", downstream, "--wal-dir", str(wal), *extra,
    ]  # fmt: skip
    env = {
        **os.environ,
        "OTEL_BLAME_EXPORTER__MAX_BACKOFF": "0.5",
        "OTEL_BLAME_EXPORTER__INITIAL_BACKOFF": "0.05",
    }
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.kill()
        raise AssertionError(f"serve did not start: {process.stderr.read() if process.stderr else ''}")
    return process, json.loads(line)


def _span_ids(spans) -> set[bytes]:  # noqa: ANN001
    return {span.context.span_id.to_bytes(8, "big") for span in spans}


@pytest.mark.slow
def test_sigkill_under_load_then_restart_loses_nothing(tmp_path: Path) -> None:
    traces = [record_agent_run([("A", f"step {n}"), ("B", "answer")], failed=n % 5 == 0) for n in range(2000)]
    port = reserve_port()
    acked: set[bytes] = set()
    with RecordingOTLPSink() as sink:
        process, _ = _serve(port, sink.endpoint, tmp_path / "wal", "--quiet-period", "0.5")
        stop = threading.Event()

        def load() -> None:
            exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=2)
            for start in range(0, len(traces), 8):
                if stop.is_set():
                    break
                batch = [span for trace in traces[start : start + 8] for span in trace]
                if exporter.export(batch) == SpanExportResult.SUCCESS:
                    acked.update(_span_ids(batch))
                time.sleep(0.01)
            exporter.shutdown()

        sender = threading.Thread(target=load)
        sender.start()
        time.sleep(1.5)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        stop.set()
        sender.join(30)
        assert acked, "nothing was acknowledged before the kill"
        restarted, ready = _serve(port, sink.endpoint, tmp_path / "wal", "--quiet-period", "0.5")
        try:
            with urllib.request.urlopen(f"http://{ready['http']}/metrics", timeout=10) as response:
                metrics = response.read().decode()
            replayed = next(
                line for line in metrics.splitlines() if line.startswith("otel_blame_processor_replayed_rows")
            )
            assert float(replayed.split()[-1]) > 0  # the kill left acknowledged requests in the log
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                arrived = {recorded.span.span_id for recorded in sink.spans()}
                if acked <= arrived:
                    break
                time.sleep(0.2)
            missing = acked - {recorded.span.span_id for recorded in sink.spans()}
            assert not missing, f"{len(missing)} of {len(acked)} acknowledged spans lost"
        finally:
            restarted.send_signal(signal.SIGTERM)
            restarted.wait(20)
    assert restarted.returncode == 0


@pytest.mark.slow
def test_sigterm_flushes_buffered_traces(tmp_path: Path) -> None:
    spans = record_agent_run([("A", "a"), ("B", "b")], failed=True)
    with RecordingOTLPSink() as sink:
        process, ready = _serve(reserve_port(), sink.endpoint, tmp_path / "wal", "--quiet-period", "60")
        exporter = OTLPSpanExporter(endpoint=ready["grpc"], insecure=True)
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        exporter.shutdown()
        time.sleep(0.3)
        assert sink.span_count() == 0  # still waiting for its quiet period
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
        assert json.loads(out.strip().splitlines()[-1]) == {"event": "stopped", "all_delivered": True}
        assert sink.span_count() == len(spans)


@pytest.mark.slow
def test_downstream_outage_of_30_seconds_loses_nothing(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(exporter={"max_backoff": 2.0})
    sink.set_available(False)
    sent: set[bytes] = set()
    exporter = OTLPSpanExporter(endpoint=processor.grpc_endpoint, insecure=True)
    started = time.monotonic()
    n = 0
    while time.monotonic() - started < 30:
        spans = record_agent_run([("A", f"{n}"), ("B", "x")], failed=n % 3 == 0)
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        sent.update(_span_ids(spans))
        n += 1
        time.sleep(0.25)
    exporter.shutdown()
    assert sink.span_count() == 0 and sink.refused > 0
    assert processor.stats()["wal_pending_rows"] > 0
    sink.set_available(True)
    arrived = sink.wait_for_spans(len(sent), timeout=30)
    assert {recorded.span.span_id for recorded in arrived} == sent
    deadline = time.monotonic() + 5
    while processor.stats()["wal_pending_rows"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processor.stats()["wal_pending_rows"] == 0


def _children(pid: int) -> set[int]:
    """Every process below ``pid`` (from /proc: the analysis workers hang off the fork server)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_analysis_workers_end_with_a_sigkilled_processor(tmp_path: Path) -> None:
    with RecordingOTLPSink() as sink:
        process, _ready = _serve(reserve_port(), sink.endpoint, tmp_path / "wal")
        below = _children(process.pid)
        assert len(below) >= 2  # the fork server and its workers (one a core)
        process.kill()
        process.wait(10)
        deadline = time.monotonic() + 15  # a worker checks on the processor every second
        while any(_alive(pid) for pid in below) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in below if _alive(pid)]
