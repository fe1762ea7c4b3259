"""Blames survive an outage of the shared store and a restart of the processor in between.

Real PostgreSQL (Debian's server, stopped and started by the test) and a real processor: the store
goes down, failed traces arrive and are blamed, the processor restarts while the store is still
down, the store comes back, and then every blame is in the store exactly once and counted once on
the replica's culprit counters.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame.commands.serve import load_serve_config, serving_processor
from otel_blame.conventions import sdk_spans_to_proto
from otel_blame.store import StoreConfig, open_store
from otel_blame.store.outbox import FILE_NAME as OUTBOX_FILE
from tests.postgres_cluster import PostgresCluster
from tests.processor.spans import record_agent_run
from tests.support import RecordingOTLPSink

pytest.importorskip("psycopg")

BLAMES = 6


@pytest.fixture
def cluster() -> Iterator[PostgresCluster]:
    own = PostgresCluster()
    own.start()
    try:
        yield own
    finally:
        own.remove()


def _wait_for(condition: Callable[[], bool], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def _failed_trace(n: int) -> tuple[bytes, str]:
    spans = record_agent_run([("planner", f"plan {n}"), ("solver", f"the answer is {n}")], failed=True)
    request = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans))
    return request.SerializeToString(), f"{spans[0].context.trace_id:032x}"


def _waiting(wal_dir: Path) -> int:
    with contextlib.closing(sqlite3.connect(wal_dir / OUTBOX_FILE)) as db:
        return int(db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])


def test_blames_wait_through_a_store_outage_and_a_restart(cluster: PostgresCluster, tmp_path: Path) -> None:
    wal_dir = tmp_path / "wal"
    with RecordingOTLPSink() as sink:
        overrides = {
            "receivers": {"grpc_endpoint": None, "http_endpoint": None},
            "wal": {"dir": str(wal_dir)},
            "assembly": {"quiet_period": 0.1, "max_wait": 5.0},
            "exporter": {"endpoint": sink.endpoint, "initial_backoff": 0.05, "max_backoff": 0.5},
            "store": {"url": cluster.url, "replica": "replica-0"},
            "alerting": {"count_undecided": True},  # every blame counts: this is about durability
            "shutdown_timeout": 5.0,
        }
        config = load_serve_config(overrides=overrides, environ={})
        first = serving_processor(config).start()  # the store is up: the tables are created
        cluster.stop()
        sent: set[str] = set()
        try:
            for n in range(BLAMES):
                body, trace_id = _failed_trace(n)
                first.accept_traces(body)
                sent.add(trace_id)
            assert _wait_for(lambda: first.stats()["attributed_traces"] == BLAMES, 60)
            assert _wait_for(lambda: _waiting(wal_dir) == BLAMES, 60)  # on disk, not in memory
        finally:
            assert first.stop(timeout=30) is True  # every span delivered; the blames wait apart

        # the store is still down
        second = serving_processor(load_serve_config(overrides=overrides, environ={})).start()
        try:
            cluster.start()
            store = open_store(StoreConfig(url=cluster.url))
            try:
                assert _wait_for(lambda: store.count() == BLAMES), (
                    f"{store.count()} of {BLAMES} blames stored"
                )
                assert {failure.trace_id for failure in store.failures(limit=100).failures} == sent
                assert sum(series.blames for series in store.blame_counters("replica-0")) == BLAMES
                assert _waiting(wal_dir) == 0
            finally:
                store.close()
        finally:
            second.stop(timeout=10)
