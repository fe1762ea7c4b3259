"""A campaign against a running processor (``--endpoint``): spans over OTLP/HTTP with its bearer token,
verdicts read back from its blame store's API."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from otel_blame.cli import main
from otel_blame.commands.serve import load_serve_config, serving_processor
from tests.support import RecordingOTLPSink

pytest.importorskip("autogen")
pytestmark = pytest.mark.slow  # real AG2 runs in an app process per campaign

TOKEN = "inject-test-token"


@pytest.fixture
def serve(tmp_path):  # noqa: ANN201 - the running processor
    with RecordingOTLPSink() as sink:
        config = load_serve_config(
            environ={},
            overrides={
                "receivers": {"grpc_endpoint": None, "http_endpoint": "127.0.0.1:0", "auth_token": TOKEN},
                "wal": {"dir": str(tmp_path / "wal")},
                "assembly": {"quiet_period": 0.3},
                "exporter": {"endpoint": sink.endpoint},
            },
        )
        with serving_processor(config) as processor:
            yield processor


def test_a_campaign_against_a_running_processor_reads_its_verdicts(serve):
    result = CliRunner().invoke(
        main,
        ["inject", "--json", "--runs", "2", "--seed", "5", "--endpoint", f"http://{serve.http_endpoint}"],
        env={"OTEL_BLAME_TOKEN": TOKEN},
    )
    report = json.loads(result.stdout)
    attributed = [r for r in report["results"] if r["status"] == "attributed"]
    assert attributed, report["statuses"]
    for record in attributed:
        assert record["prediction"]["method"] == "heuristic"
        assert record["trace_id"] and len(record["trace_id"]) == 32
    assert report["method"] == "heuristic"  # named by the verdicts that came back


def test_a_processor_that_does_not_answer_is_one_error_line():
    result = CliRunner().invoke(main, ["inject", "--runs", "1", "--endpoint", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert "the processor does not answer" in result.output
