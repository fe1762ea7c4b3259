"""A blame is on disk before its trace's blamed spans leave: ``serve`` killed (SIGKILL) just after
blamed spans reached downstream has every one of those blames in its blame store.

Once blamed spans are delivered, their write-ahead log rows are deleted, so nothing would bring a
blame back that was not kept by then. The store's writes are made slow in the child process (a
test double), which holds the window between the two wide open if the order were the other way.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.store import StoreConfig, open_store
from otel_blame.store.outbox import FILE_NAME as OUTBOX_FILE
from otel_blame.store.outbox import BlameOutbox
from tests.support import RecordingOTLPSink

from .spans import record_agent_run

TRACES = 12


def _blamed_traces(sink: RecordingOTLPSink) -> set[str]:
    """Traces whose spans arrived carrying a blame (the root's ``blame.agent``)."""
    return {
        recorded.trace_id
        for recorded in sink.spans()
        if any(attribute.key == sc.BLAME_AGENT for attribute in recorded.span.attributes)
    }


def test_blamed_spans_downstream_mean_the_blame_is_kept_even_after_sigkill(tmp_path: Path) -> None:
    wal_dir = tmp_path / "wal"
    traces = [
        record_agent_run([("planner", f"plan {n}"), ("solver", "41")], failed=True) for n in range(TRACES)
    ]
    with RecordingOTLPSink() as sink:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.processor.slow_store_serve", str(wal_dir), sink.endpoint],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[2],
        )
        try:
            assert child.stdout is not None
            endpoint = json.loads(child.stdout.readline())["grpc"]
            exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=10)
            for trace in traces:
                assert exporter.export(trace) == SpanExportResult.SUCCESS
            exporter.shutdown()
            deadline = time.monotonic() + 60
            while not _blamed_traces(sink) and time.monotonic() < deadline:
                time.sleep(0.01)
            child.send_signal(signal.SIGKILL)  # as soon as the first blamed spans are downstream
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)
        delivered = _blamed_traces(sink)
    assert delivered, "no blamed spans reached downstream within 60 s"
    store = open_store(StoreConfig(), wal_dir=wal_dir)
    outbox = BlameOutbox(wal_dir / OUTBOX_FILE, 1 << 20)
    try:
        kept = {run.trace_id for run in store.failures(limit=100).failures}
        kept |= {run.trace_id for _, run in outbox.oldest(limit=100)}
    finally:
        outbox.close()
        store.close()
    assert delivered <= kept, f"blamed downstream but not kept: {sorted(delivered - kept)}"
