"""Campaigns whose app raises, hangs, never fails or cannot be imported end with a clear report
(exit status 1 when nothing could be scored), never with a traceback."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from otel_blame.cli import main

pytest.importorskip("autogen")
pytestmark = pytest.mark.slow  # each campaign starts an app process

# messages recorded after they were delivered (intercept=False): nothing the interceptor could change
PLAIN_APP = """
from otel_blame.instrumentation import agent_turn, record_message, set_outcome, task

def run_one(seed=0):
    with task("plain", input="What is 2 + 2?"):
        record_message("user", "What is 2 + 2?", role="user")
        with agent_turn("solver") as turn:
            turn.answer("4")
        set_outcome(True, final_output="4")
"""


def _inject(*args: str) -> tuple[int, dict | None, str]:
    result = CliRunner().invoke(main, ["inject", "--json", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    report = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
    return result.exit_code, report, result.output


def test_an_app_that_raises_gets_a_report_saying_so():
    import logging

    processor_log = logging.getLogger("otel_blame.processor")
    before = processor_log.level
    code, report, _ = _inject("--app", "tests.inject.apps:raises", "--runs", "3")
    assert processor_log.level == before  # the campaign's quieter logging ends with it
    assert code == 1
    assert report["baseline"]["status"] == "app_error"
    assert "RuntimeError: the app broke before its first message" in report["baseline"]["error"]
    assert report["scored"] == 0 and report["agent_accuracy"] is None
    assert any("raised on its clean run" in p for p in report["problems"])


def test_an_app_that_hangs_is_ended_at_the_run_timeout():
    code, report, _ = _inject("--app", "tests.inject.apps:hangs", "--runs", "2", "--run-timeout", "1")
    assert code == 1
    assert report["baseline"]["status"] == "timeout"
    assert any("hung past the per-run timeout" in p for p in report["problems"])


def test_an_app_that_never_fails_gets_nothing_to_blame():
    code, report, _ = _inject(
        "--app", "tests.inject.apps:never_fails", "--runs", "2", "--seed", "3", "--fault", "number"
    )
    assert code == 1
    assert report["statuses"] == {"masked": 2}
    assert report["scored"] == 0
    assert any("never fails" in p for p in report["problems"])


def test_runs_that_hang_are_counted_and_the_campaign_goes_on(tmp_path):
    # app seeds drawn for --seed 0: the odd ones hang, a fresh app process serves the next run
    code, report, _ = _inject(
        "--app", "tests.inject.apps:hangs_on_odd_seeds", "--runs", "3", "--seed", "0", "--run-timeout", "8"
    )
    seeds = [r["app_seed"] for r in report["results"]]
    hung = [r for r in report["results"] if r["status"] == "timeout"]
    assert len(hung) == sum(s % 2 for s in seeds) >= 1
    assert all("timed out after 8 s" in r["error"] for r in hung)
    assert any(r["status"] in ("attributed", "masked") for r in report["results"])
    assert any("hung and were ended" in p for p in report["problems"])
    assert code == (0 if report["scored"] else 1)


def test_an_app_that_cannot_be_imported_is_one_error_line():
    result = CliRunner().invoke(main, ["inject", "--app", "no_such_module_here:run", "--runs", "1"])
    assert result.exit_code == 1
    assert "cannot import no_such_module_here" in result.output
    assert "Traceback" not in result.output


def test_an_app_in_the_working_directory_takes_faults_on_its_plain_api_messages(tmp_path, monkeypatch):
    (tmp_path / "plain_app.py").write_text(PLAIN_APP)
    monkeypatch.chdir(tmp_path)
    code, report, _ = _inject("--app", "plain_app:run_one", "--runs", "2")
    assert code == 1  # it calls every run a success: nothing to blame
    assert report["baseline"]["status"] == "clean_passed"
    assert report["baseline"]["steps"] == [["user", 0, "message"], ["solver", 1, "message"]]
    # record_message and AgentTurn.answer go through the message path: their messages take faults
    assert {"number", "terminate"} <= set(report["baseline"]["eligible"])
    assert set(report["statuses"]) <= {"masked", "not_injected"}
    assert any("never fails" in p for p in report["problems"])
