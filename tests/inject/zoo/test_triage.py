"""The zoo's ``triage`` app for real: the OpenAI Agents SDK's agents, hand-offs and function tools
on the scripted LLM, run through the campaign worker's own run path (the injector on the message
path, the spans turned into a trajectory). A clean case passes; each fault kind the app declares
fails a run, with the planted agent and step as the truth; the app's own checks catch a wrong order
number in a case note or a call (``masked``); a short campaign's JSON and dataset hold the
documented fields."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider

from otel_blame.cli import main
from otel_blame.inject.faults import FaultKind
from otel_blame.inject.worker import RunSpans, run_one
from tests.support.blame import check_default_blame

agents = pytest.importorskip("agents")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from otel_blame.inject.zoo import triage  # noqa: E402 - after the SDK is known to be there

Run = Callable[..., dict[str, Any]]


@pytest.fixture(autouse=True)
def _autogen_only() -> None:
    """This app needs the OpenAI Agents instrumentation (the package's conftest turns it off)."""


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    """One run of the app as a campaign's worker makes it: ``run(seed, fault=None)`` -> its answer."""
    from otel_blame.instrumentation import OtelBlameInstrumentor, configure, reset_configuration

    provider = TracerProvider()
    spans = RunSpans()
    provider.add_span_processor(spans)
    reset_configuration()
    configure(tracer_provider=provider)
    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument(tracer_provider=provider)

    def one(seed: int, fault: dict[str, Any] | None = None) -> dict[str, Any]:
        spec = {"app_seed": seed, "pass_seed": True, "fault": fault}
        return run_one(triage.run_task, spec, provider, spans)

    yield one
    instrumentor.uninstrument()
    reset_configuration()
    provider.shutdown()
    # The desk turns the OpenAI Agents SDK's own tracing off for the whole process (run_task): back to
    # the SDK's default, or a later test in this process that reads the SDK's traces (OpenInference's
    # instrumentor, tests/conventions) gets none. Which tests share a process depends on pytest-xdist.
    import agents

    agents.set_tracing_disabled(False)


def _steps(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return answer["trajectory"]["steps"]


# seed -> (case kind, the agents that speak, in order of first appearance)
CLEAN_CASES = {
    0: ("billing", ["user", "triage", "billing"]),
    1: ("technical", ["user", "triage", "technical"]),
    4: ("refund_duplicate", ["user", "triage", "refunds", "supervisor"]),  # above the approval limit
    9: ("refund_damaged", ["user", "triage", "refunds"]),
}


@pytest.mark.parametrize("seed", sorted(CLEAN_CASES))
def test_a_clean_case_runs_through_the_desk_and_passes(run, seed):
    kind, speakers = CLEAN_CASES[seed]
    assert triage.case_for(seed)[1].kind == kind
    answer = run(seed)
    assert answer["error"] is None and answer["planted"] is None
    assert answer["outcome"] == "success"
    steps = _steps(answer)
    assert 10 <= len(steps) <= 40
    assert list(dict.fromkeys(s["agent"] for s in steps)) == speakers
    assert [s["index"] for s in steps] == list(range(len(steps)))
    tools = [s for s in steps if s["kind"] == "tool"]
    assert tools and all(s["tool_name"] for s in tools)
    json_results = [s for s in tools if not s["tool_name"].startswith("transfer_to_")]
    assert all(json.loads(s["content"]) for s in json_results)  # the back office answers in JSON


# kind -> (app seed, agent, step, fault seed): a message of that agent the kind changes so that
# the case ends wrong
FAILING = {
    "number": (4, "triage", 3, 0),
    "drop_instruction": (4, "triage", 3, 2),
    "contradict_instruction": (4, "triage", 3, 0),
    "fabricated_fact": (4, "refunds", 9, 0),
    "skipped_policy_step": (4, "triage", 3, 0),
    "premature_handoff": (4, "triage", 3, 0),
    "lost_context": (4, "triage", 3, 0),
    "tool_error": (0, "billing", 6, 0),
    "wrong_tool_result": (4, "triage", 2, 2),
    "wrong_tool_argument": (0, "billing", 5, 0),
    "wrong_tool": (4, "triage", 1, 0),  # a tool the agent does not have: the SDK stops the run
}


# fault kinds of FAILING the offline default does not blame at the planted step: kept visible, each
# fails the test as soon as the default finds it (tests/support/blame.py)
KNOWN_MISSES: set[str] = {"fabricated_fact", "wrong_tool_result"}


def test_every_declared_fault_kind_has_a_failing_case():
    assert set(triage.FAULTS) == set(FAILING)
    assert all(FaultKind(kind) for kind in triage.FAULTS)


@pytest.mark.parametrize("kind", sorted(FAILING))
def test_a_planted_fault_fails_the_case_with_its_agent_and_step_as_the_truth(run, kind):
    seed, agent, step, fault_seed = FAILING[kind]
    clean = run(seed)
    tools = sorted({tool for _, _, what, _, tool in clean["seen"] if what == "tool_call" and tool})
    fault = {"kind": kind, "agent": agent, "step": step, "seed": fault_seed, "exact": True, "tools": tools}
    answer = run(seed, fault)
    assert answer["error"] is None
    planted = answer["planted"]
    assert planted is not None and (planted["kind"], planted["agent"], planted["step"]) == (kind, agent, step)
    assert answer["outcome"] == "failure"
    # the recorded step is the changed message, and what follows it is not what the clean run did
    faulted, clean_steps = _steps(answer), _steps(clean)
    assert faulted[step]["agent"] == agent
    assert faulted[step]["content"] != clean_steps[step]["content"]
    assert [s["content"] for s in faulted[:step]] == [s["content"] for s in clean_steps[:step]]
    assert answer["trajectory"]["outcome_reason"]
    check_default_blame(answer["trajectory"], agent, step, known_miss=kind in KNOWN_MISSES)


@pytest.mark.parametrize(
    ("kind", "agent", "step"),
    [("fabricated_fact", "triage", 3), ("wrong_tool_argument", "refunds", 5)],
)
def test_a_wrong_order_number_is_caught_and_the_case_recovers(run, kind, agent, step):
    fault = {"kind": kind, "agent": agent, "step": step, "seed": 0, "exact": True}
    answer = run(4, fault)
    assert "ORD-37162" in answer["planted"]["before"] and "ORD-37162" not in answer["planted"]["after"]
    assert answer["outcome"] == "success"  # a masked run: the refunds desk listed the orders
    tools = [s["tool_name"] for s in _steps(answer) if s["kind"] == "tool"]
    assert "list_orders" in tools


@pytest.mark.slow
def test_a_short_campaign_reports_and_labels_its_runs(tmp_path: Path):
    out = tmp_path / "dataset"
    result = CliRunner().invoke(
        main,
        ["inject", "--app", "zoo:triage", "--runs", "4", "--seed", "4", "--json", "--dataset-out", str(out)]
        + [arg for kind in ("drop_instruction", "premature_handoff") for arg in ("--fault", kind)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["runs"] == 4 and report["baseline"]["status"] == "clean_passed"
    assert set(report["statuses"]) <= {"attributed", "masked", "not_injected", "no_blame"}
    failed = [r for r in report["results"] if r["status"] == "attributed"]
    assert failed, report["statuses"]
    for record in failed:
        assert record["fault"]["kind"] in ("drop_instruction", "premature_handoff")
        assert record["agent_correct"] == (record["prediction"]["agent"] == record["fault"]["agent"])
    written = sorted(out.rglob("*.json"))
    assert len(written) == len(failed)


@pytest.mark.slow
def test_a_campaign_plans_each_run_from_its_own_path():
    """Each case goes to the specialist its text calls for, so a target planned from the baseline's
    path may never speak in a run: such a run is re-planned from its own path (issue 26: 1 run of
    12 scored, 43 % ``not_injected``)."""
    result = CliRunner().invoke(main, ["inject", "--app", "zoo:triage", "--runs", "12", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert "not_injected" not in report["statuses"], report["statuses"]
    assert report["scored"] > report["runs"] / 2, report["statuses"]
    planted_in = {record["fault"]["agent"] for record in report["results"] if record.get("fault")}
    assert len(planted_in) >= 2  # not only the desk every case passes through
