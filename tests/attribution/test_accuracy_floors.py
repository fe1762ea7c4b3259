"""Regression floors: the offline default may not drop more than a few points below its recorded
figures (docs/benchmarks.md) on a fixed-seed demo campaign (real AG2 runs, scripted LLM, through the
in-process processor); and the processor applies a calibration map to the confidence itself. The floors
on real failures are in tests/real_data (they need the data sets beside the repository)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from otel_blame.attribution.calibration import Calibration, CalibrationPoint
from otel_blame.attribution.result import Attribution
from otel_blame.cli import main
from otel_blame.trajectory import Outcome, Task, Trajectory

# recorded figures (docs/benchmarks.md, "Attribution accuracy"): (agent, step) accuracy
# (measured 2026-11-26 with the shipped model; the Who&When figure is this test's own CV: Who&When
# alone, the campaigns not added to the training folds)
DEMO_CAMPAIGN = {"runs": 24, "seed": 11, "agent": 1.0}
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
