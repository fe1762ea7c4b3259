"""Two replicas behind the real load-balancing Collector, one shared PostgreSQL: the cross-run
suspiciousness written on each blamed trace is the one a single processor that sees every run
writes.

app -> otelcol (collector_config/scaled.yaml, loadbalancing by trace id) -> otel-blame serve x2
(store.url = one PostgreSQL: the failures and the cross-run counts) -> recording sinks; the same
requests also go to a third `otel-blame serve` alone (SQLite statistics, every run). A history of
passing and failing runs first, then failed probe runs one at a time; each probe's
`blame.cross_run.suspiciousness` must be the same on both sides.
"""

from __future__ import annotations

import random
import re

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame import semconv as sc
from otel_blame.conventions import sdk_spans_to_proto
from tests.postgres_cluster import empty_store_tables
from tests.processor.spans import record_agent_run
from tests.support import RecordedSpan, RecordingOTLPSink

from .harness import (
    COLLECTOR_BIN,
    COLLECTOR_CONFIG_DIR,
    BlameServer,
    Collector,
    ProcessGroup,
    http_get,
    missing_binary_reason,
    wait_until,
)

_missing = missing_binary_reason(COLLECTOR_BIN)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(_missing is not None, reason=str(_missing)),
]
pytest.importorskip("psycopg")

HISTORY = 60
PROBES = 12
TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _request(faulty: bool, failed: bool) -> tuple[bytes, str]:
    """One refund run: in the faulty ones the researcher's calculator call errs."""
    steps = [("triage", "a refund is asked"), ("researcher", "order found"), ("writer", "refund drafted")]
    spans = record_agent_run(steps, failed=failed, tool_after=1 if faulty else None)
    request = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans))
    return request.SerializeToString(), f"{spans[0].context.trace_id:032x}"


def _send(endpoint: str, body: bytes) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        channel.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)(
            body, timeout=30
        )


def _observed(server: BlameServer) -> int:
    status, body = http_get(f"http://127.0.0.1:{server.http_port}/metrics")
    assert status == 200
    match = re.search(rb"^otel_blame_processor_cross_run_observed_runs_total (\d+)", body, flags=re.MULTILINE)
    return int(match.group(1)) if match else 0


def _attrs(recorded: RecordedSpan) -> dict:
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in recorded.span.attributes}


def _suspiciousness(sinks: list[RecordingOTLPSink], trace_id: str) -> float | None:
    for sink in sinks:
        for recorded in sink.spans():
            if recorded.trace_id == trace_id and _attrs(recorded).get(sc.BLAME_CULPRIT) is True:
                return float(_attrs(recorded).get(sc.BLAME_CROSS_RUN_SUSPICIOUSNESS, 0.0))
    return None


@pytest.mark.parametrize("shared", [True, False], ids=["postgres", "sqlite-per-replica"])
def test_two_replicas_on_one_postgres_write_the_suspiciousness_of_one_that_sees_every_run(
    group: ProcessGroup, tmp_path, postgres_url: str, shared: bool
) -> None:  # noqa: ANN001
    """With the shared store: equal on every probe. Without (each replica's own SQLite, the default):
    each replica counts its share only, and the suspiciousness differs."""
    empty_store_tables(postgres_url)
    store = {"OTEL_BLAME_STORE__URL": postgres_url} if shared else {}
    sinks = [RecordingOTLPSink().start() for _ in range(3)]
    counting = {  # on (off by default), and count every success, also under load
        "OTEL_BLAME_CROSS_RUN__ENABLED": "true",
        "OTEL_BLAME_CROSS_RUN__SUCCESS_BACKLOG": "100000",
    }
    try:
        replicas = [
            BlameServer(
                group,
                f"otel-blame-{i}",
                downstream=sinks[i].endpoint,
                wal_dir=tmp_path / f"wal-{i}",
                extra_env={
                    **counting,
                    **store,
                    "OTEL_BLAME_STORE__REPLICA": f"r{i}",
                },
            )
            for i in range(2)
        ]
        alone = BlameServer(
            group,
            "otel-blame-alone",
            downstream=sinks[2].endpoint,
            wal_dir=tmp_path / "wal-alone",
            extra_env=counting,
        )
        balancer = Collector(
            group,
            COLLECTOR_CONFIG_DIR / "scaled.yaml",
            "otelcol-loadbalancer",
            {
                "OTEL_BLAME_REPLICA_0": replicas[0].otlp_grpc_endpoint,
                "OTEL_BLAME_REPLICA_1": replicas[1].otlp_grpc_endpoint,
            },
        )
        rng = random.Random(11)
        for _ in range(HISTORY):
            faulty = rng.random() < 0.4
            body, _trace_id = _request(faulty, failed=rng.random() < (0.9 if faulty else 0.1))
            _send(balancer.otlp_grpc_endpoint, body)
            _send(alone.otlp_grpc_endpoint, body)
        wait_until(lambda: _observed(alone) == HISTORY or None, timeout=120, what="history counted alone")
        wait_until(
            lambda: sum(_observed(r) for r in replicas) == HISTORY or None,
            timeout=120,
            what="history counted",
        )
        shares = [_observed(r) for r in replicas]
        assert min(shares) > 0, f"the Collector sent every run to one replica: {shares}"

        compared: list[tuple[float, float]] = []
        for probe in range(PROBES):
            body, trace_id = _request(faulty=probe % 3 != 0, failed=True)
            _send(balancer.otlp_grpc_endpoint, body)
            _send(alone.otlp_grpc_endpoint, body)
            replicated = wait_until(
                lambda trace_id=trace_id: _suspiciousness(sinks[:2], trace_id),
                timeout=60,
                what=f"probe {probe} blamed (replicas)",
            )
            single = wait_until(
                lambda trace_id=trace_id: _suspiciousness(sinks[2:], trace_id),
                timeout=60,
                what=f"probe {probe} blamed (alone)",
            )
            compared.append((replicated, single))
            total = HISTORY + probe + 1  # the probe is counted after it is blamed: wait before the next
            wait_until(
                lambda total=total: _observed(alone) == total or None, timeout=60, what="probe counted alone"
            )
            wait_until(
                lambda total=total: sum(_observed(r) for r in replicas) == total or None,
                timeout=60,
                what="probe counted",
            )
        print(f"shared={shared}: history shares {shares}; (replicas, alone) per probe: {compared}")
        assert any(single > 0 for _replicated, single in compared), "the evidence never applied"
        if shared:
            for replicated, single in compared:
                assert replicated == pytest.approx(single, abs=1e-9)
        else:
            assert any(replicated != pytest.approx(single, abs=1e-6) for replicated, single in compared)
    finally:
        for sink in sinks:
            sink.stop()
