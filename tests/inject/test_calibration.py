"""Calibration files: the isotonic fit, applying one, bad files, and the processor using one
(``attribution.calibration``) so ``blame.confidence`` is the calibrated value."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from otel_blame.attribution.calibration import Calibration, CalibrationError, CalibrationPoint, fit
from otel_blame.cli import main
from otel_blame.processor.attributor import AttributionRunner
from otel_blame.processor.config import ConfigError, load_config
from otel_blame.trajectory import Outcome, Trajectory


def test_the_fit_never_decreases_and_does_not_claim_certainty_from_few_runs():
    pairs = [(0.1, False), (0.2, True), (0.3, False), (0.6, True), (0.7, True), (0.9, True)]
    calibration = fit(pairs, method="heuristic", target="agent")
    values = [p.calibrated for p in calibration.points]
    assert values == sorted(values)
    assert 0 < values[0] and values[-1] < 1  # shrunk toward 1/2
    assert sum(p.runs for p in calibration.points) == len(pairs) == calibration.runs
    # flat outside the fitted range, linear inside
    assert calibration.apply(0.0) == values[0] and calibration.apply(1.0) == values[-1]
    low, high = calibration.points[0], calibration.points[-1]
    middle = calibration.apply((low.raw + high.raw) / 2)
    assert low.calibrated <= middle <= high.calibrated


def test_a_fit_needs_runs():
    with pytest.raises(ValueError, match="no attributed runs"):
        fit([], method="heuristic", target="agent")


def test_bad_calibration_files_are_named_with_what_is_wrong(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(CalibrationError, match="broken.json: not JSON"):
        Calibration.load(broken)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"format": "otel-blame-calibration/1", "method": "heuristic"}))
    with pytest.raises(CalibrationError, match="not an otel-blame calibration file"):
        Calibration.load(wrong)
    with pytest.raises(CalibrationError, match="cannot read"):
        Calibration.load(tmp_path / "missing.json")


def _flat(path, value: float, method: str = "heuristic"):  # noqa: ANN001, ANN202
    Calibration(
        method=method, target="agent", runs=5, points=[CalibrationPoint(raw=0.5, calibrated=value, runs=5)]
    ).save(path)


def _config(tmp_path, calibration, method: str = "heuristic"):  # noqa: ANN001, ANN202
    return load_config(
        environ={},
        overrides={
            "wal": {"dir": str(tmp_path / "wal")},
            "exporter": {"endpoint": "127.0.0.1:1"},
            "attribution": {"method": method, "calibration": str(calibration)},
        },
    )


def test_the_attribution_runner_applies_the_calibration(tmp_path):
    path = tmp_path / "calibration.json"
    _flat(path, 0.777)
    runner = AttributionRunner(_config(tmp_path, path).attribution)
    trajectory = Trajectory.from_steps(
        [{"agent": "user", "content": "What is 2 + 2?"}, {"agent": "solver", "content": "It is 5."}],
        outcome=Outcome.FAILURE,
    )
    outcome = runner.attribute(trajectory)
    assert outcome.attribution is not None and outcome.attribution.confidence == 0.777


def test_a_calibration_for_another_method_stops_the_start(tmp_path):
    path = tmp_path / "calibration.json"
    _flat(path, 0.5, method="all_at_once")
    with pytest.raises(ConfigError, match="fitted for method 'all_at_once'"):
        AttributionRunner(_config(tmp_path, path).attribution)
    with pytest.raises(ConfigError, match="attribution.calibration: .*cannot read"):
        AttributionRunner(_config(tmp_path, tmp_path / "missing.json").attribution)


def test_the_processor_writes_the_calibrated_confidence(tmp_path):
    pytest.importorskip("autogen")
    path = tmp_path / "calibration.json"
    _flat(path, 0.777)
    config = tmp_path / "processor.yaml"
    config.write_text(f"attribution:\n  method: heuristic\n  calibration: {path}\n")
    result = CliRunner().invoke(
        main, ["inject", "--json", "--runs", "2", "--seed", "5", "--processor-config", str(config)]
    )
    report = json.loads(result.stdout)
    predictions = [r["prediction"] for r in report["results"] if r["prediction"]]
    assert predictions, report["statuses"]
    assert {p["confidence"] for p in predictions} == {0.777}


def test_runs_with_the_same_confidence_get_one_calibrated_value():
    pairs = [(0.14, False), (0.14, True), (0.14, False), (0.14, True), (0.3, False), (0.9, True)]
    calibration = fit(pairs, method="heuristic", target="agent")
    first = calibration.points[0]
    assert first.runs >= 4  # the four runs at 0.14 are never split by their outcome
    assert calibration.apply(0.14) == pytest.approx(first.calibrated)
    assert 0.3 < calibration.apply(0.14) < 0.6


def test_inside_a_pooled_block_the_map_is_flat():
    pairs = [(0.15, True), (0.3, False), (0.4, False), (0.42, False), (0.9, True), (0.9, True)]
    calibration = fit(pairs, method="heuristic", target="agent")
    block = calibration.points[0]
    assert (block.low, block.high, block.runs) == (0.15, 0.42, 4)
    assert calibration.apply(0.15) == calibration.apply(0.3) == calibration.apply(0.42) == block.calibrated
    assert block.calibrated < calibration.apply(0.6) < calibration.points[-1].calibrated
