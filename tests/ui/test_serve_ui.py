"""The UI inside `otel-blame serve`: real OTLP from the SDK's exporter into an in-process processor,
the attribution kept in the store, shown on the processor's HTTP port under /ui/ in Chromium."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client.parser import text_string_to_metric_families

from otel_blame.commands.serve import load_serve_config, serving_processor
from otel_blame.conventions import attributes_to_dict
from otel_blame.processor import BlameProcessor
from tests.processor.conftest import processor_overrides
from tests.processor.spans import record_agent_run
from tests.support import RecordingOTLPSink
from tests.ui.browser import chromium, off_loopback, requested_urls

TOKEN = "serve-t0ken"
STEPS = [
    ("Planner", "Plan: multiply six by seven and report it."),
    ("Researcher", "Looked it up: six times seven is 41, according to my notes."),
    ("Solver", "The answer is 41."),
]


def _get(base: str, path: str, token: str | None = TOKEN) -> tuple[int, bytes]:
    request = urllib.request.Request(
        base + path, headers={"Authorization": f"Bearer {token}"} if token else {}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _start(sink: RecordingOTLPSink, wal: Path, **sections: dict) -> BlameProcessor:
    overrides = processor_overrides(sink.endpoint, wal, receivers={"auth_token": TOKEN}, **sections)
    return serving_processor(load_serve_config(overrides=overrides, environ={})).start()


def _attributions(base: str) -> dict[tuple[str, str], float]:
    """``otel_blame_attributions_total`` by (service, agent), scraped from /metrics."""
    return {
        (sample.labels["service"], sample.labels["agent"]): sample.value
        for family in text_string_to_metric_families(_get(base, "/metrics", token=None)[1].decode())
        if family.name == "otel_blame_attributions"
        for sample in family.samples
        if sample.name == "otel_blame_attributions_total"
    }


def _post_verdict(base: str, trace_id: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        base + "/v1/verdicts",
        data=json.dumps({"trace_id": trace_id, "outcome": "failure"}).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _send_failed_run(processor: BlameProcessor, sink: RecordingOTLPSink) -> str:
    spans = record_agent_run(STEPS, failed=True)
    exporter = OTLPSpanExporter(
        endpoint=processor.grpc_endpoint, insecure=True, headers={"authorization": f"Bearer {TOKEN}"}
    )
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()
    sink.wait_for_spans(len(spans), timeout=15)
    return f"{spans[0].context.trace_id:032x}"


def _wait_for_run(base: str, trace_id: str) -> dict:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        status, body = _get(base, f"/api/runs/{trace_id}")
        if status == 200:
            return json.loads(body)
        time.sleep(0.1)
    raise AssertionError(f"trace {trace_id} never reached the blame store")


@pytest.fixture
def sink():  # noqa: ANN201
    with RecordingOTLPSink() as recording:
        yield recording


def test_serve_stores_the_blame_and_shows_it_under_ui(sink: RecordingOTLPSink, tmp_path: Path) -> None:
    jaeger = "http://127.0.0.1:16686/trace/{trace_id}"
    # every verdict counted, decided or not, so the culprits page and the metric have a blame to agree on
    processor = _start(
        sink, tmp_path / "wal", ui={"jaeger_url_template": jaeger}, alerting={"count_undecided": True}
    )
    base = f"http://{processor.http_endpoint}"
    try:
        trace_id = _send_failed_run(processor, sink)
        run = _wait_for_run(base, trace_id)
        assert run["service"] == "agents-under-test" and run["outcome"] == "failure"
        assert [s["agent"] for s in run["trajectory"]["steps"]] == [agent for agent, _ in STEPS]
        # the blame on the exported spans is the stored blame
        root = next(
            attrs
            for attrs in (attributes_to_dict(recorded.span.attributes) for recorded in sink.spans())
            if "blame.confidence" in attrs
        )
        assert (root["blame.agent"], root["blame.step"]) == (run["agent"], run["step"])
        # the API needs the processor's token; the pages redirect to the sign-in
        assert _get(base, "/api/failures", token=None)[0] == 401
        assert json.loads(_get(base, "/api/failures")[1])["failures"][0]["trace_id"] == trace_id
        # the culprits page counts what the Prometheus metric counts
        culprits = json.loads(_get(base, "/api/culprits?window=1h")[1])
        metric = _attributions(base)
        assert (
            {(c["service"], c["agent"]): c["count"] for c in culprits["culprits"]}
            == metric
            == {(run["service"], run["agent"]): 1}
        )
        with chromium() as browser:
            browser.get(f"{base}/ui/runs/{trace_id}")
            assert "/ui/login" in browser.current_url
            browser.find_element("id", "token").send_keys(TOKEN)
            browser.find_element("css selector", "form button[type=submit]").click()
            deadline = time.monotonic() + 15
            while "/ui/runs/" not in browser.current_url and time.monotonic() < deadline:
                time.sleep(0.05)
            culprit = browser.find_element("id", f"step-{run['step']}")
            assert culprit.get_attribute("data-agent") == run["agent"]
            if run["decided"]:
                assert browser.find_element("id", "culprit-agent").text == run["agent"]
                assert "culprit" in culprit.get_attribute("class").split()
            else:  # the evidence did not decide: its top candidate, named first
                said = browser.find_element("id", "undecided").text
                assert said.startswith(f"Undecided: {run['agent']} at step {run['step']}"), said
            link = browser.find_element("partial link text", "Open in Jaeger").get_attribute("href")
            assert link == jaeger.format(trace_id=trace_id)
            browser.get(f"{base}/ui/culprits?window=1h")
            assert browser.find_elements("css selector", "#blames-plot rect.bar")
            assert off_loopback(requested_urls(browser)) == []
    finally:
        processor.stop()
    # a restarted processor on the same WAL directory still has it, and reads from the store what it
    # no longer holds in memory: the culprit counter continues (no reset to zero) and a verdict for
    # the trace is answered from the stored blame (the retained traces are gone with the process)
    again = _start(sink, tmp_path / "wal")
    again_base = f"http://{again.http_endpoint}"
    try:
        status, body = _get(again_base, f"/api/runs/{trace_id}")
        assert status == 200 and json.loads(body)["agent"] == run["agent"]
        assert _attributions(again_base) == metric
        status, answer = _post_verdict(again_base, trace_id)
        assert status == 200, answer
        assert answer["status"] == "already_attributed"
        assert (answer["agent"], answer["step"], answer["method"]) == (
            run["agent"],
            run["step"],
            run["method"],
        )
        assert answer["confidence"] == run["confidence"] and answer["reason"] == run["reason"]
        assert _post_verdict(again_base, "e" * 32)[0] == 404  # neither stored nor retained
    finally:
        again.stop()


def test_store_disabled_means_no_ui(sink: RecordingOTLPSink, tmp_path: Path) -> None:
    # every verdict counted (decided or not): what is tested is that the counters live in memory
    processor = _start(sink, tmp_path / "wal", store={"enabled": False}, alerting={"count_undecided": True})
    base = f"http://{processor.http_endpoint}"
    try:
        assert _get(base, "/api/failures")[0] == 404
        trace_id = _send_failed_run(processor, sink)
        # without the store, the culprit counters and verdicts still work, from the processor's memory
        deadline = time.monotonic() + 15
        while not _attributions(base) and time.monotonic() < deadline:
            time.sleep(0.1)
        [(service, agent)] = _attributions(base)
        assert service == "agents-under-test" and _attributions(base)[(service, agent)] == 1
        status, answer = _post_verdict(base, trace_id)
        assert status == 200 and answer["status"] == "already_attributed" and answer["agent"] == agent
        assert not (tmp_path / "wal" / "blame-store.sqlite3").exists()
    finally:
        processor.stop()
