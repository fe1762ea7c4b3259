"""Receiving processes: several processes take OTLP/gRPC on one port, each into its own log, and every
trace still reaches the one assembler whole, whichever process received which of its spans."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame import semconv as sc
from otel_blame.conventions import attributes_to_dict, sdk_spans_to_proto
from otel_blame.processor.shards import row_ref, shard_of

from .spans import record_agent_run

TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
CONNECTIONS = 16  # all on one process by chance: 2 in 2**16


def _send(channel: grpc.Channel, spans) -> None:  # noqa: ANN001
    body = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans)).SerializeToString()
    channel.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)(body, timeout=30)


def _rows_ever_stored(log: Path) -> int:
    with contextlib.closing(sqlite3.connect(log)) as db:
        found = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'requests'").fetchone()
    return int(found[0]) if found else 0


def test_row_refs_name_the_log_and_the_row() -> None:
    assert shard_of(row_ref(0, 12345)) == (0, 12345)
    assert shard_of(row_ref(3, 2**39 + 7)) == (3, 2**39 + 7)


def test_a_trace_whose_spans_two_processes_received_is_assembled_once(sink, make_processor, tmp_path) -> None:  # noqa: ANN001
    processor = make_processor(receivers={"grpc_processes": 2})
    traces = [
        record_agent_run(
            [("Planner", f"plan {n}"), ("Coder", "code"), ("Solver", "The answer is 41.")], failed=n % 2 == 0
        )
        for n in range(16)
    ]
    channels = [  # a connection each: the kernel spreads connections over the processes
        grpc.insecure_channel(processor.grpc_endpoint, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(CONNECTIONS)
    ]
    try:
        for n, spans in enumerate(traces):  # each trace's children on one connection, its root on another
            _send(channels[n % CONNECTIONS], spans[:-1])
            _send(channels[(n + 1) % CONNECTIONS], spans[-1:])
    finally:
        for channel in channels:
            channel.close()
    expected = sum(len(spans) for spans in traces)
    arrived = sink.wait_for_spans(expected, timeout=30)
    assert len(arrived) == expected  # each span once
    roots = {r.trace_id: attributes_to_dict(r.span.attributes) for r in arrived if not r.span.parent_span_id}
    failed = {f"{spans[0].context.trace_id:032x}" for n, spans in enumerate(traces) if n % 2 == 0}
    assert {trace for trace, attributes in roots.items() if sc.BLAME_AGENT in attributes} == failed
    for record in arrived:  # the blame reached the spans the other process received: one trace, one verdict
        if record.trace_id in failed and record.span.parent_span_id:
            assert sc.BLAME_SCORE in attributes_to_dict(record.span.attributes)
    logs = sorted((tmp_path / "wal").glob("grpc-*/otel-blame-wal.sqlite"))
    assert len(logs) == 2 and all(_rows_ever_stored(log) > 0 for log in logs)  # both received
    assert processor.stats()["received_spans"] == expected
    assert processor.stop(timeout=10)  # every log emptied: each release went back to its process
