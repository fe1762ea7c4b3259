"""Regression floors: the offline default may not drop more than a few points below its recorded
figures (docs/benchmarks.md), on a fixed-seed demo campaign (real AG2 runs, scripted LLM, through
the in-process processor) and on the Who&When dev split under fixed cross-validation folds; and the
processor applies a calibration map to the confidence itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from otel_blame.attribution.calibration import Calibration, CalibrationPoint
from otel_blame.attribution.result import Attribution
from otel_blame.cli import main
from otel_blame.trajectory import Outcome, Task, Trajectory

WHO_AND_WHEN = Path(__file__).resolve().parents[3] / "shared" / "who_and_when" / "dev"
if not WHO_AND_WHEN.is_dir():  # a worktree beside main: ../shared from the repository's parent
    WHO_AND_WHEN = Path(__file__).resolve().parents[4] / "shared" / "who_and_when" / "dev"

# recorded figures (docs/benchmarks.md, "Attribution accuracy"): (agent, step) accuracy
# (measured 2026-11-26 with the shipped model; the Who&When figure is this test's own CV: Who&When
# alone, the campaigns not added to the training folds)
DEMO_CAMPAIGN = {"runs": 24, "seed": 11, "agent": 1.0}
# (re-measured 2026-11-28: the loader reads a log's "FINAL ANSWER:" line as its final output, which the
# causal reading follows back; Hand-Crafted 0.567 / 0.167 before, Algorithm-Generated 0.513 / 0.303)
WHO_AND_WHEN_CV = {"Algorithm-Generated": (0.553, 0.329), "Hand-Crafted": (0.5, 0.2)}
SLACK = 0.05  # "more than a few points below" fails
DEMO_SLACK_RUNS = 2  # on 24 runs a point is a run: two runs of slack


@pytest.mark.slow
def test_a_fixed_seed_demo_campaign_keeps_its_recorded_accuracy(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("autogen")
    from tests.inject.conftest import OTHER_FRAMEWORKS

    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", OTHER_FRAMEWORKS)
    result = CliRunner().invoke(
        main,
        [
            "inject",
            "--app",
            "demo",
            "--runs",
            str(DEMO_CAMPAIGN["runs"]),
            "--seed",
            str(DEMO_CAMPAIGN["seed"]),
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    floor = DEMO_CAMPAIGN["agent"] - DEMO_SLACK_RUNS / report["scored"]
    assert report["agent_accuracy"] >= floor, report["by_fault_kind"]


@pytest.mark.slow
def test_who_and_when_dev_under_fixed_folds_keeps_its_recorded_accuracy() -> None:
    if not WHO_AND_WHEN.is_dir():
        pytest.skip(f"the Who&When dev split is not beside the repository ({WHO_AND_WHEN})")
    pytest.importorskip("numpy")
    from otel_blame.bench import ranker_fit

    runs = ranker_fit.load_group(WHO_AND_WHEN)
    measured = ranker_fit.accuracy(ranker_fit.cross_validate(runs, k=5, seed=0))
    for subset, (agent, step) in WHO_AND_WHEN_CV.items():
        _, got_agent, got_step = measured[subset]
        assert got_agent >= agent - SLACK and got_step >= step - SLACK, (subset, measured[subset])


class _Fixed:
    """A method whose answer has a known confidence."""

    name = "fixed"

    def __init__(self, confidence: float) -> None:
        self.confidence = confidence

    def attribute(self, trajectory: Trajectory) -> Attribution:
        return Attribution(agent="a", step=0, confidence=self.confidence, reason="r.", method=self.name)


@pytest.mark.parametrize("raw", [0.2, 0.8])
def test_the_processor_maps_the_confidence_itself_through_the_calibration(tmp_path: Path, raw: float) -> None:
    from otel_blame.processor.attributor import AttributionRunner
    from otel_blame.processor.config import AttributionConfig

    # a steep, non-flat map: 0.2 -> 0.1 and 0.8 -> 0.9 (1 - 0.2 = 0.8 would map to 0.9 and back)
    calibration = Calibration(
        method="heuristic",
        target="agent",
        runs=20,
        points=[
            CalibrationPoint(raw=0.2, calibrated=0.1, runs=10, low=0.0, high=0.3),
            CalibrationPoint(raw=0.8, calibrated=0.9, runs=10, low=0.7, high=1.0),
        ],
    )
    path = tmp_path / "calibration.json"
    calibration.save(path)
    runner = AttributionRunner(AttributionConfig(method="heuristic", calibration=path))
    runner.method = _Fixed(raw)
    run = Trajectory.from_steps(
        [{"agent": "a", "content": "The answer is 41."}], task=Task(input="6 x 7?"), outcome=Outcome.FAILURE
    )
    outcome = runner.attribute(run)
    assert outcome.attribution is not None
    assert outcome.attribution.confidence == calibration.apply(raw) == (0.1 if raw < 0.5 else 0.9)
