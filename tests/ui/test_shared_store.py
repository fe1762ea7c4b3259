"""Two `BlameProcessor` replicas (in-process, each with its own WAL directory and ports) sharing one
real PostgreSQL (the session's throwaway cluster), each attributing different traces sent by the
SDK's OTLP exporter: the API, the pages and `otel-blame top` of either replica show every failure,
each replica's /metrics counts what it attributed, and a verdict sent to the other replica is
answered from the shared store."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client.parser import text_string_to_metric_families

from otel_blame import semconv as sc
from otel_blame.cli import main
from otel_blame.commands.serve import load_serve_config, serving_processor
from otel_blame.processor import BlameProcessor
from tests.postgres_cluster import empty_store_tables
from tests.processor.conftest import processor_overrides
from tests.processor.spans import record_agent_run
from tests.support import RecordingOTLPSink
from tests.ui.browser import chromium, off_loopback, requested_urls

TOKEN = "shared-t0ken"
# what each replica is sent: its own service and its own kind of failure
WORKLOAD = {
    "replica-a": (
        "checkout",
        3,
        [
            ("Planner", "Plan: multiply six by seven and report it."),
            ("Researcher", "Looked it up: six times seven is 41, according to my notes."),
            ("Solver", "The answer is 41."),
        ],
    ),
    "replica-b": (
        "search",
        2,
        [
            ("Coder", "result = 6 * 8  # six times seven"),
            ("Executor", "exitcode: 0 (execution succeeded)\nCode output: 48"),
            ("Reporter", "The answer is 48."),
        ],
    ),
}


def _request(base: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(
        base + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _api(base: str, path: str) -> dict:
    status, body = _request(base, path)
    assert status == 200, (path, status, body[:300])
    return json.loads(body)


def _attributions(base: str) -> dict[tuple[str, str], float]:
    """This replica's ``otel_blame_attributions_total`` by (service, agent)."""
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(_request(base, "/metrics")[1].decode()):
        for sample in family.samples:
            if sample.name == "otel_blame_attributions_total":
                key = (sample.labels["service"], sample.labels["agent"])
                out[key] = out.get(key, 0) + sample.value
    return out


def _send(processor: BlameProcessor, service: str, steps: list[tuple[str, str]]) -> tuple[str, int]:
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: service}))
    spans = record_agent_run(steps, failed=True, provider=provider)
    exporter = OTLPSpanExporter(
        endpoint=processor.grpc_endpoint, insecure=True, headers={"authorization": f"Bearer {TOKEN}"}
    )
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()
    provider.shutdown()
    return f"{spans[0].context.trace_id:032x}", len(spans)


def test_two_replicas_on_one_postgres_each_show_every_failure(postgres_url: str, tmp_path: Path) -> None:
    empty_store_tables(postgres_url)
    with RecordingOTLPSink() as sink:
        replicas: dict[str, BlameProcessor] = {}
        try:
            for name in WORKLOAD:
                overrides = processor_overrides(
                    sink.endpoint,
                    tmp_path / name / "wal",
                    receivers={"auth_token": TOKEN},
                    store={"url": postgres_url, "replica": name},
                    alerting={"count_undecided": True},  # every blame counted, decided or not
                )
                replicas[name] = serving_processor(load_serve_config(overrides=overrides, environ={})).start()
            bases = {name: f"http://{processor.http_endpoint}" for name, processor in replicas.items()}
            assert len(set(bases.values())) == 2
            sent: dict[str, str] = {}  # trace id -> the replica that attributed it
            spans = 0
            for name, (service, count, steps) in WORKLOAD.items():
                for _ in range(count):
                    trace_id, n = _send(replicas[name], service, steps)
                    sent[trace_id] = name
                    spans += n
            sink.wait_for_spans(spans, timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if all(_api(base, "/api/failures")["total"] == len(sent) for base in bases.values()):
                    break
                time.sleep(0.2)

            # the exported spans say who was blamed; the shared store says the same to either replica
            blamed = {
                f"{recorded.span.trace_id.hex()}": recorded.span.attributes
                for recorded in sink.spans()
                if any(kv.key == sc.BLAME_CONFIDENCE for kv in recorded.span.attributes)
            }
            assert set(blamed) == set(sent)
            expected_culprits: dict[tuple[str, str], int] = {}
            per_replica: dict[str, dict[tuple[str, str], int]] = {name: {} for name in WORKLOAD}
            for base in bases.values():
                page = _api(base, "/api/failures?limit=50")
                assert page["total"] == len(sent)
                assert {f["trace_id"] for f in page["failures"]} == set(sent)
                for trace_id, name in sent.items():
                    run = _api(base, f"/api/runs/{trace_id}")
                    assert run["service"] == WORKLOAD[name][0]
                    agent = next(kv.value.string_value for kv in blamed[trace_id] if kv.key == sc.BLAME_AGENT)
                    assert run["agent"] == agent
            for trace_id, name in sent.items():
                key = (WORKLOAD[name][0], _api(bases["replica-a"], f"/api/runs/{trace_id}")["agent"])
                expected_culprits[key] = expected_culprits.get(key, 0) + 1
                per_replica[name][key] = per_replica[name].get(key, 0) + 1
            for base in bases.values():
                culprits = _api(base, "/api/culprits?window=1h&undecided=1")
                assert culprits["total"] == len(sent)
                assert {
                    (c["service"], c["agent"]): c["count"] for c in culprits["culprits"]
                } == expected_culprits

            # /metrics: each replica counts what it attributed; summed, what the UI shows
            for name, base in bases.items():
                assert _attributions(base) == per_replica[name]

            # a verdict sent to the replica that did not attribute the trace: answered from the store
            a_trace = next(trace_id for trace_id, name in sent.items() if name == "replica-a")
            status, body = _request(
                bases["replica-b"], "/v1/verdicts", {"trace_id": a_trace, "outcome": "failure"}
            )
            answer = json.loads(body)
            assert status == 200 and answer["status"] == "already_attributed", answer
            assert answer["agent"] == _api(bases["replica-a"], f"/api/runs/{a_trace}")["agent"]

            # `otel-blame top` against either replica: every culprit, every blame
            for base in bases.values():
                result = CliRunner(env={"COLUMNS": "200"}).invoke(
                    main, ["top", "--once", "--all", "--since", "1h", "--endpoint", base, "--token", TOKEN]
                )
                assert result.exit_code == 0, result.output
                assert f"{len(sent)} blames" in result.output
                for service, agent in expected_culprits:
                    assert any(agent in line and service in line for line in result.output.splitlines())

            # the pages of replica B list replica A's failures too, and open them
            with chromium() as browser:
                base = bases["replica-b"]
                browser.get(f"{base}/ui/")
                browser.find_element("id", "token").send_keys(TOKEN)
                browser.find_element("css selector", "form button[type=submit]").click()
                deadline = time.monotonic() + 15
                while "/ui/login" in browser.current_url and time.monotonic() < deadline:
                    time.sleep(0.05)
                links = {
                    link.get_attribute("href").rsplit("/", 1)[-1]
                    for link in browser.find_elements("css selector", "a.agent-link")
                }
                assert links == set(sent)
                browser.get(f"{base}/ui/runs/{a_trace}")
                run = _api(bases["replica-a"], f"/api/runs/{a_trace}")
                # replica A's verdict, as A stored it: its culprit, or its top candidate when undecided
                said = browser.find_element("id", "verdict").text
                assert f"{run['agent']} at step {run['step']}" in " ".join(said.split()), said
                culprit = browser.find_element("id", f"step-{run['step']}")
                assert ("culprit" in culprit.get_attribute("class").split()) is run["decided"]
                assert off_loopback(requested_urls(browser)) == []
        finally:
            for processor in replicas.values():
                processor.stop()
