"""``--escalation`` (and OTEL_BLAME_ESCALATION) on ``otel-blame attribute`` and ``otel-blame eval``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from otel_blame.cli import main
from tests.support import ScriptedLLM
from tests.support.decided import ALWAYS_DECIDED, NEVER_DECIDED, set_decided_threshold

CONFIRM = json.dumps({"decisive": True, "confidence": 0.9, "reason": "made up"})
SECRET = "Ab3_dE-fGh1_jK2-lMn3_oP4-qRs5"
NO_ENDPOINT = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "OTEL_BLAME_ESCALATION": ""}


def _run_file(folder: Path) -> Path:
    file = folder / "run.json"
    history = [
        {"role": "Planner", "content": "Plan: find the value, then report it."},
        {
            "role": "Solver",
            "content": f"Let's assume the value is 7 (key sk-proj-{SECRET}). The answer is 7.",
        },
        {"role": "Checker", "content": "Verified, 7 is correct. TERMINATE"},
    ]
    file.write_text(json.dumps({"question": "What is the value?", "history": history, "is_correct": False}))
    return file


def _dataset(folder: Path) -> Path:
    for subset in ("Algorithm-Generated", "Hand-Crafted"):
        for number in range(2):
            path = folder / "ds" / subset / f"{number}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            history = [
                {"role": "assistant", "name": "Solver", "content": "Let's assume the value is 7."},
                {"role": "user", "name": "Checker", "content": "Verified, 7 is correct. TERMINATE"},
            ]
            case = {"question": "q", "history": history, "mistake_agent": "Solver", "mistake_step": "0"}
            path.write_text(json.dumps(case))
    return folder / "ds"


def _attribute(file: Path, base_url: str, *extra: str, env: dict[str, str] | None = None) -> dict:
    args = ["attribute", str(file), "--json", "--base-url", base_url, *extra]
    result = CliRunner(env={**NO_ENDPOINT, "OPENAI_API_KEY": "sk-x", **(env or {})}).invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_an_undecided_verdict_is_escalated_by_default_with_redacted_content(tmp_path, monkeypatch):
    set_decided_threshold(monkeypatch, NEVER_DECIDED)
    with ScriptedLLM([], default=CONFIRM) as server:
        verdict = _attribute(_run_file(tmp_path), server.base_url)
    assert verdict["method"] == "ranker+guided_check" and verdict["decided"] is True
    assert verdict["cost"]["llm_calls"] == 1 == server.calls and verdict["cost"]["input_tokens"] > 0
    sent = json.dumps(server.requests)
    assert SECRET not in sent and "[REDACTED:api_key]" in sent


@pytest.mark.parametrize(
    ("extra", "env"),
    [((), {}), (("--escalation", "never"), {}), ((), {"OTEL_BLAME_ESCALATION": "never"})],
    ids=["decided", "flag-never", "env-never"],
)
def test_no_tokens_for_a_decided_verdict_or_with_never(tmp_path, monkeypatch, extra, env):
    set_decided_threshold(monkeypatch, ALWAYS_DECIDED if not extra and not env else NEVER_DECIDED)
    with ScriptedLLM([], default=CONFIRM) as server:
        verdict = _attribute(_run_file(tmp_path), server.base_url, *extra, env=env)
    assert server.calls == 0 and verdict["method"] == "ranker" and verdict["cost"]["llm_calls"] == 0


def test_always_checks_a_decided_verdict_too(tmp_path, monkeypatch):
    set_decided_threshold(monkeypatch, ALWAYS_DECIDED)
    with ScriptedLLM([], default=CONFIRM) as server:
        verdict = _attribute(_run_file(tmp_path), server.base_url, "--escalation", "always")
    assert server.calls == 1 and verdict["method"] == "ranker+guided_check"


def test_without_an_endpoint_the_default_changes_nothing_and_always_is_refused(tmp_path):
    file = _run_file(tmp_path)
    quiet = CliRunner(env=NO_ENDPOINT).invoke(main, ["attribute", str(file), "--json"])
    assert quiet.exit_code == 0 and json.loads(quiet.output)["method"] == "ranker"
    refused = CliRunner(env=NO_ENDPOINT).invoke(main, ["attribute", str(file), "--escalation", "always"])
    assert refused.exit_code == 1 and "--escalation always: no LLM configured" in refused.output
    bad = CliRunner(env=NO_ENDPOINT).invoke(main, ["attribute", str(file), "--escalation", "sometimes"])
    assert bad.exit_code == 2 and "'never', 'undecided', 'always'" in bad.output


@pytest.mark.parametrize(("threshold", "calls"), [(ALWAYS_DECIDED, 0), (NEVER_DECIDED, 1)])
def test_eval_escalates_the_undecided_logs_and_records_their_cost(tmp_path, monkeypatch, threshold, calls):
    set_decided_threshold(monkeypatch, threshold)
    out = tmp_path / "pred.jsonl"
    with ScriptedLLM([], default=CONFIRM) as server:
        args = [
            "eval",
            "--dataset",
            str(_dataset(tmp_path)),
            "--out",
            str(out),
            "--base-url",
            server.base_url,
        ]
        result = CliRunner(env={**NO_ENDPOINT, "OPENAI_API_KEY": "sk-x"}).invoke(main, args)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 4 and all(record["llm_calls"] == calls for record in records)
    assert server.calls == 4 * calls
