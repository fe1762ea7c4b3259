"""Start-up refuses a configuration that would run open or misread a key; verdicts follow the docs."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from otel_blame.cli import main
from otel_blame.processor.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("environ", "overrides", "message"),
    [
        ({"OTEL_BLAME_RECEIVERS__AUTH_TOKEN": ""}, None, "receivers.auth_token: .*empty token"),
        ({}, {"receivers": {"auth_token": "   "}}, "receivers.auth_token: .*empty token"),
        ({"OTEL_BLAME_RECIEVERS__AUTH_TOKEN": "s3cret"}, None, "unknown section 'recievers'"),
        ({"OTEL_BLAME_ASSEMBLY__MAX_TRACES": "true"}, None, "max_traces: expected a number, got True"),
        ({}, {"assembly": {"max_traces": True}}, "max_traces: expected a number"),
        ({"OTEL_BLAME_RECEIVERS__AUTH_TOKNE": "x"}, None, "receivers.auth_tokne: unknown key"),
    ],
)
def test_configuration_mistakes_stop_the_start(environ: dict, overrides: dict | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(environ=environ, overrides=overrides)


def test_variables_of_other_components_are_left_alone() -> None:
    config = load_config(environ={"OTEL_BLAME_MODEL": "x", "OTEL_BLAME_CAPTURE_CONTENT": "true"})
    assert config.receivers.auth_token is None


def test_serve_with_an_empty_token_is_a_start_up_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["serve", "--downstream", "127.0.0.1:9", "--wal-dir", str(tmp_path / "wal")],
        env={"OTEL_BLAME_RECEIVERS__AUTH_TOKEN": ""},
    )
    assert result.exit_code == 2
    assert "empty token" in result.output
    assert not (tmp_path / "wal").exists()  # nothing started


def _verdict(endpoint: str, body: dict) -> tuple[int, dict]:
    host, _, port = endpoint.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request(
        "POST", "/v1/verdicts", body=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    answer = json.loads(response.read())
    connection.close()
    return response.status, answer


@pytest.mark.parametrize("outcome", ["success", "failure"])
def test_a_verdict_for_an_unknown_trace_is_404(sink, make_processor, outcome: str) -> None:  # noqa: ANN001
    processor = make_processor()
    status, answer = _verdict(processor.http_endpoint, {"trace_id": "ab" * 16, "outcome": outcome})
    assert status == 404 and "not among the recently completed traces" in answer["message"]


@pytest.mark.parametrize("trace_id", ["00" * 16, "ab" * 15, "zz" * 16])
def test_a_verdict_with_a_bad_trace_id_is_400(sink, make_processor, trace_id: str) -> None:  # noqa: ANN001
    processor = make_processor()
    status, _ = _verdict(processor.http_endpoint, {"trace_id": trace_id, "outcome": "failure"})
    assert status == 400
