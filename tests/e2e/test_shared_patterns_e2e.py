"""Two replicas behind the real load-balancing Collector, one shared PostgreSQL: the failure patterns and
their counts are those of one processor that sees every run.

app -> otelcol (collector_config/scaled.yaml, loadbalancing by trace id) -> otel-blame serve x2
(store.url = one PostgreSQL: the failures and the patterns) -> recording sinks; the same requests also
go to a third `otel-blame serve` alone (its own SQLite store). Failed runs of three causes (a tool
failing in one workflow, another in a second workflow, wrong answers the evidence does not decide),
interleaved: every trace's `blame.pattern` is the same on both sides, `/api/patterns` of a replica
(which reads the shared store) answers the patterns and counts of the processor alone, and the
replicas' `otel_blame_failure_patterns_total` add up to its own.
"""

from __future__ import annotations

import json
import random
import re
import urllib.request
from collections import Counter

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame import semconv as sc
from otel_blame.conventions.otlp import sdk_spans_to_proto
from tests.postgres_cluster import empty_store_tables
from tests.processor.spans import failing_search_run, record_agent_run
from tests.support import RecordingOTLPSink

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

RUNS = 36
TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _run(kind: int) -> tuple[bytes, str]:
    """One failed run of cause ``kind``: 0 a calculator that errs, 1 a search API answering 503, 2 a
    wrong answer nothing decides."""
    if kind == 0:
        steps = [("triage", "a refund is asked"), ("researcher", "order found"), ("writer", "refund drafted")]
        spans = record_agent_run(steps, failed=True, tool_after=1, task_name="refund")
    elif kind == 1:
        spans = failing_search_run(503)
    else:
        steps = [
            ("Planner", "Plan: compute 6*7."),
            ("Solver", "The answer is 41."),
            ("Critic", "Looks right."),
        ]
        spans = record_agent_run(steps, failed=True)
    request = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans))
    return request.SerializeToString(), f"{spans[0].context.trace_id:032x}"


def _send(endpoint: str, body: bytes) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        channel.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)(
            body, timeout=30
        )


def _patterns_on_spans(sinks: list[RecordingOTLPSink]) -> dict[str, str]:
    """trace id -> the blame.pattern on its root span."""
    found = {}
    for sink in sinks:
        for recorded in sink.spans():
            if recorded.span.parent_span_id:
                continue
            for attribute in recorded.span.attributes:
                if attribute.key == sc.BLAME_PATTERN:
                    found[recorded.trace_id] = attribute.value.string_value
    return found


def _every_run(sinks: list[RecordingOTLPSink]) -> dict[str, str] | None:
    found = _patterns_on_spans(sinks)
    return found if len(found) == RUNS else None


def _api_patterns(server: BlameServer) -> dict[str, int]:
    url = f"http://127.0.0.1:{server.http_port}/api/patterns?window=1h"
    with urllib.request.urlopen(url, timeout=10) as answer:
        report = json.loads(answer.read())
    return {p["id"]: p["count"] for p in [*report["patterns"], *report["undecided"]]}


def _metric(server: BlameServer) -> Counter[str]:
    status, body = http_get(f"http://127.0.0.1:{server.http_port}/metrics")
    assert status == 200
    counts: Counter[str] = Counter()
    for match in re.finditer(
        rb'^otel_blame_failure_patterns_total\{[^}]*pattern="([^"]+)"[^}]*\} ([0-9.e+]+)', body, re.MULTILINE
    ):
        counts[match.group(1).decode()] += int(float(match.group(2)))
    return counts


def test_two_replicas_on_one_postgres_assign_the_patterns_of_one_that_sees_every_run(
    group: ProcessGroup, tmp_path, postgres_url: str
) -> None:  # noqa: ANN001
    empty_store_tables(postgres_url)
    sinks = [RecordingOTLPSink().start() for _ in range(3)]
    try:
        replicas = [
            BlameServer(
                group,
                f"otel-blame-{i}",
                downstream=sinks[i].endpoint,
                wal_dir=tmp_path / f"wal-{i}",
                extra_env={"OTEL_BLAME_STORE__URL": postgres_url, "OTEL_BLAME_STORE__REPLICA": f"r{i}"},
            )
            for i in range(2)
        ]
        alone = BlameServer(
            group, "otel-blame-alone", downstream=sinks[2].endpoint, wal_dir=tmp_path / "wal-alone"
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
        kinds = [number % 3 for number in range(RUNS)]
        random.Random(7).shuffle(kinds)
        sent = []
        for kind in kinds:
            body, trace_id = _run(kind)
            sent.append(trace_id)
            _send(balancer.otlp_grpc_endpoint, body)
            _send(alone.otlp_grpc_endpoint, body)
        replicated = wait_until(
            lambda: _every_run(sinks[:2]),
            timeout=180,
            what="every run blamed by the replicas",
        )
        single = wait_until(
            lambda: _every_run(sinks[2:]),
            timeout=180,
            what="every run blamed alone",
        )
        shares = [len(_patterns_on_spans([sink])) for sink in sinks[:2]]
        assert min(shares) > 0, f"the Collector sent every run to one replica: {shares}"
        assert replicated == single  # trace by trace, the same pattern
        assert len(set(single.values())) == 3
        expected = dict(Counter(single.values()))
        for replica in replicas:  # each reads the shared store: every run, from both
            wait_until(
                lambda r=replica: _api_patterns(r) == expected or None, timeout=60, what="the shared report"
            )
        assert _api_patterns(alone) == expected
        assert _metric(replicas[0]) + _metric(replicas[1]) == _metric(alone) == Counter(expected)
    finally:
        for sink in sinks:
            sink.stop()
