"""Regression floors per zoo app: on a fixed-seed campaign of each zoo app of the main environment
(real framework runs, scripted LLM, the in-process processor, the same CLI path as the demo floor in
test_accuracy_floors.py), the offline default may not drop more than a few points below its
recorded agent and step accuracy (docs/benchmarks.md, "Regression floors per zoo app").

Recorded 2026-11-26, re-recorded 2026-11-29 (issue 32), with the shipped ``ranker_model.json`` (the
verdict is deterministic: two runs of each campaign gave the same figures), as
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=<the other frameworks> otel-blame inject --app zoo:NAME
--runs N --seed S [--fault K ...] --json``:

================  ====  ====  ======  =====  =====  =========================================
app               runs  seed  scored  agent  step   faults
================  ====  ====  ======  =====  =====  =========================================
customer_service    28     2       8  0.750  0.375  the app's own
debate              40    11      18  0.722  0.667  the app's own
orchestrator        28    11      10  0.600  0.200  terminate, tool_error, lost_context
supervisor          32    11      14  0.643  0.500  the app's own
triage              20    11      11  0.909  0.909  the app's own
================  ====  ====  ======  =====  =====  =========================================

Most runs of these apps are masked (the fault leaves the outcome a success) and are not scored, so
N is what gives at least eight scored runs in about half a minute; the orchestrator is the slowest
app and masks three runs in four under its own fault kinds, so its campaign draws only the three
kinds that most often make a run fail. A floor is the recorded figure less the larger of five points
and one scored run. crew is not here: it runs in ``.venv-crewai`` only.
"""

from __future__ import annotations

import json
from typing import NamedTuple

import pytest
from click.testing import CliRunner

from otel_blame.cli import main
from otel_blame.inject.zoo import get_app

# every framework instrumentor of pyproject's opentelemetry_instrumentor entry points, by the zoo's
# framework name ("api" apps use the plain instrumentation API: none of them); the executor's stays on
INSTRUMENTORS = {
    "ag2": "otel_blame_ag2",
    "autogen": "otel_blame_autogen",
    "agentchat": "otel_blame_agentchat",
    "openai_agents": "otel_blame_openai_agents",
    "langgraph": "otel_blame_langgraph",
    "crewai": "otel_blame_crewai",
}
# the modules each framework's app needs (one absent: the app cannot run here, its floor is skipped)
FRAMEWORK_MODULES = {
    "agentchat": ("autogen_agentchat", "autogen_ext.models.openai"),
    "openai_agents": ("agents",),
    "langgraph": ("langgraph", "langchain_openai"),
}


class Campaign(NamedTuple):
    """A fixed-seed campaign and the figures the shipped default recorded on it."""

    runs: int
    seed: int
    scored: int
    agent: float
    step: float
    faults: tuple[str, ...] = ()  # --fault kinds; empty: the kinds the app declares

    def arguments(self, name: str) -> list[str]:
        faults = [argument for kind in self.faults for argument in ("--fault", kind)]
        return ["inject", "--app", f"zoo:{name}", "--runs", str(self.runs), "--seed", str(self.seed), *faults]


# recorded figures as right / scored (exact: the floor keeps exactly one run of slack)
RECORDED = {  # re-recorded 2026-11-29 for the model fitted with AEGIS (issue 32); before it in comments
    "customer_service": Campaign(runs=28, seed=2, scored=8, agent=6 / 8, step=3 / 8),  # 7/8, 5/8
    "debate": Campaign(runs=40, seed=11, scored=18, agent=13 / 18, step=12 / 18),  # 7/10, 7/10 (10 scored)
    "orchestrator": Campaign(  # 7/10, 4/10; 9/10, 6/10 until real failures joined the fit (2026-11-28)
        runs=28,
        seed=11,
        scored=10,
        agent=6 / 10,
        step=2 / 10,
        faults=("terminate", "tool_error", "lost_context"),
    ),
    "supervisor": Campaign(runs=32, seed=11, scored=14, agent=9 / 14, step=7 / 14),  # 8/12, 7/12 (12 scored)
    "triage": Campaign(runs=20, seed=11, scored=11, agent=10 / 11, step=10 / 11),  # 8/9, 8/9 (9 scored)
}
SLACK = 0.05  # "more than a few points below" fails
SLACK_RUNS = 1  # on ~10 scored runs a run is 10 points: one run of slack, the larger of the two


def other_frameworks(framework: str) -> str:
    """OTEL_PYTHON_DISABLED_INSTRUMENTATIONS for an app of ``framework``: every other framework's
    instrumentor off (their imports cost seconds per app process), its own on."""
    return ",".join(name for key, name in INSTRUMENTORS.items() if key != framework)


def floor(recorded: float, scored: int) -> float:
    """The least accuracy that passes, to the report's four places (exactly one run of slack on ten
    runs is 0.7, not 0.7000000000000001)."""
    return round(recorded - max(SLACK, SLACK_RUNS / scored), 4)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_fixed_seed_zoo_campaign_keeps_its_recorded_accuracy(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = get_app(name)
    for module in FRAMEWORK_MODULES.get(app.framework, ()):
        pytest.importorskip(module)
    recorded = RECORDED[name]
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", other_frameworks(app.framework))
    result = CliRunner().invoke(main, [*recorded.arguments(name), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    scored = report["scored"]
    # the campaign itself has not changed under the floor (else re-record: docs/benchmarks.md)
    assert scored >= recorded.scored - SLACK_RUNS, report["statuses"]
    assert report["agent_accuracy"] >= floor(recorded.agent, scored), report["by_fault_kind"]
    assert report["step_accuracy"] >= floor(recorded.step, scored), report["by_fault_kind"]


def test_a_floor_leaves_one_scored_run_or_five_points_of_slack() -> None:
    assert floor(8 / 10, 10) == round(7 / 10, 4)  # one run below on ten passes, not a float hair short
    assert floor(7 / 9, 9) == round(6 / 9, 4) > round(5 / 9, 4)  # the report's four places
    assert floor(1.0, 40) == 0.95  # past twenty scored runs, five points
