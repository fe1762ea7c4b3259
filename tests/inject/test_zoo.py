"""The app zoo: its registry and command line, and branch zoo's apps run for real on the scripted LLM.

Each app runs in this process with otel-blame's instrumentation on (spans kept in memory), the same
interceptor a campaign installs, and the app's own scripted LLM server: a clean run passes, every
fault kind the app supports makes a run fail with the planted agent and step as the truth, and a
short campaign through the real processor reports the documented fields.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_blame.conventions import sdk_spans_to_proto, trajectory_from_spans
from otel_blame.inject import zoo
from otel_blame.inject.campaign import Campaign, CampaignError, CampaignSettings, resolve_app, score_record
from otel_blame.inject.cli import inject_command
from otel_blame.inject.dataset import SUBSET, write_dataset
from otel_blame.inject.faults import FaultKind
from otel_blame.inject.injector import FaultPlan, Injector, situations
from otel_blame.inject.report import Baseline, Fault, Prediction, RunRecord, RunStatus, build_report
from otel_blame.inject.truth import take_declared
from otel_blame.instrumentation.interception import intercept_messages
from otel_blame.trajectory import Trajectory
from tests.support.blame import check_default_blame

CONTRACT_APPS = ("demo", "orchestrator", "customer_service", "triage", "debate", "supervisor", "crew")

# kind -> (seed, agent, step, fault seed): a fault planted exactly there makes the run fail
FAILING: dict[str, dict[str, tuple[int, str, int, int]]] = {
    "customer_service": {
        "number": (1, "assistant", 11, 1),
        "drop_instruction": (1, "assistant", 11, 1),
        "tool_error": (1, "assistant", 2, 1),
        "terminate": (1, "customer", 0, 1),
        "wrong_tool_argument": (1, "assistant", 5, 1),
        "wrong_tool": (1, "assistant", 1, 1),
        "fabricated_fact": (1, "assistant", 11, 1),
        "premature_handoff": (1, "assistant", 7, 1),
        "lost_context": (1, "assistant", 7, 1),
        "wrong_tool_result": (7, "assistant", 10, 5),  # seed 7: the order service answers 503 once
        "skipped_policy_step": (7, "assistant", 7, 1),
        "ignored_tool_error": (7, "assistant", 7, 1),
    },
    "orchestrator": {
        "number": (2, "user", 0, 1),  # the request's year: last year's reports do not have it
        "drop_instruction": (2, "user", 0, 1),
        "contradict_instruction": (2, "coder", 41, 1),  # a second assignment in the code
        "terminate": (2, "orchestrator", 1, 1),
        "tool_error": (2, "web_surfer", 6, 1),
        "wrong_tool": (2, "web_surfer", 7, 1),
        "premature_handoff": (2, "orchestrator", 1, 1),  # the task ledger
        "lost_context": (2, "orchestrator", 1, 1),
        "wrong_tool_result": (1, "web_surfer", 23, 2),
        "fabricated_fact": (0, "orchestrator", 10, 1),  # a product code in the ledger update
        "wrong_tool_argument": (0, "web_surfer", 3, 1),  # the search query
    },
}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    from otel_blame.instrumentation import configure, reset_configuration

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reset_configuration()
    configure(tracer_provider=provider)
    yield exporter
    reset_configuration()
    provider.shutdown()


def _run(
    exporter: InMemorySpanExporter, app: str, seed: int, plan: FaultPlan | None = None
) -> tuple[bool, Injector, Trajectory]:
    module = importlib.import_module(f"otel_blame.inject.zoo.{app}")
    exporter.clear()
    injector = Injector(plan)
    with intercept_messages(injector):
        passed = module.run_task(seed)
    trajectory = trajectory_from_spans(sdk_spans_to_proto(list(exporter.get_finished_spans())))
    return passed, injector, trajectory


# --- the registry and the command line -------------------------------------------------------------


def test_the_registry_lists_every_app_of_the_contract_without_importing_them():
    assert tuple(app.name for app in zoo.APPS) == CONTRACT_APPS
    assert zoo.get_app("zoo:crew").environment == "crewai"
    statuses = {app.name: zoo.availability(app) for app in zoo.APPS}
    assert statuses["orchestrator"] == statuses["customer_service"] == "ready"
    assert statuses["crew"] in ("other env", "no env", "missing")  # never "ready" outside CrewAI's venv
    assert "otel_blame.inject.zoo.crew" not in sys.modules
    for app in zoo.APPS:
        module, _, function = app.reference.partition(":")
        assert function == "run_task" and module.startswith("otel_blame.inject.")


def test_list_apps_prints_name_framework_shape_and_environment():
    result = CliRunner().invoke(inject_command, ["--list-apps", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert tuple(rows) == CONTRACT_APPS
    assert rows["customer_service"]["framework"] == "api" and rows["customer_service"]["shape"]
    assert rows["crew"]["environment"] == "crewai"
    table = CliRunner().invoke(inject_command, ["--list-apps"])
    assert table.exit_code == 0 and "orchestrator" in table.output and "status" in table.output


def test_a_zoo_app_resolves_to_its_module_and_its_environments_python(monkeypatch, tmp_path):
    assert resolve_app("zoo:customer_service") == (
        "otel_blame.inject.zoo.customer_service:run_task",
        sys.executable,
    )
    assert resolve_app("mymodule:run") == ("mymodule:run", None)
    with pytest.raises(CampaignError, match="no zoo app 'nope'"):
        resolve_app("zoo:nope")
    crew = zoo.get_app("crew")
    monkeypatch.setenv("OTEL_BLAME_CREWAI_PYTHON", "/opt/crewai/bin/python")
    monkeypatch.setattr(zoo, "module_present", lambda app: True)
    assert resolve_app("zoo:crew") == (crew.reference, "/opt/crewai/bin/python")
    monkeypatch.delenv("OTEL_BLAME_CREWAI_PYTHON")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(zoo, "interpreter_for", lambda app: None)
    with pytest.raises(CampaignError, match="crewai"):
        resolve_app("zoo:crew")
    monkeypatch.setattr(zoo, "module_present", lambda app: False)
    with pytest.raises(CampaignError, match="not in this installation"):
        resolve_app("zoo:triage")


# --- scoring ------------------------------------------------------------------------------------------


def _prediction(agent: str, step: int) -> Prediction:
    return Prediction(agent=agent, step=step, confidence=0.5, method="test")


def test_the_agent_and_the_step_are_scored_each_on_its_own():
    truth = Fault(kind="number", agent="coder", step=4)
    cases = {
        "agent right, step wrong": (_prediction("coder", 2), True, False),
        "agent wrong, step right": (_prediction("planner", 4), False, True),
        "both right": (_prediction("coder", 4), True, True),
        "both wrong": (_prediction("planner", 1), False, False),
    }
    records = []
    for index, (prediction, agent_ok, step_ok) in enumerate(cases.values()):
        record = RunRecord(index=index, app_seed=index, status=RunStatus.FAILED, fault=truth)
        score_record(record, prediction)
        assert (record.agent_correct, record.step_correct) == (agent_ok, step_ok)
        records.append(record)
    report = build_report(
        app="test",
        method="test",
        seed=0,
        runs=4,
        baseline=Baseline(status=RunStatus.CLEAN_PASSED),
        records=records,
    )
    assert (report.agent_accuracy, report.step_accuracy) == (0.5, 0.5)


# --- the apps, for real ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("app", "seeds"), [("customer_service", (0, 1, 2, 3)), ("orchestrator", (0, 1))])
def test_a_clean_run_passes(spans, app, seeds):
    for seed in seeds:
        passed, _, trajectory = _run(spans, app, seed)
        assert passed, trajectory.outcome_reason
        assert trajectory.outcome is not None and trajectory.outcome.value == "success"
        assert len(trajectory.steps) >= (40 if app == "orchestrator" else 12)


def test_the_orchestrators_coder_joins_only_runs_that_compute(spans):
    speakers = {}
    for seed in range(8):
        _, _, trajectory = _run(spans, "orchestrator", seed)
        speakers[seed] = {step.agent for step in trajectory.steps}
    with_coder = [seed for seed, agents in speakers.items() if "coder" in agents]
    assert with_coder and len(with_coder) < len(speakers)
    assert all("computer_terminal" in speakers[seed] for seed in with_coder)


# (app, kind) cases of FAILING the offline default does not blame at the planted step: kept visible,
# each fails the test as soon as the default finds it (tests/support/blame.py)
KNOWN_MISSES: set[tuple[str, str]] = {
    ("customer_service", kind)
    for kind in (
        "number",
        "drop_instruction",
        "premature_handoff",
        "lost_context",
        "wrong_tool_result",  # after a 503 the run never retried: blamed on the order service
        "skipped_policy_step",  # likewise
        "ignored_tool_error",  # likewise
    )
} | {
    ("orchestrator", kind)
    for kind in (
        "number",
        "drop_instruction",
        "premature_handoff",
        "lost_context",
        "wrong_tool_result",
        "fabricated_fact",
        "wrong_tool_argument",
    )
}


def _fault_cases() -> list[Any]:
    return [
        pytest.param(app, kind, *where, id=f"{app}-{kind}")
        for app, kinds in FAILING.items()
        for kind, where in kinds.items()
    ]


@pytest.mark.parametrize(("app", "kind", "seed", "agent", "step", "fault_seed"), _fault_cases())
def test_a_planted_fault_fails_the_run_and_is_the_truth(spans, app, kind, seed, agent, step, fault_seed):
    _, clean_injector, clean = _run(spans, app, seed)
    tools = situations(clean_injector.seen)[-1].tools
    plan = FaultPlan(FaultKind(kind), agent, step, fault_seed, exact=True, tools=tools)
    passed, injector, trajectory = _run(spans, app, seed, plan)
    assert injector.planted is not None
    assert not passed, f"{kind} at {agent}@{step} was masked"
    assert (injector.planted.agent, injector.planted.step) == (agent, step)
    recorded = trajectory.steps[step]
    assert recorded.agent == agent
    assert recorded.content != clean.steps[step].content  # the step shows the change the recipient got
    check_default_blame(trajectory, agent, step, known_miss=(app, kind) in KNOWN_MISSES)


def test_every_supported_fault_kind_has_a_failing_case():
    for app, kinds in FAILING.items():
        module = importlib.import_module(f"otel_blame.inject.zoo.{app}")
        assert set(kinds) == set(module.FAULTS), app


def test_an_outage_of_the_order_service_is_declared_as_the_runs_cause(spans):
    take_declared()
    outages = []
    for seed in range(12):
        passed, _, trajectory = _run(spans, "customer_service", seed)
        declared = take_declared()
        if declared:
            assert not passed
            outages.append((declared[0], trajectory))
    assert outages, "no outage in 12 seeds"
    for cause, trajectory in outages:
        step = trajectory.steps[cause.step]
        assert (cause.agent, cause.dependency) == ("assistant", "order_service")
        assert step.kind.value == "tool" and step.tool_name == "get_order_details" and "503" in step.content


# --- a short campaign through the real processor ----------------------------------------------------------


@pytest.fixture
def other_python() -> str:
    """This environment's interpreter under another name: the campaign treats it as another
    environment's python (a worker started as a separate process that connects back)."""
    for name in ("python3", "python3.11", "python"):
        candidate = Path(sys.prefix) / "bin" / name
        if candidate.exists() and str(candidate) != sys.executable:
            return str(candidate)
    pytest.skip("this environment has a single python executable name")


def test_a_short_campaign_reports_the_documented_fields(tmp_path, other_python):
    settings = CampaignSettings(app="zoo:customer_service", runs=4, seed=1, python=other_python)
    result = Campaign(settings).run()
    report = build_report(
        app=settings.app,
        method=result.method,
        seed=1,
        runs=4,
        baseline=result.baseline,
        records=result.records,
    ).model_dump(mode="json")
    for field in ("app", "method", "runs", "scored", "agent_accuracy", "step_accuracy", "by_fault_kind",
                  "by_agent", "statuses", "baseline", "results", "problems"):  # fmt: skip
        assert field in report
    assert report["app"] == "zoo:customer_service" and report["baseline"]["status"] == "clean_passed"
    assert len(report["baseline"]["steps"]) >= 12 and report["baseline"]["eligible"]
    assert sum(report["statuses"].values()) == 4
    for record in report["results"]:
        truth = record["fault"]
        if record["status"] == "attributed":
            assert truth["kind"] and truth["agent"] and truth["step"] >= 0 and record["prediction"]["agent"]
    written = write_dataset(result, tmp_path / "data")
    files = sorted((tmp_path / "data" / SUBSET).glob("*.json"))
    assert (
        written
        == len(files)
        == sum(1 for r in report["results"] if r["status"] in ("attributed", "no_blame"))
    )
    for path in files:
        log = json.loads(path.read_text())
        assert log["app"] == "zoo:customer_service" and log["fault_kind"] and log["trajectory"]["steps"]
        assert log["history"][int(log["mistake_step"])]["name"] == log["mistake_agent"]


@pytest.mark.slow
def test_an_orchestrator_campaign_scores_its_runs_against_the_planted_faults(tmp_path):
    settings = CampaignSettings(app="zoo:orchestrator", runs=12, seed=3, run_timeout=120)
    result = Campaign(settings).run()
    assert result.baseline.status is RunStatus.CLEAN_PASSED
    attributed = [r for r in result.records if r.status is RunStatus.ATTRIBUTED]
    assert attributed
    for record in attributed:
        steps = result.trajectories[record.index]["steps"]
        assert record.fault is not None and steps[record.fault.step]["agent"] == record.fault.agent
