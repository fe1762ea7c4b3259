"""Contract C4 on every surface: the same success, failure and unknown runs get the same decision
from ``blame_decision``, the CLI, ``POST /api/attribute``, the web UI's upload and the processor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import Status, StatusCode
from starlette.testclient import TestClient

from otel_blame import semconv as sc
from otel_blame.attribution.decision import BlameDecision, blame_decision
from otel_blame.attribution.registry import DEFAULT_METHOD
from otel_blame.cli import main
from otel_blame.commands.serve import load_serve_config, serving_processor
from otel_blame.conventions import sdk_spans_to_proto
from otel_blame.loaders import load_trajectory
from otel_blame.otlp_json import traces_to_json
from otel_blame.store import StoreConfig, open_store
from otel_blame.ui.app import create_ui_app
from otel_blame.ui.security import CSRF_COOKIE
from tests.processor.conftest import processor_overrides
from tests.processor.spans import record_agent_run
from tests.support import RecordingOTLPSink

STEPS = [
    ("Planner", "Plan: multiply six by seven and report it."),
    ("Researcher", "Looked it up: six times seven is 41, according to my notes."),
    ("Solver", "The answer is 41."),
]
RUNS = ("failure", "success", "unknown")


def _spans(kind: str) -> list:
    spans = record_agent_run(STEPS, failed=kind == "failure")
    if kind == "unknown":  # nothing says how it ended: no outcome attribute, no status
        stripped = []
        for span in spans:
            attributes = {k: v for k, v in (span.attributes or {}).items() if k != sc.TASK_OUTCOME}
            stripped.append(
                ReadableSpan(
                    name=span.name,
                    context=span.context,
                    parent=span.parent,
                    resource=span.resource,
                    attributes=attributes,
                    events=span.events,
                    links=span.links,
                    kind=span.kind,
                    status=Status(StatusCode.UNSET),
                    start_time=span.start_time,
                    end_time=span.end_time,
                    instrumentation_scope=span.instrumentation_scope,
                )
            )
        spans = stripped
    return spans


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list, Path, BlameDecision]]:
    folder = tmp_path_factory.mktemp("runs")
    out = {}
    for kind in RUNS:
        spans = _spans(kind)
        file = folder / f"{kind}.json"
        file.write_text(traces_to_json(sdk_spans_to_proto(spans)))
        out[kind] = (spans, file, blame_decision(load_trajectory(file)))
    return out


def test_the_runs_are_a_failure_a_success_and_an_unknown(runs) -> None:  # noqa: ANN001
    decisions = {kind: runs[kind][2] for kind in RUNS}
    assert {kind: (d.blame, d.outcome.value) for kind, d in decisions.items()} == {
        "failure": (True, "failure"),
        "success": (False, "success"),
        "unknown": (False, "unknown"),
    }


@pytest.mark.parametrize("kind", RUNS)
def test_the_cli_takes_the_decision(runs, kind: str) -> None:  # noqa: ANN001
    _spans, file, decision = runs[kind]
    result = CliRunner().invoke(main, ["attribute", str(file), "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["decision"] == decision.model_dump(mode="json")
    assert answer["blamed"] is decision.blame and (answer["agent"] is not None) is decision.blame
    table = CliRunner().invoke(main, ["attribute", str(file)])
    assert (decision.why in " ".join(table.output.split())) is not decision.blame  # wrapped at 80 columns


@pytest.mark.parametrize("kind", RUNS)
def test_the_api_and_the_upload_page_take_the_decision(runs, kind: str, tmp_path: Path) -> None:  # noqa: ANN001
    _spans, file, decision = runs[kind]
    store = open_store(StoreConfig(path=tmp_path / "store.sqlite3"))
    try:
        client = TestClient(create_ui_app(store), follow_redirects=False)
        answer = client.post("/api/attribute", content=file.read_bytes()).json()
        assert answer["decision"] == decision.model_dump(mode="json")
        assert answer["blamed"] is decision.blame
        assert (answer["agent"], answer["step"], answer["reason"]) != (None, None, None) or not decision.blame
        if not decision.blame:
            assert answer["agent"] is None and answer["scores"] == [] and answer["url"] is None

        client.get("/ui/attribute")
        form = {
            "text": file.read_text(),
            "method": DEFAULT_METHOD,  # what the API uses when none is given
            "csrf_token": client.cookies.get(CSRF_COOKIE),
        }
        page = client.post("/ui/attribute", data=form)
        if decision.blame:
            assert page.status_code == 303
            page = client.get(page.headers["location"])
            assert 'id="verdict"' in page.text  # a culprit, or "Undecided: …" when evidence did not decide
        else:
            assert page.status_code == 200
            assert 'id="culprit-agent"' not in page.text and "culprit-badge" not in page.text
            assert f'<p class="reason" id="decision-why">{decision.why}</p>' in page.text
            assert f'id="decision-outcome">{decision.outcome.value}<' in page.text
        stored = store.failures().total
        assert stored == (1 if decision.blame else 0)  # the API's and the page's upload: the same id
    finally:
        store.close()


def test_the_processor_blames_what_the_decision_blames(runs, tmp_path: Path) -> None:  # noqa: ANN001
    """The processor (in-process, fed over OTLP/gRPC) keeps a blame for the failure only."""
    with RecordingOTLPSink() as sink:
        overrides = processor_overrides(sink.endpoint, tmp_path / "wal")
        processor = serving_processor(load_serve_config(overrides=overrides, environ={})).start()
        try:
            sent = 0
            for kind in RUNS:
                spans = runs[kind][0]
                exporter = OTLPSpanExporter(endpoint=processor.grpc_endpoint, insecure=True)
                assert exporter.export(spans) == SpanExportResult.SUCCESS
                exporter.shutdown()
                sent += len(spans)
            sink.wait_for_spans(sent, timeout=30)  # every trace analysed and forwarded
        finally:
            processor.stop()
        store = open_store(StoreConfig(path=tmp_path / "wal" / "blame-store.sqlite3"))
        try:
            kept = {row.trace_id for row in store.failures().failures}
        finally:
            store.close()
    blamed = {f"{runs[kind][0][0].context.trace_id:032x}" for kind in RUNS if runs[kind][2].blame}
    assert kept == blamed and len(blamed) == 1
